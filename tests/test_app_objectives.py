"""The Objectives tab, direct boundary editing and the Learn walk, through their handlers (no browser)."""

from __future__ import annotations

import json
from dataclasses import replace
from xml.etree import ElementTree

import app_support as base
import gradio as gr
import plotly.graph_objects as go
import pytest
import torch

from workbench.core.errors import WorkbenchError
from workbench.rl.chunking import CHUNKERS, chunk_boundaries
from workbench.rl.explain import explain
from workbench.rl.objectives import OBJECTIVES, ObjectiveSettings
from workbench.ui import handlers as h
from workbench.ui import learn, step_handlers
from workbench.ui import objectives as ob
from workbench.ui.figures import clicked_point
from workbench.ui.formulas import cell, closed_form, formula_markdown
from workbench.ui.state import Session
from workbench.viz.push_maps import outline

PROMPT, is_skip, msg = base.PROMPT, base.is_skip, base.msg


# --------------------------------------------------------------------------- clicks
def test_clicked_points_from_the_page_and_from_api_callers():
    assert clicked_point('{"trace": "moved|gspo", "x": 3, "y": 1}') == {"trace": "moved|gspo", "x": 3, "y": 1}
    assert clicked_point({"trace": "moved|gspo", "x": 3, "y": 1}) == {"trace": "moved|gspo", "x": 3, "y": 1}
    assert clicked_point("5")["x"] == 5 and clicked_point(5.0)["x"] == 5.0
    for bad in ("abc", '{"y": 1}', None, {"y": 1}):
        with pytest.raises(WorkbenchError):
            clicked_point(bad)


def test_clicking_the_curve_toggles_a_boundary(wb, sampled):
    curve, chunk_map, spec, rates, session, status = h.chunks_toggle(wb, "2", sampled)  # sizes [1, 1, 1, 1]
    assert status == "✓ removed the boundary after step 2: chunks 1,1,2" and spec == "1,1,2"
    assert session.sizes == [1, 1, 2] and session.credit.sizes == [1, 1, 2]
    assert base.curve_drawn(curve)[0] == [b - 0.5 for b in chunk_boundaries([1, 1, 2])]  # the curve's new lines
    boundaries = ElementTree.fromstring(chunk_map).findall(".//line[@class='boundary']")  # and the map's
    assert [float(line.get("data-x")) for line in boundaries] == [b - 0.5 for b in chunk_boundaries([1, 1, 2])]
    r = sampled.credit.rechunk([1, 1, 2]).rates(2.0).chunk
    assert f"plain sign rate {100 * r.plain:.1f} %" in rates
    again = h.chunks_toggle(wb, json.dumps({"trace": "mean L1_rel", "x": 2, "y": 0.1}), session)
    assert again[-1] == "✓ added the boundary after step 2: chunks 1,1,1,1" and again[-2].sizes == [1, 1, 1, 1]
    clicked = h.curve_clicked(wb)(session, gr.EventData(None, {"step": 2}))  # the page's click: the event's data
    assert clicked[-1] == again[-1] and clicked[-2].sizes == [1, 1, 1, 1]
    assert "a click must be" in msg(h.curve_clicked(wb)(session, gr.EventData(None, {})))  # no step: a message
    for bad, why in (("3", "the last step ends the last chunk"), ("x", "a click must be"), ("1.5", "whole number")):
        out = h.chunks_toggle(wb, bad, session)
        assert why in msg(out) and all(is_skip(v) for v in out[:-1])


# --------------------------------------------------------------------------- the Objectives tab
@pytest.fixture(scope="module")
def computed(wb, sampled):
    """The Objectives view of the sampled group after 1 inner update (random-init model)."""
    return ob.objectives_compute(wb, 1, 1e-3, 1e-4, "chunk_grpo", None, sampled)


def panels(maps) -> dict:
    """trace -> its map's values (G, T) in the maps' markup (a gr.HTML update, viz/push_maps.py)."""
    root = ElementTree.fromstring(maps.value)
    return {g.get("data-trace"): torch.tensor(json.loads(g.get("data-z")), dtype=torch.float)
            for g in root.iter("g") if g.get("class") == "panel"}


