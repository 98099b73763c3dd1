"""Handlers of the Objectives tab: what every registered objective pushes on each step of the current group.

The tab explains the group made in Generate (`workbench.rl.explain`) twice: at ratio 1 (the first update
of an iteration) and after N inner AdamW updates of one objective on a copy of the model, where clipping
starts to act. Its own per-user data is an `ObjectivesView` in a gr.State beside the `Session`; the maps
are recomputed from it (milliseconds) whenever the chunk schedule or the measured credit changes, only
the inner updates are slow. Handlers follow `handlers`: `fn(wb, *inputs, view, session)`, last output a
status line.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace

import gradio as gr
import torch

from workbench.core.errors import WorkbenchError
from workbench.flow.trajectory import TrajectoryGroup
from workbench.rl.credit import Credit
from workbench.rl.explain import Explanation, explain, moved_log_probs, paired_advantages, paired_estimator
from workbench.rl.objectives import OBJECTIVES, ObjectiveSettings
from workbench.train.config import TrainConfig
from workbench.train.explained import ROWS, correlation_text, explain_rows, objective_advantages, objective_numbers
from workbench.train.presets import gfpo_scores
from workbench.ui import figures
from workbench.ui.classroom import held
from workbench.ui.figures import clicked_point
from workbench.ui.formulas import cell, formula_html
from workbench.ui.guard import guarded, limited, number, ok, whole_number
from workbench.ui.handlers import _tracker
from workbench.ui.jobs import objective_names
from workbench.ui.state import Session, format_sizes
from workbench.ui.timing import record_objectives
from workbench.ui.waits import check_objectives_work
from workbench.ui.workbench import Workbench
from workbench.viz.explain_plots import objective_maps_figure
from workbench.viz.push_maps import maps_hint, outline, push_maps_html, with_outline

PLOT = "objectives-plot"  # the maps' elem_id
NO_VIEW = "Press **Compute** to explain the group made in **Generate**."
NO_VIEW_HINT = "press Compute to draw what every objective pushes on the group made in Generate"  # the maps' place
STALE = "The group changed since these maps were computed: press **Compute** to explain the new group."
SCALES = (("one scale for all maps", "shared"), ("a scale per objective", "each"))  # (label, key) of the radio


@dataclass
class ObjectivesView:
    """One session's explained group: the moved log-probs and how they were made."""

    group: TrajectoryGroup  # the group explained; a new group from Generate makes the view stale
    advantages: dict[str, torch.Tensor]  # objective -> (G,) from its paired estimator, or (G, T) per step
    moved: torch.Tensor  # (G, T) log-probs after the inner updates
    updates: int  # N inner updates
    lr: float
    clip: float  # clip range eps, for the inner updates and the explained objectives
    inner: str  # the objective the inner updates minimised
    inner_sizes: list[int]  # the chunk schedule they used
    selected: tuple[str, str, int, int] = ("moved", TrainConfig.objective, 0, 0)  # (row key, objective, i, t)
    scale_each: bool = False  # every map on its own colour scale instead of one shared scale
    explained: dict = field(default_factory=dict, repr=False, compare=False)  # chunk sizes -> `explanations`: one
    # entry, shared by the views `replace` makes of this one (a cell chosen, a colour scale): the same maps


def explanations(view: ObjectivesView, sizes: list[int]) -> list[tuple[str, str, Explanation]]:
    """[(row key, row title, Explanation)] at ratio 1 and after the inner updates, under chunks `sizes`. Kept for the
    view's last sizes: a click on a map or a cell chosen by the controls would explain the same maps again (8.9 of
    the click handler's 10.4 ms at G=8, T=16 on one thread)."""
    key = tuple(sizes)
    rows = view.explained.get(key)
    if rows is None:
        rows = _explain(view, sizes)
        view.explained.clear()  # two handlers at once may both explain: the same rows, the last kept
        view.explained[key] = rows
    return rows


def _explain(view: ObjectivesView, sizes: list[int]) -> list[tuple[str, str, Explanation]]:
    return explain_rows(view.group, view.advantages, view.moved, sizes, view.clip, view.updates, objective_names())


def _current(view: ObjectivesView | None, session: Session) -> ObjectivesView:
    """The view, if it explains the session's current group."""
    if session.group is None:
        raise WorkbenchError("no group yet: generate one in the Generate tab first")
    if view is None or view.group is not session.group:
        raise WorkbenchError("the group changed since the last computation: press Compute")
    return view


