"""The Objectives tab's maps as markup (workbench/viz/push_maps.py): the maps, values, colours, clip marks, chunk
lines, titles and outline of the plotly figure the notebooks and the exported page draw (objective_maps_figure)."""

from __future__ import annotations

import base64
import io
import json
from xml.etree import ElementTree

import pytest
import torch
from PIL import Image

from workbench.rl.explain import explain
from workbench.rl.objectives import ObjectiveSettings
from workbench.viz.explain_plots import objective_maps_figure, selection_outline
from workbench.viz.push_maps import maps_hint, outline, panel_origin, push_maps_html, with_outline
from workbench.viz.svg import css, rgb, scale_colour

G, T = 3, 4


@pytest.fixture(scope="module")
def rows():
    """At ratio 1 and after a move large enough that some units clip, chunks [1, 3]."""
    torch.manual_seed(0)
    old = -1 + 0.1 * torch.randn(G, T)
    moved = old + 0.2 * torch.randn(G, T)
    adv = torch.tensor([1.0, -0.4, -0.6])
    settings = ObjectiveSettings(clip_low=0.02, chunks=[1, 3])
    return [("ratio1", "at ratio 1", explain(old, old, adv, settings)),
            ("moved", "after 1 update", explain(moved, old, adv, settings))]


@pytest.fixture(scope="module")
def credits():
    torch.manual_seed(1)
    return 0.1 * torch.randn(G, T)


def panels(markup: str) -> dict[str, ElementTree.Element]:
    root = ElementTree.fromstring(markup)  # well-formed: every attribute and text escaped
    return {g.get("data-trace"): g for g in root.iter("g") if g.get("class") == "panel"}


def cells_image(panel: ElementTree.Element) -> Image.Image:
    """The map's cells: the PNG of the panel's one image."""
    (image,) = panel.findall("image[@class='cells']")
    head, data = image.get("href").split(",", 1)
    assert head == "data:image/png;base64"
    return Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB")


def test_the_maps_draw_the_figures_maps_values_and_colours(rows, credits):
    figure = objective_maps_figure(rows, credits)
    heat = {tr.name: tr for tr in figure.data if tr.type == "heatmap"}
    drawn = panels(push_maps_html(rows, credits))
    assert set(drawn) == set(heat)  # "<row>|<objective>" for every map, "credit" and "log-ratio"
    scale = figure.layout.coloraxis.cmax
    for name, panel in drawn.items():
        z = json.loads(panel.get("data-z"))
        assert torch.tensor(z) == pytest.approx(torch.tensor(heat[name].z), rel=1e-3, abs=1e-12), name
        if "|" in name:  # the shared push scale; the first column's maps each on their own
            image = cells_image(panel)
            assert image.size == (T, G)  # one pixel a cell: columns are steps, rows trajectories
            values = torch.tensor(heat[name].z).flatten().tolist()  # row by row
            for pixel, value in zip(image.get_flattened_data(), values):
                assert pixel == rgb(css(scale_colour(value, scale)))[:3], name


def test_clipped_units_and_chunk_boundaries_are_marked(rows, credits):
    figure = objective_maps_figure(rows, credits)
    root = ElementTree.fromstring(push_maps_html(rows, credits))
    clipped = sum(int(ex.clipped.sum()) for _, _, ex in rows)
    assert clipped > 0  # the moved row clips somewhere: the check below counts something
    marks = [p.get("d").count("M") for p in root.iter("path")]  # one x (one move) per clipped unit
    scatter = [x for tr in figure.data if tr.type == "scatter" for x in tr.x]
    assert sum(marks) == clipped == len(scatter)
    dashed = [line for line in root.iter("line") if line.get("stroke-dasharray")]
    assert len(dashed) == len([s for s in figure.layout.shapes if s.type == "line"]) == 2  # chunk_grpo, per row


def test_titles_name_each_map_and_its_correlation(rows, credits):
    figure = objective_maps_figure(rows, credits)
    texts = [t.text for t in ElementTree.fromstring(push_maps_html(rows, credits)).iter("text")]
    words = set(" ".join(texts).split())  # the markup's words (the notebook's plotly figure
    for annotation in figure.layout.annotations:  # wraps its row titles into short lines: compare word by word)
        for word in annotation.text.replace("<b>", " ").replace("</b>", " ").replace("<br>", " ").split():
            word = word if word in words else word + "(i,t)"  # "log-ratio l" names the map "l(i,t)" there
            assert word in words, (word, annotation.text)
    assert 'id="wb-maps-push"' in push_maps_html(rows, credits)  # the shared scale's bar
    each = ElementTree.fromstring(push_maps_html(rows, credits, scale_each=True))
    assert not [g for g in each.iter("linearGradient") if g.get("id") == "wb-maps-push"]
    assert any((t.text or "").startswith("scale ±") for t in each.iter("text"))  # each map names its own scale


def test_the_outline_sits_on_the_selected_cell(rows, credits):
    markup = push_maps_html(rows, credits)
    assert "wb-outline" not in with_outline(markup, rows, None)
    for selected in (("moved", "gspo", 2, 3), ("ratio1", "chunk_grpo", 0, 0)):
        place = outline(rows, selected)
        assert place == {"trace": f"{selected[0]}|{selected[1]}", "i": selected[2], "t": selected[3]}
        root = ElementTree.fromstring(with_outline(markup, rows, place))
        box = root.find(".//rect[@class='wb-outline']")
        panel = panels(with_outline(markup, rows, place))[place["trace"]]
        x, y, w, h = (float(panel.get(f"data-{k}")) for k in "xywh")
        assert (float(box.get("x")), float(box.get("y"))) == pytest.approx((x + place["t"] * w / T,
                                                                            y + place["i"] * h / G), abs=0.1)
        assert (float(box.get("width")), float(box.get("height"))) == pytest.approx((w / T, h / G), abs=0.1)
        shape = selection_outline(rows, selected)  # the plotly figure outlines the same cell of the same map
        assert (shape["x0"] + 0.5, shape["y0"] + 0.5) == (place["t"], place["i"])
    assert outline(rows, ("moved", "nope", 0, 0)) is None and outline(rows, None) is None


def test_maps_sit_in_a_grid_left_to_right_and_row_by_row(rows, credits):
    drawn = panels(push_maps_html(rows, credits))
    names = rows[0][2].names
    for r, (key, _, _) in enumerate(rows):
        for o, name in enumerate(names):
            x, y = panel_origin(r, o + 1, len(names) + 1)
            assert (float(drawn[f"{key}|{name}"].get("data-x")), float(drawn[f"{key}|{name}"].get("data-y"))) == \
                pytest.approx((x, y), abs=0.1)


def test_without_credit_and_the_hint():
    torch.manual_seed(2)
    old = -1 + 0.1 * torch.randn(G, T)
    ex = explain(old, old, torch.tensor([1.0, 0.0, -1.0]), ObjectiveSettings(clip_low=0.02, chunks=[2, 2]))
    root = ElementTree.fromstring(push_maps_html([("ratio1", "at ratio 1", ex)], None))
    assert "no credit yet" in [t.text for t in root.iter("text")] and "credit" not in panels(ElementTree.tostring(
        root, encoding="unicode"))
    assert ElementTree.fromstring(maps_hint("press <Compute>")).find("div").text == "press <Compute>"