def outline_cell(maps) -> tuple[float, float] | None:
    """(x, y) of the gold outline in the maps' markup; None without one."""
    box = ElementTree.fromstring(maps.value).find(".//rect[@class='wb-outline']")
    return None if box is None else (float(box.get("x")), float(box.get("y")))


def test_objectives_need_a_group_and_valid_settings(wb, sampled):
    assert "no group yet" in msg(ob.objectives_compute(wb, 1, 1e-3, 1e-4, "chunk_grpo", None, Session()))
    for args, why in (((-1, 1e-3, 1e-4, "chunk_grpo"), "inner updates N must be a whole number >= 0"),
                      ((1, 0, 1e-4, "chunk_grpo"), "learning rate must be > 0"),
                      ((1, 1e-3, 1.5, "chunk_grpo"), "clip range ε must be in [0, 1), got 1.5"),
                      ((1, 1e-3, 1e-4, "trpo"), "unknown objective 'trpo'")):
        out = ob.objectives_compute(wb, *args, None, sampled)
        assert why in msg(out) and all(is_skip(v) for v in out[:-1])


def test_objectives_maps_summary_and_formula(sampled, computed):
    maps, summary, formula, view, status = computed
    names = list(view.advantages)
    assert status.startswith(f"✓ explained {len(names)} objectives on G=3, T=4 after 1 updates of chunk_grpo")
    assert set(names) == set(OBJECTIVES.names()) and view.updates == 1 and view.inner_sizes == sampled.sizes
    drawn = panels(maps)
    assert {f"{k}|{n}" for k in ("ratio1", "moved") for n in names} | {"credit", "log-ratio"} == set(drawn)
    rows = ob.explanations(view, sampled.sizes)
    moved = rows[1][2]
    for o, name in enumerate(names):  # every map is -w of its objective (4 digits); at ratio 1 nothing clips
        assert drawn[f"moved|{name}"] == pytest.approx(-moved.weight[o], rel=1e-3, abs=1e-12)
        assert not bool(rows[0][2].clipped[o].any())
    assert drawn["credit"] == pytest.approx(sampled.credit.step_credit, rel=1e-3, abs=1e-12)
    assert 'id="wb-maps-push"' in maps.value  # one colour bar: one symmetric colour scale for every objective's map
    assert maps.props["selected"] == {"trace": "moved|chunk_grpo", "i": 0, "t": 0} and outline_cell(maps)
    corr = moved.correlation(sampled.credit.step_credit)
    line = next(x for x in summary.splitlines() if x.startswith("| gspo |"))
    value = corr[moved.index("gspo")]
    assert line.endswith(f"| {value:+.2f} |" if value == value else "| n/a |")
    assert "<b>chunk_grpo</b> at trajectory i = 0, step t = 0, after 1 update" in formula  # HTML, equations as MathML
    assert formula.count('<math xmlns="http://www.w3.org/1998/Math/MathML" display="block">') >= 4


def test_another_press_on_the_same_group_reuses_its_advantages(wb, sampled, computed, monkeypatch):
    """Changing N, the learning rate or the inner objective runs the inner updates again, not the group's advantages
    (ppo's fitted critic, dense_grpo's look-ahead): the previous view's, the same numbers as computed anew. A view
    of another group is not reused."""
    import workbench.train.explained as step_compare  # where the tab's advantages call per_step_advantages

    calls, real = [], step_compare.per_step_advantages
    monkeypatch.setattr(step_compare, "per_step_advantages", lambda *a, **k: calls.append(1) or real(*a, **k))
    again = ob.objectives_compute(wb, 2, 1e-3, 1e-4, "ppo", computed[3], sampled)
    assert again[-1].startswith("✓ explained") and "after 2 updates of ppo" in again[-1] and calls == []
    fresh = ob.objectives_compute(wb, 2, 1e-3, 1e-4, "ppo", None, sampled)
    assert calls == [1] and set(fresh[3].advantages) == set(again[3].advantages)
    assert all(torch.equal(again[3].advantages[n], a) for n, a in fresh[3].advantages.items())
    assert torch.equal(again[3].moved, fresh[3].moved)
    other = h.generate(wb, PROMPT, 3, 4, 0.7, 5, "adherence", sampled)[-2]
    assert ob.objectives_compute(wb, 1, 1e-3, 1e-4, "ppo", again[3], other)[-1].startswith("✓ explained")
    assert calls == [1, 1]


