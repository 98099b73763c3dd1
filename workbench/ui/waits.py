"""What a slow button will cost, said beside it before it is pressed: its size and its time on this machine.

Each function here is the text of a `line` placed next to its button, and reads the rates `ui.timing` measured on
this machine: Measure credit and Refine from the group, M and the estimator; Compare from those and the session's
credit it can reuse; Objectives' Compute from its size, which is also capped here; Generate when its group is large.

When a line is said again. A line follows its controls (its inputs that are not a `gr.State`) as they change. What it
reads from a state (the session's group, a view) is read again at the moments it can have changed for a reader of
the line, not on every change of the state: each event of Gradio's page costs the page a round of status updates,
and a chunk edit changes the session without changing any line (docs/performance.md). The page builds each tab inside
`Lines(tab)`, which says the tab's lines again when the tab is selected (a group changes in other tabs: Generate,
Learn) and after each event of the tab passed to `after` (a measurement that changes the rates or the view), and the
whole page inside another `Lines`, for the events above the tabs (a link opened, a policy loaded). A line built
outside any `Lines` follows every input, states included.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field

import gradio as gr

from workbench.core.errors import WorkbenchError
from workbench.rl.credit_estimators import continuation_cost, grid_rows
from workbench.ui import timing
from workbench.ui.jobs import objective_names
from workbench.ui.progress import QUIET

OBJECTIVES_WORK = 13_000  # at most objectives x G x T x (N inner updates + 1) per Compute in the app: the default
# group (G=8, T=16) with every N of the slider (9 x 8 x 16 x 11 = 12672) fits, G=16, T=32 with N=2 or more does not
SLOW_S = 5.0  # a button whose work takes longer says so beforehand


@dataclass
class Lines:
    """The lines built inside `with Lines(tab):` that read a state, said again in one private event when `tab` is
    selected and after each event passed to `after` inside; nested, a line belongs to every open `Lines`."""

    tab: gr.Tab | None = None
    """The tab whose selection says them again (None: only the events passed to `after`)."""
    made: list = field(default_factory=list)
    """(fn, inputs, Markdown) of each line."""
    events: list = field(default_factory=list)
    """The events after which they are said again (`after`)."""

    def __enter__(self) -> Lines:
        self._token = _OPEN.set((*_OPEN.get(), self))
        return self

    def __exit__(self, *exc) -> None:
        _OPEN.reset(self._token)
        if not self.made or exc[0] is not None:
            return
        if self.tab is not None:
            self.tab.select(**self.again())
        for event in self.events:
            event.then(**self.again())

    def again(self) -> dict:
        """The event options that say every line again: one function over the union of their inputs."""
        inputs = list({id(block): block for _, ins, _ in self.made for block in ins}.values())
        where = {id(block): i for i, block in enumerate(inputs)}
        made = list(self.made)

        def said(*values):
            texts = [fn(*(values[where[id(block)]] for block in ins)) for fn, ins, _ in made]
            return texts[0] if len(texts) == 1 else tuple(texts)
        return dict(fn=said, inputs=inputs, outputs=[shown for *_, shown in made], api_visibility="private",
                    queue=False, **QUIET)


_OPEN: ContextVar[tuple[Lines, ...]] = ContextVar("open_lines", default=())


def after(event) -> None:
    """The lines of the innermost open `Lines` are said again once `event` (a Dependency) ends: an event of the
    tab that changes what they read (the rates, a view)."""
    if _OPEN.get():
        _OPEN.get()[-1].events.append(event)


def line(fn, inputs: list, elem_id: str) -> gr.Markdown:
    """A Markdown line showing fn(*inputs), recomputed whenever a control among the inputs changes (a private event:
    not an API); its states are read again as the open `Lines` say (all their changes outside any)."""
    shown = gr.Markdown(fn(*(block.value for block in inputs)), elem_id=elem_id)
    open_lines = _OPEN.get()
    states = [block for block in inputs if isinstance(block, gr.State)]
    followed = [block for block in inputs if not (open_lines and isinstance(block, gr.State))]
    if followed:
        gr.on([block.change for block in followed], fn, inputs, shown, api_visibility="private", **QUIET,
              queue=False)
    if states:
        for lines in open_lines:
            lines.made.append((fn, inputs, shown))
    return shown


def timed(demo: gr.Blocks | None, fn, elem_id: str, **options) -> gr.Markdown:
    """A Markdown text fn() written again as each page loads (a private event: not an API), so a rate measured
    after the page was built is said from the next visit on."""
    shown = gr.Markdown(fn(), elem_id=elem_id, **options)
    if demo is not None:
        demo.load(fn, None, shown, api_visibility="private", **QUIET, queue=False)
    return shown


def credit_evaluations(group, continuations: int, estimator: str) -> int:
    """Image evaluations a credit measurement of `group` costs (as `credit_estimators` counts them)."""
    g, t = group.group_size, group.num_steps
    if estimator == "x0":
        return 0
    if estimator == "ode":
        return continuation_cost(grid_rows(g, range(0, t), range(1)), t)
    first = 1 if group.config.shared_noise else 0
    return continuation_cost(grid_rows(g, range(first, t), range(continuations)), t, group.config.sde_mask())


def credit_wait(wb, continuations, estimator, budget, session) -> str:
    """The Attribution buttons' line: Measure credit's and Refine's time here for the session's group."""
    group = getattr(session, "group", None)
    if group is None:
        return "*Measure credit and Refine need a group: generate one first.*"
    try:
        m, budget = max(1, int(continuations)), max(1, int(budget))
    except (TypeError, ValueError):
        return ""  # the handler names the bad field when pressed
    evals = credit_evaluations(group, m, estimator or "mc")
    measure = ("no transformer evaluation (the sampler's own predictions are scored): about a second"
               if evals == 0 else timing.estimate(wb, evals))
    refine = timing.seconds(wb, budget * (group.num_steps - 1))  # a continuation from state s runs T - s steps
    refine = "" if refine is None else f" · **Refine** ({budget} continuations): at most {timing.shown(refine)}"
    return f"Time: **Measure credit** {measure}{refine}."


def compare_wait(wb, continuations, estimator, crn, precision, session) -> str:
    """Compare's line: one sampling of the session's group under the other policy and its credit, and the session's
    own credit unless it holds one measured with these settings (`policies.session_credit`), at the rate timed here."""
    from workbench.ui.policies import session_credit

    group = getattr(session, "group", None)
    if group is None:
        return "*Compare needs a group: generate one first.*"
    try:
        m = max(1, int(continuations))
        kept = session_credit(wb, session, m, estimator or "mc", bool(crn), precision or "auto") is not None
    except (TypeError, ValueError, WorkbenchError):
        return ""  # the handler names the bad field when pressed
    one = credit_evaluations(group, m, estimator or "mc")
    evals = group.group_size * group.num_steps + (1 if kept else 2) * one
    what = ("this group's credit, measured with these settings, is reused" if kept
            else "this group's credit is measured too (measure it first with these settings and Compare reuses it)")
    return (f"Time: **Compare** samples the other policy's group and measures its credit; {what}: "
            f"{timing.estimate(wb, evals)}.")


def objectives_work(group, updates: int) -> int:
    """The size of a Compute: objectives x G x T x (N inner updates + the pass at ratio 1)."""
    return len(objective_names()) * group.group_size * group.num_steps * (updates + 1)


def objectives_size(group, updates: int) -> str:
    """'9 objectives x G=8 x T=16, 3 inner updates'."""
    return (f"{len(objective_names())} objectives x G={group.group_size} x T={group.num_steps}, {updates} inner "
            f"update{'' if updates == 1 else 's'}")


def check_objectives_work(group, updates: int) -> None:
    """A WorkbenchError naming the limit when a Compute's size is over OBJECTIVES_WORK."""
    work = objectives_work(group, updates)
    if work > OBJECTIVES_WORK:
        raise WorkbenchError(f"Compute's size {objectives_size(group, updates)} is {work} cells x passes, over the "
                             f"limit of {OBJECTIVES_WORK} here: lower the inner updates N, or G or T in Generate")