def _advantage_name(name: str) -> str:
    """What the summary's advantage column says: the paired estimator or the per-step source."""
    kind = getattr(OBJECTIVES.info(name), "step_credit", None)
    return {"critic": "per step: GAE, critic fitted on the group", "lookahead": "per step: look-ahead gains"}.get(
        kind, paired_estimator(name))


def _summary(rows, credit: torch.Tensor | None, view: ObjectivesView) -> str:
    """Markdown table: per objective its advantage, clipped steps and correlation with the credit."""
    title = rows[1][1]
    head = ("| objective | advantage | clipped steps " + title + " | corr. with credit at ratio 1 | corr. " + title
            + " |\n|---|---|---|---|---|")
    lines = [head]
    for n in objective_numbers(rows, credit):
        cells = [correlation_text(c) for c in (n.corr_at_one, n.corr_moved)]
        lines.append(f"| {n.name} | {_advantage_name(n.name)} | {100 * n.clipped:.0f} % | {cells[0]} | {cells[1]} |")
    how = (f"Inner updates: {view.updates} AdamW step(s) of **{view.inner}** (lr {view.lr:g}, chunks "
           f"{format_sizes(view.inner_sizes)}) on a copy of the model; clip range ε = {view.clip:g}. ")
    note = ("Correlation: Pearson, over the trained cells, between the push −w and the measured credit."
            if credit is not None else "Measure credit in **Attribution** to see each map's correlation with it.")
    return "\n".join(lines) + "\n\n" + how + note


_MAPS: list[tuple[tuple, str]] = []  # the last maps drawn (newest last): (what they show, markup without outline)
_MAPS_KEPT = 4  # a few sessions' (each ~200 kB of markup at G=8, T=16)
_MAPS_LOCK = threading.Lock()  # gradio runs handlers in threads


def _maps(view: ObjectivesView, rows: list, credit: Credit | None, sizes: list[int]) -> gr.HTML:
    """The maps of the view under `sizes` (viz/push_maps.py) with the selected cell outlined, as an update of the maps
    component (its markup and its `selected` prop, ui/figures.py). The markup is drawn once per view, schedule, credit
    and colour scale; a new cell only moves the outline. The key holds the view's moved log-probs (each view computes
    its own) and the Credit (never changed in place) themselves, not their ids."""
    key = (view.moved, credit, tuple(sizes), view.scale_each)  # the first two by identity
    with _MAPS_LOCK:
        base = next((maps for k, maps in _MAPS if k[0] is key[0] and k[1] is key[1] and k[2:] == key[2:]), None)
    if base is None:
        step_credit = credit.step_credit if credit is not None else None  # (G, T)
        base = push_maps_html(rows, step_credit, scale_each=view.scale_each)
        with _MAPS_LOCK:
            _MAPS[:] = [*_MAPS, (key, base)][-_MAPS_KEPT:]
    place = outline(rows, view.selected)
    return figures.maps(with_outline(base, rows, place), place)


def _formula(view: ObjectivesView, rows: list) -> str:
    """The formula of the view's selected cell, with its numbers (HTML, its equations as MathML: ui/mathml.py)."""
    key, name, i, t = view.selected
    ex = dict((k, e) for k, _, e in rows)[key]
    when = dict((k, title) for k, title, _ in rows)[key]
    return formula_html(cell(ex, name, i, t), when)


def _render(view: ObjectivesView, session: Session, note: str) -> tuple:
    """(maps, summary, formula, view, status) under the session's chunks and credit."""
    rows = explanations(view, session.sizes)
    credit = session.credit.step_credit if session.credit is not None else None  # (G, T)
    return (_maps(view, rows, session.credit, session.sizes), _summary(rows, credit, view), _formula(view, rows),
            view, ok(note))


def clip_range(value) -> float:
    """The Clip range ε box as a float in [0, 1), else a message naming the box (the objective's own check names
    its field, clip_low)."""
    clip = number(value, "clip range ε")
    if not 0 <= clip < 1:
        raise WorkbenchError(f"clip range ε must be in [0, 1), got {clip:g}; Flow-GRPO uses 1e-4")
    return clip