def test_selecting_cells_draws_the_maps_once_and_only_moves_the_outline(wb, sampled, computed, monkeypatch):
    """A cell chosen through the API outlines the cell on maps drawn once for the view: the markup is the one
    `push_maps_html` draws with that cell outlined."""
    from workbench.viz.push_maps import push_maps_html, with_outline

    builds, real = [], ob.push_maps_html
    monkeypatch.setattr(ob, "push_maps_html", lambda *a, **k: builds.append(1) or real(*a, **k))
    view = computed[3]
    rows = ob.explanations(view, sampled.sizes)
    for name, key, i, t in (("gspo", "moved", 2, 3), ("chunk_grpo", "ratio1", 0, 0), ("dr_grpo", "moved", 1, 1)):
        maps, formula, view, status = ob.objectives_cell(wb, name, key, i, t, view, sampled)
        assert status == f"✓ {name} at i={i}, t={t}"
        place = {"trace": f"{key}|{name}", "i": i, "t": t}
        assert maps.props["selected"] == place
        assert maps.value == with_outline(push_maps_html(rows, sampled.credit.step_credit), rows, place)
    before = len(builds)
    assert before <= 1  # the view's maps, once (none where the computed view's were kept already)
    eached = ob.objectives_scale(wb, "each", view, sampled)  # another colour scale: other maps
    assert len(builds) == before + 1 and eached[-1].startswith("✓ each map")


def test_objectives_follow_schedule_edits_and_new_groups(wb, sampled, computed):
    view = computed[3]
    session = h.chunks_from_spec(wb, "2,2", sampled)[-2]
    maps, summary, formula, view, status = ob.objectives_view(wb, view, session)
    assert status == "✓ chunks 2,2"
    root = ElementTree.fromstring(maps.value)
    lines = [line for line in root.iter("line") if line.get("stroke-dasharray")]  # the maps' chunk boundaries
    chunk_grpo = [g for g in root.iter("g") if (g.get("data-trace") or "").endswith("|chunk_grpo")]
    assert len(lines) == 2 and len(chunk_grpo) == 2  # one boundary in each row's chunk_grpo map, half-way (T=4)
    for line, panel in zip(lines, chunk_grpo):
        assert float(line.get("x1")) == pytest.approx(float(panel.get("data-x")) + float(panel.get("data-w")) / 2,
                                                      abs=0.1)
    fresh = h.generate(wb, PROMPT, 3, 4, 0.7, 5, "adherence", session)[-2]
    stale = ob.objectives_view(wb, view, fresh)  # the old group's maps are replaced, not left under "Compute"
    assert stale[1] == ob.STALE and stale[2] == "" and stale[3] is None
    assert "press Compute" in stale[0].value and "<svg" not in stale[0].value
    assert is_skip(ob.objectives_view(wb, None, fresh)[0])
    assert "press Compute" in msg(ob.objectives_cell(wb, "gspo", "moved", 0, 0, view, fresh))