def objectives_seconds(wb, group, updates: int, advantages: bool = True) -> tuple[float, str] | None:
    """(seconds, how measured) of a Compute: the per-step advantages (unless kept from the group's last Compute) and
    N inner updates, at the rates timed here; None before they are timed."""
    rates, cells = getattr(wb, "objectives_timing", None) or {}, group.group_size * group.num_steps
    if "update" not in rates or (advantages and "advantages" not in rates):
        return None
    seconds = updates * cells * rates["update"][0] + (cells * rates["advantages"][0] if advantages else 0.0)
    return seconds, rates["update"][1]


def objectives_wait(wb, updates, view, session) -> str:
    """The Compute button's line: its size and its time here, or that it is over the limit."""
    group = getattr(session, "group", None)
    if group is None:
        return "*Compute needs a group: generate one first.*"
    try:
        n = max(0, int(updates))
    except (TypeError, ValueError):
        return ""
    size = objectives_size(group, n)
    if objectives_work(group, n) > OBJECTIVES_WORK:
        return f"*Size: {size}: over the limit of {OBJECTIVES_WORK} (objectives x G x T x (N + 1)) here.*"
    kept = view is not None and getattr(view, "group", None) is group  # the advantages of this group are kept
    timed = objectives_seconds(wb, group, n, advantages=not kept)
    if timed is None:
        return f"*Size: {size}: not timed on this machine yet (the app times it as the model loads).*"
    seconds, how = timed
    return f"*Size: {size}: about {timing.shown(seconds)} on this machine ({how}; a busier machine takes longer).*"


def generate_wait(wb, group, steps) -> str:
    """Generate's line, only when its sampling takes longer than SLOW_S here."""
    try:
        evals = int(group) * int(steps)
    except (TypeError, ValueError):
        return ""
    seconds = timing.seconds(wb, evals)
    return "" if seconds is None or seconds < SLOW_S else f"*Time: {timing.estimate(wb, evals)}.*"