@guarded(5)
def objectives_compute(wb: Workbench, updates: float, lr: float, clip: float, inner: str,
                       view: ObjectivesView | None, session: Session, progress=gr.Progress()):
    """Compute button -> (maps, summary table, formula, view, status)."""
    if session.group is None:
        raise WorkbenchError("no group yet: generate one in the Generate tab first")
    n = limited(updates, "inner_updates")
    held(wb, objective_updates=n)  # class mode: the teacher's caps
    lr = number(lr, "learning rate")
    if lr <= 0:
        raise WorkbenchError(f"the learning rate must be > 0, got {lr:g}")
    settings = ObjectiveSettings(clip_low=clip_range(clip), chunks=list(session.sizes))
    group, names = session.group, objective_names()
    if inner not in names:
        raise WorkbenchError(f"unknown objective '{inner}'; valid objectives: {', '.join(names)}")
    # A group keeps its rewards and its policy (Session.with_group, with_source): the previous view's advantages of
    # the same group are this press's too. Among them ppo's fitted critic and dense_grpo's look-ahead: 5.7 + 1.9 s
    # of an 11 s press at G=8, T=16 on one core, when only N, the learning rate, the clip or the inner objective moved.
    check_objectives_work(group, n)  # bounded: its size said beside the button (`ui.waits`)
    same = view is not None and view.group is group
    start = time.perf_counter()
    if not same:  # its longest part at G=8, T=16: said while it runs, before the inner updates' own progress
        progress(0, desc="per-step advantages (ppo's critic, dense_grpo's look-ahead)")
    advantages = view.advantages if same else _advantages(wb, group, session, names)
    middle = time.perf_counter()
    moved = moved_log_probs(wb.policy(session.source), group, advantages[inner], inner, settings, n, lr,
                            progress=_tracker(progress, "inner update"))
    record_objectives(wb, group.group_size * group.num_steps, None if same else middle - start,
                      (time.perf_counter() - middle) / n if n else None)
    selected = view.selected if same else ObjectivesView.selected
    view = ObjectivesView(group, advantages, moved, n, lr, settings.clip_low, inner, list(session.sizes), selected)
    return _render(view, session, f"explained {len(names)} objectives on G={group.group_size}, "
                                  f"T={group.num_steps} after {n} updates of {inner}")


def _advantages(wb: Workbench, group: TrajectoryGroup, session: Session, names: list[str]) -> dict:
    """Paired (G,) advantages, and (G, T) per-step ones for ppo (a critic fitted on the group) and dense_grpo."""
    from workbench.rewards import build_reward

    return objective_advantages(wb.policy(session.source), group, session.rewards, names,
                                build_reward(session.reward_spec), batched=wb.batched_threads)


def _ratio_one(group: TrajectoryGroup, rewards: torch.Tensor, sizes: list[int], clip: float) -> Explanation:
    """Every objective's push on a group at ratio 1 (the first update of an iteration), paired advantages."""
    names = objective_names()
    advantages = paired_advantages(rewards, names, metric=gfpo_scores(group))
    old = group.log_probs  # (G, T)
    return explain(old, old, advantages, ObjectiveSettings(clip_low=clip, chunks=list(sizes)), names,
                   group.config.sde_mask().expand_as(old))


@guarded(2)
def objectives_compare(wb: Workbench, clip: float, session: Session):
    """Compare push maps -> (figure, status): each objective's push at ratio 1 on the two groups of the
    Attribution tab's comparison (same prompt and noise, two policies), one colour scale, each row beside its
    own measured credit."""
    comparison = session.comparison
    if comparison is None:
        raise WorkbenchError("no comparison yet: press Compare in the Attribution tab first")
    clip = clip_range(clip)
    rows = [(f"policy{n}", f"under {label}", _ratio_one(group, credit.rewards, session.sizes, clip))
            for n, (label, group, credit) in enumerate(zip(comparison.labels, comparison.groups, comparison.credits))]
    figure = objective_maps_figure(rows, [c.step_credit for c in comparison.credits])
    figure.update_layout(title="What each objective pushes at ratio 1 on the same prompt and noise under two "
                               "policies (one colour scale; rows: policies, first column: each group's credit)")
    return figure, ok(f"push maps of {len(rows[0][2].names)} objectives under {comparison.labels[0]} and "
                      f"{comparison.labels[1]}, chunks {format_sizes(session.sizes)}")