def test_a_colour_scale_per_objective_and_the_note_on_the_shared_one(wb, sampled, computed):
    view = computed[3]
    shared, _, _ = ob.objectives_scale(wb, "shared", view, sampled)
    assert is_skip(shared)  # already on the shared scale: nothing to redraw
    maps, each, status = ob.objectives_scale(wb, "each", view, sampled)
    assert each.scale_each and status == "✓ each map on its own colour scale"
    assert 'id="wb-maps-push"' not in maps.value  # no shared bar: every map's title gives its own scale
    rows = ob.explanations(view, sampled.sizes)
    texts = [t.text for t in ElementTree.fromstring(maps.value).iter("text")]
    for o, name in enumerate(rows[0][2].names):
        own = max(float(ex.weight[o].abs().max()) for _, _, ex in rows)
        assert texts.count(f"scale ±{own:.2g}") >= 2 if own > 0 else True, name  # in both rows
    top = max(float(ex.weight.abs().max()) for _, _, ex in rows)
    shared = [t.text for t in ElementTree.fromstring(ob._render(view, sampled, "")[0].value).iter("text")]
    for o, name in enumerate(rows[0][2].names):
        own = max(float(ex.weight[o].abs().max()) for _, _, ex in rows)
        noted = own > 0 and top / own >= 10
        assert (f"max 1/{top / own:.0f} of scale" in shared) == noted if own > 0 else True, (name, top / own)
    assert "'shared' or 'each'" in msg(ob.objectives_scale(wb, "nope", view, sampled))


def test_selecting_a_cell_by_controls_and_by_click(wb, sampled, computed):
    view = computed[3]
    maps, formula, view2, status = ob.objectives_cell(wb, "gspo", "ratio1", 2, 1, view, sampled)
    assert status == "✓ gspo at i=2, t=1" and view2.selected == ("ratio1", "gspo", 2, 1)
    assert "<b>gspo</b> at trajectory i = 2, step t = 1, at ratio 1" in formula
    panel = next(g for g in ElementTree.fromstring(maps.value).iter("g") if g.get("data-trace") == "ratio1|gspo")
    x, y, w, height = (float(panel.get(f"data-{k}")) for k in "xywh")
    assert outline_cell(maps) == pytest.approx((x + 1 * w / 4, y + 2 * height / 3), abs=0.1)  # t = 1 of 4, i = 2 of 3
    assert "steps 0..3" in msg(ob.objectives_cell(wb, "gspo", "ratio1", 0, 4, view, sampled))
    assert "unknown objective" in msg(ob.objectives_cell(wb, "nope", "ratio1", 0, 0, view, sampled))
    out = ob.objectives_click(wb, json.dumps({"trace": "moved|dapo", "x": 3, "y": 1}), view, sampled)
    assert out[:4] == ("dapo", "moved", 1, 3) and out[-1] == "✓ dapo at i=1, t=3"
    assert "<b>dapo</b> at trajectory i = 1, step t = 3" in out[5]
    rows = ob.explanations(view, sampled.sizes)  # the click sends no maps: only the outline's new place
    assert out[4].value is None and out[4].props == {"selected": {"trace": "moved|dapo", "i": 1, "t": 3}}
    assert outline(rows, out[6].selected) == out[4].props["selected"]
    clicked = ob.maps_clicked(wb)(view, sampled, gr.EventData(None, {"trace": "moved|dapo", "x": 3, "y": 1}))
    assert clicked[:4] == out[:4] and clicked[4].props == out[4].props and clicked[-1] == out[-1]  # the page's click
    chosen = ob.objectives_select(wb, "gspo", "ratio1", 2, 1, view, sampled)  # the controls in the page: the same
    assert (chosen[1], chosen[2].selected, chosen[3]) == (formula, view2.selected, status)
    assert chosen[0].value is None and chosen[0].props["selected"] == maps.props["selected"]
    assert "steps 0..3" in msg(ob.objectives_select(wb, "gspo", "ratio1", 0, 4, view, sampled))
    assert "click a map of an objective" in msg(ob.objectives_click(wb, '{"trace": "credit", "x": 0, "y": 0}',
                                                                   view, sampled))


