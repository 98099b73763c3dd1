"""The Chunks tab's chunk map as markup (workbench/viz/chunk_map.py): the same cells, classes, colours and lines as the
plotly figure the notebooks and the exported page draw (credit_view.chunk_figure)."""

from __future__ import annotations

from dataclasses import replace
from xml.etree import ElementTree

import pytest
import torch
from plotly.colors import sample_colorscale

from workbench.rl.credit_stats import ALIGNED, MISATTRIBUTED, UNDETERMINED
from workbench.viz import credit_view as cv
from workbench.viz.chunk_map import chunk_map_hint, chunk_map_html, credit_colour, nice_step


@pytest.fixture(scope="module")
def credit(random_policy):
    from support import PROMPT, mean_red

    from workbench.flow.sampler import sample_group
    from workbench.flow.trajectory import SamplingConfig
    from workbench.rl.credit import measure_credit

    group = sample_group(random_policy, PROMPT, SamplingConfig(group=3, steps=4, seed=1))
    return measure_credit(random_policy, group, mean_red, continuations=3, chunks="1,3")


def parse(markup: str) -> ElementTree.Element:
    return ElementTree.fromstring(markup)  # well-formed: every attribute and text escaped


def rgb(text: str) -> tuple[int, ...]:
    return tuple(int(round(float(v))) for v in text[text.index("(") + 1:-1].split(","))


def test_colours_are_plotlys_rdbu_interpolation():
    scale = cv.red_blue()
    for value in (-1.0, -0.73, -0.2, 0.0, 0.05, 0.5, 0.99, 1.0):
        expected = sample_colorscale([list(stop) for stop in scale], [(value + 1) / 2])[0]  # plotly's own
        assert rgb("rgb({},{},{})".format(*credit_colour(value, 1.0))) == pytest.approx(rgb(expected), abs=1)
    assert credit_colour(-5.0, 1.0) == credit_colour(-1.0, 1.0)  # beyond the ends: the end colours
    assert credit_colour(0.0, 0.3) == (247.0, 247.0, 247.0)  # zmid = 0: white-ish at 0 whatever the scale


def test_tick_spacing():
    assert [nice_step(16, 10), nice_step(8, 10), nice_step(0.09, 5), nice_step(2e-6, 5)] == pytest.approx(
        [2, 1, 0.02, 5e-7])


def test_the_map_draws_the_figures_cells_classes_and_lines(credit):
    z = 0.0  # every cell with credit not 0 determined: misattributed or aligned
    root = parse(chunk_map_html(credit, z))
    figure = cv.chunk_figure(credit, z)
    heat = figure.data[0]
    cells = root.findall(".//rect[@class='cell']")
    assert len(cells) == 3 * 2  # G x K, row by row
    for n, cell in enumerate(cells):
        i, k = divmod(n, 2)
        tip = cell.find("title").text
        assert tip.startswith(f"traj {i}, chunk {k}") and f"credit {heat.z[i][k]:.4f} ± " in tip
        assert f"({heat.customdata[i][k][1]})" in tip  # the class the plotly figure's hover names
    assert "(steps 1-3)" in cells[1].find("title").text and "(steps" not in cells[0].find("title").text
    classes = credit.chunk_classes(z)
    assert {int(c) for c in classes.flatten()} <= {MISATTRIBUTED, ALIGNED}
    crosses, dots = (root.findall(f".//svg[@class='wb-map']//{tag}") for tag in ("path", "circle"))  # not the legend's
    assert len(crosses) == int((classes == MISATTRIBUTED).sum()) and len(dots) == int((classes == ALIGNED).sum())
    marks = [x for s in figure.data if s.type == "scatter" for x in s.x if x is not None]  # not its legend's
    assert len(marks) == len(crosses) + len(dots)  # the figure's marks, as many
    lines = root.findall(".//line[@class='boundary']")
    assert [float(line.get("data-x")) for line in lines] == [s.x0 for s in figure.layout.shapes] == [0.5]
    scale = float(credit.chunk_credit.abs().max())
    for cell, value in zip(cells, credit.chunk_credit.flatten().tolist()):
        assert rgb(cell.get("fill")) == rgb("rgb({},{},{})".format(*credit_colour(value, scale)))
    title = root.find("div[@class='wb-map-title']").text
    assert title == figure.layout.title.text == "Chunk credit V(end) - V(start), classified at z = 0 (M=3)"


def test_undetermined_cells_are_covered_and_uncounted_ones_veiled(credit):
    strict = parse(chunk_map_html(credit, 1e6))  # nothing significant: every cell undetermined, no marks
    assert (credit.chunk_classes(1e6) == UNDETERMINED).all()
    assert not strict.findall(".//svg[@class='wb-map']//circle")
    assert all("(undetermined)" in c.find("title").text for c in strict.findall(".//rect[@class='cell']"))
    grey = rgb(cv.UNDETERMINED_COLOR)[:3]
    for cell in strict.findall(".//rect[@class='cell']"):  # 92 % grey over the credit colour
        assert all(abs(a - b) <= 0.08 * 255 + 1 for a, b in zip(rgb(cell.get("fill")), grey))
    untrained = replace(credit, trained=torch.tensor([False, True, True, True]))  # chunk 0 is step 0 alone
    cells = parse(chunk_map_html(untrained, 0.0)).findall(".//rect[@class='cell']")
    veiled = [c for c in cells if "(not counted)" in c.find("title").text]
    assert len(veiled) == 3 and all(", chunk 0: " in c.find("title").text for c in veiled)
    assert all(min(rgb(c.get("fill"))) >= 0.8 * 255 for c in veiled)  # 80 % white over the colour


def test_the_hint_is_escaped():
    hint = parse(chunk_map_hint("measure credit <first>"))
    assert hint.find("div[@class='wb-map-hint']").text == "measure credit <first>"