@guarded(5)
def objectives_view(wb: Workbench, view: ObjectivesView | None, session: Session):
    """Tab opened -> the maps under the session's current chunks and credit (nothing is sampled)."""
    if view is None:
        return gr.skip(), NO_VIEW, gr.skip(), view, ""
    if session.group is None or view.group is not session.group:  # the maps of an old group must not stay up
        return figures.maps(maps_hint("the group changed: press Compute"), None), STALE, "", None, ""
    return _render(view, session, f"chunks {format_sizes(session.sizes)}")


@guarded(3)
def objectives_scale(wb: Workbench, scale: str, view: ObjectivesView | None, session: Session):
    """Colour-scale radio -> (maps, view, status): one scale for all maps, or one per objective."""
    if scale not in dict((key, label) for label, key in SCALES):
        raise WorkbenchError(f"the colour scale is 'shared' or 'each', got {scale!r}")
    if view is None or session.group is None or view.group is not session.group:
        return gr.skip(), view, ""  # applied by the next Compute (its .then calls this again)
    if view.scale_each == (scale == "each"):
        return gr.skip(), view, ""
    view = replace(view, scale_each=scale == "each")
    maps = _render(view, session, "")[0]
    return maps, view, ok("each map on its own colour scale" if view.scale_each else "one colour scale for all maps")


def _select(view: ObjectivesView, key: str, name: str, i, t) -> ObjectivesView:
    """The view with cell (key, name, i, t) selected, after checking it exists."""
    g, steps = view.moved.shape
    i, t = whole_number(i, "trajectory i", 0), whole_number(t, "step t", 0)
    if i >= g or t >= steps:
        raise WorkbenchError(f"the group has trajectories 0..{g - 1} and steps 0..{steps - 1}; got i={i}, t={t}")
    if key not in dict(ROWS):
        raise WorkbenchError(f"choose the maps at ratio 1 or after the updates, got {key!r}")
    if name not in view.advantages:
        raise WorkbenchError(f"unknown objective '{name}'; valid objectives: {', '.join(view.advantages)}")
    return replace(view, selected=(key, name, i, t))


@guarded(4)
def objectives_cell(wb: Workbench, name: str, key: str, i: float, t: float, view: ObjectivesView | None,
                    session: Session):
    """The API's cell choice -> (maps, formula, view, status) for the chosen objective, row and cell: the maps with
    that cell outlined (the page's controls use `objectives_select`, which sends only the outline's new place)."""
    view = _select(_current(view, session), key, name, i, t)
    maps, _, formula, view, status = _render(view, session, f"{name} at i={int(i)}, t={int(t)}")
    return maps, formula, view, status


@guarded(4)
def objectives_select(wb: Workbench, name: str, key: str, i: float, t: float, view: ObjectivesView | None,
                      session: Session):
    """Cell controls in the page -> (outline, formula, view, status): `objectives_cell`'s choice, with the maps left as
    they are and only their outline moved (the maps component's `selected`, ui/figures.py)."""
    view = _select(_current(view, session), key, name, i, t)
    rows = explanations(view, session.sizes)
    _, _, i, t = view.selected
    return figures.selection(outline(rows, view.selected)), _formula(view, rows), view, ok(f"{name} at i={i}, t={t}")


@guarded(8)
def objectives_click(wb: Workbench, point, view: ObjectivesView | None, session: Session):
    """A click on a map -> (objective, row, i, t controls, outline, formula, view, status). The maps stay as they are:
    only their outline moves to the clicked cell."""
    view = _current(view, session)
    clicked = clicked_point(point)
    key, _, name = clicked["trace"].partition("|")
    if not name:
        raise WorkbenchError("that map is the credit or the log-ratio: click a map of an objective")
    view = _select(view, key, name, clicked["y"], clicked["x"])  # y: trajectory i, x: step t
    _, _, i, t = view.selected
    rows = explanations(view, session.sizes)
    return (name, key, i, t, figures.selection(outline(rows, view.selected)), _formula(view, rows), view,
            ok(f"{name} at i={i}, t={t}"))


def maps_clicked(wb: Workbench):
    """The listener of the maps' `cell` event (ui/figures.py): `objectives_click` at the clicked cell, which the
    event's data carries (a gr.EventData parameter, which Gradio fills by its annotation)."""
    def click(view: ObjectivesView | None, session: Session, evt: gr.EventData):
        point = {"trace": getattr(evt, "trace", ""), "x": getattr(evt, "x", None), "y": getattr(evt, "y", None)}
        return objectives_click(wb, point, view, session)
    return click