def test_a_click_explains_the_maps_once_per_schedule(wb, sampled, computed, monkeypatch):
    """The maps' explanations are kept for the view's last schedule, shared by the views a click or a scale makes."""
    import workbench.train.explained as explained  # where the tab's rows call explain

    calls, real = [], explained.explain
    monkeypatch.setattr(explained, "explain", lambda *a, **k: calls.append(1) or real(*a, **k))
    view = replace(computed[3], explained={})  # nothing kept yet
    rows = ob.explanations(view, sampled.sizes)
    assert len(calls) == 2  # one per row: at ratio 1, after the updates
    out = ob.objectives_click(wb, json.dumps({"trace": "moved|dapo", "x": 3, "y": 1}), view, sampled)
    chosen = ob.objectives_select(wb, "gspo", "ratio1", 2, 1, out[6], sampled)
    assert chosen[-1] == "✓ gspo at i=2, t=1" and len(calls) == 2 and ob.explanations(chosen[2], sampled.sizes) is rows
    other = ob.explanations(chosen[2], [1, 3])  # another schedule: explained again, and kept instead
    assert len(calls) == 4 and list(view.explained) == [(1, 3)]
    fresh = ob._explain(view, [1, 3])
    for (key, title, ex), (key2, title2, ex2) in zip(other, fresh):
        assert (key, title) == (key2, title2) and torch.equal(ex.weight, ex2.weight)


@pytest.mark.parametrize("dropped", [False, True])  # True: trajectory 1 trains no step (a dropped row, B < G)
@pytest.mark.parametrize("spread", [0.0, 0.05])
def test_the_formula_agrees_with_autograd_on_every_cell(spread, dropped):
    gen = torch.Generator().manual_seed(0)
    old = -torch.rand(4, 6, generator=gen, dtype=torch.float64)
    new = old + spread * torch.randn(4, 6, generator=gen, dtype=torch.float64)
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[2, 3:] = False
    mask[1] = not dropped
    ex = explain(new, old, torch.tensor([1.2, -0.3, 0.8, -1.7], dtype=torch.float64),
                 ObjectiveSettings(clip_low=0.02, clip_high=0.03, chunks=[2, 1, 3]), step_mask=mask)
    for name in ex.names:
        for i in range(4):
            for t in range(6):
                c = cell(ex, name, i, t)
                assert closed_form(c) == pytest.approx(c.weight, rel=1e-9, abs=1e-15), (name, i, t)
                text = formula_markdown(c, "after 1 update")
                assert f"**{name}** at trajectory i = {i}, step t = {t}" in text and f"{c.weight:.4g}" in text
    clipped = ex.clipped[ex.index("step_grpo")].nonzero().tolist()  # (n, 2) cells (i, t)
    assert bool(clipped) == bool(spread)
    for i, t in clipped:
        assert r"\text{clipped: } w_{i,t} = 0" in formula_markdown(cell(ex, "step_grpo", i, t), "after 1 update")


