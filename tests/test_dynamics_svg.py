"""The Chunks tab's temporal-dynamics curve as markup (workbench/viz/dynamics_svg.py): the title, boundaries and
points of the plotly figure the notebooks and the exported page draw (plots.dynamics_figure); a column per step."""

from __future__ import annotations

from xml.etree import ElementTree

import pytest
import torch

from workbench.rl.chunking import chunk_boundaries
from workbench.viz.dynamics_svg import dynamics_hint, dynamics_html
from workbench.viz.plots import dynamics_figure

T = 8
MEAN = torch.linspace(0.02, 0.3, T) ** 0.5  # (T,)
LOW, HIGH = 0.8 * MEAN, 1.3 * MEAN


def drawn(sizes: list[int]) -> ElementTree.Element:
    return ElementTree.fromstring(dynamics_html(MEAN, LOW, HIGH, sizes, 16, 2))  # well-formed: everything escaped


@pytest.mark.parametrize("sizes", [[1, 2, 2, 3], [8], [4, 4], [1] * 8])
def test_the_curve_draws_the_figures_title_lines_and_points(sizes):
    root = drawn(sizes)
    figure = dynamics_figure(MEAN, LOW, HIGH, sizes, 16, 2)
    texts = [t.text for t in root.iter("text")]
    title, sub = figure.layout.title.text.removesuffix("</sup>").split("<br><sup>")
    assert texts[:2] == [title, sub] == [f"Temporal dynamics and chunks {sizes}",
                                          "the model's curve: 16 trajectories of 2 prompts, not the Generate group"]
    lines = [float(line.get("data-x")) for line in root.iter("line") if line.get("class") == "boundary"]
    assert lines == [shape.x0 for shape in figure.layout.shapes] == [b - 0.5 for b in chunk_boundaries(sizes)]
    assert len(root.find(".//polyline").get("points").split()) == len(figure.data[1].y) == T  # the mean, one per step
    assert len(root.find(".//polygon").get("points").split()) == len(figure.data[0].y) == 2 * T  # its 10-90 % band


def test_every_step_has_one_column_to_click_and_lines_sit_between_columns():
    root = drawn([1, 2, 2, 3])
    columns = root.findall(".//rect[@class='step']")
    assert [int(c.get("data-step")) for c in columns] == list(range(T))
    edges = [(float(c.get("x")), float(c.get("x")) + float(c.get("width"))) for c in columns]
    assert all(b[0] == pytest.approx(a[1], abs=0.15) for a, b in zip(edges, edges[1:]))  # side by side, no gap
    assert "click to toggle the chunk boundary after step 3" in columns[3].find("title").text
    for line in (line for line in root.iter("line") if line.get("class") == "boundary"):
        after = int(float(line.get("data-x")) + 0.5) - 1  # the line at b - 0.5 follows step b - 1
        assert float(line.get("x1")) == pytest.approx(edges[after][1], abs=0.15)
        assert line.get("pointer-events") == "none"  # a click on a line reaches the column under it
    dots = root.findall(".//circle")
    ys = [float(d.get("cy")) for d in dots[:T]]
    assert ys == sorted(ys, reverse=True)  # an increasing curve climbs up the drawing


def test_the_hint_is_escaped():
    assert ElementTree.fromstring(dynamics_hint("open <the> tab")).find("div").text == "open <the> tab"