# --------------------------------------------------------------------------- the Learn walk
def test_learn_walk_streams_numbers_it_computed(wb, monkeypatch):
    monkeypatch.setitem(learn.LEARN, "group", 4)
    monkeypatch.setitem(learn.LEARN, "steps", 6)
    monkeypatch.setitem(learn.LEARN, "continuations", 2)
    stages = list(learn.learn_walk(wb, Session()))
    assert [s[-1][:1] for s in stages] == ["…", "…", "✓"]
    gallery, text1, fig1, text2, fig2 = stages[1][:5]
    session = stages[2][-2]
    credit, adv = session.credit, session.advantages
    assert len(gallery) == 4 and credit is not None and session.group.num_steps == 6
    best, worst = int(adv.argmax()), int(adv.argmin())
    assert f"image {best} gets A = {float(adv[best]):+.2f}" in text1 and isinstance(fig1, go.Figure)
    assert f"raised by {float(adv[best]) / (4 * 6):.4f}" in text2  # A / (B T) at ratio 1
    assert f"lowered by {-float(adv[worst]) / (4 * 6):.4f}" in text2
    assert torch.tensor(fig2.data[0].z) == pytest.approx(adv[:, None].expand(4, 6) / 24)
    text3, fig3, text4, fig4, text5 = stages[2][5:10]
    r = credit.rates(2.0).step
    if r.determined_cells == 0:  # every branch checks the sentence: a rate, a rate with its error, or none
        rate = "– (no determined cell)"
    elif r.misattributed_se != r.misattributed_se:  # one trajectory with determined cells: no error
        rate = f"{100 * r.misattributed:.0f} %"
    else:
        rate = f"{100 * r.misattributed:.0f} % ± {100 * r.misattributed_se:.0f} %"
    assert f"among them **{rate}** are misattributed" in text3
    assert f"{r.determined_cells} of the {r.cells} (image, step) cells are determined" in text3
    wrong = (credit.step_classes(2.0) == -1) & credit.step_valid
    per_image = wrong.sum(1)  # (G,): the sentence names the image with the most, or says there is none
    worst = int(per_image.argmax())
    if int(per_image[worst]) == 0:
        assert "No step of this group is determined against its image's advantage" in text3
    else:
        assert (f"Image {worst} (A = {float(adv[worst]):+.2f}) has {int(per_image[worst])} of its 6 steps "
                "misattributed") in text3
    assert "raises them anyway" not in text3  # read beside "0 misattributed steps" it was a contradiction
    assert "**This group against the set.**" in text4  # the example is one group of the shipped set
    assert f"by its sign alone would give {100 * r.plain:.0f} % ± {100 * r.plain_se:.0f} %" in text3
    sizes = CHUNKERS.get("temporal")(6)  # [1, 1, 1, 3]
    assert session.sizes == sizes and f"pushed {3 / 1:.1f} times as hard" in text4  # |last| / |first| = 3
    gspo = credit.rechunk([6]).rates(2.0).chunk  # one chunk: its credit is r_i - mean r, never against A
    assert gspo.by_construction and (gspo.determined_cells == 0 or gspo.misattributed == 0)
    assert (f"| one chunk (GSPO) | 6 | 0 % *by construction* | {gspo.determined_cells} of {gspo.cells} "
            "| 0 % *by construction* |") in text4
    assert "agrees with A by construction" in text4 and "equal power" in text4
    assert torch.tensor(fig4.data[1].z) == pytest.approx(credit.chunk_credit)
    assert "Chunks" in text5 and "Objectives" in text5 and isinstance(fig3, go.Figure)
    assert session.reference is credit  # the example's credit is Monte-Carlo: Attribution's per-step comparison
    # reads it (it answered "no Monte-Carlo credit for this group yet" after Learn, which says "it is also in the
    # other tabs")
    *_, status = step_handlers.compare_advantages(wb, step_handlers.FIT, session)
    assert status.startswith("✓ compared per-step advantages"), status


@pytest.mark.parametrize("spread", [0.0, 0.05])
def test_the_formula_agrees_with_autograd_for_per_step_advantages(spread):
    """ppo and dense_grpo with A_{i,t} (G, T): the panel's closed form equals autograd on every cell."""
    gen = torch.Generator().manual_seed(1)
    old = -torch.rand(4, 6, generator=gen, dtype=torch.float64)
    new = old + spread * torch.randn(4, 6, generator=gen, dtype=torch.float64)
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[0, :2] = False
    adv = {name: torch.randn(4, 6, generator=gen, dtype=torch.float64) for name in ("ppo", "dense_grpo")}
    ex = explain(new, old, adv, ObjectiveSettings(clip_low=0.02), ["ppo", "dense_grpo"], step_mask=mask)
    for name in ex.names:
        for i in range(4):
            for t in range(6):
                c = cell(ex, name, i, t)
                assert c.advantage == pytest.approx(float(adv[name][i, t]))
                assert closed_form(c) == pytest.approx(c.weight, rel=1e-9, abs=1e-15), (name, i, t)
    assert "A_{i,t}" in formula_markdown(cell(ex, "ppo", 1, 2), "now") and "GAE" in formula_markdown(
        cell(ex, "ppo", 1, 2), "now")
