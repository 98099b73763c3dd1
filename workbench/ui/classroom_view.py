"""The page of class mode: the Class tab (caps, the opt-out, the teacher's controls, the class view) and the handlers
that ask who the session is before they act. Outside class mode every function here leaves the app as it was:
`handler` gives back the plain handler, `long_work` the shared queue, `class_tab` builds nothing.

Who is asking comes from Gradio's `gr.Request` (its session hash), which Gradio passes to a parameter annotated with
it; the wrappers here take it first, so the event's inputs follow in their order.
"""

from __future__ import annotations

import math
from functools import partial

import gradio as gr

from workbench.core.errors import WorkbenchError
from workbench.ui import handlers as h
from workbench.ui import run_handlers as rh
from workbench.ui import share
from workbench.ui.classroom import CAP_LABELS, CAP_RANGES, ClassCaps, ClassRoom
from workbench.ui.guard import escape, guarded, ok, whole_number
from workbench.ui.progress import QUIET
from workbench.ui.state import Session
from workbench.viz.class_view import class_figure, spread

LONG_WORK = dict(concurrency_id="long", concurrency_limit=1)  # class mode: Measure, Refine, Compare, Objectives
VIEW_POLL_S = 5.0  # how often an open Class tab asks whether the class view changed (an unchanged one costs nothing)
CLASS_INTRO = """### This class
The teacher hosts this workbench for the class. Everything you sample, measure and edit stays in your page; fine-tuning
runs are shared: everyone sees them, only the page that started a run (or the teacher) can stop it.

**Waiting**: short work (Generate, chunk edits) and long work (Measure credit, Refine, Compare, Objectives) queue
separately, so a Generate never waits behind someone's Refine. While your request waits, its output shows its place in
the queue and the estimated wait (e.g. *queue: 3/7 | 4.1/12.0s*).

**The class's experiment**: each group you measure in **Attribution** adds, without your name, to the class's view of
misattribution (steps against your chunk schedule); the teacher shows it to the class."""


def room(wb) -> ClassRoom | None:
    return getattr(wb, "classroom", None)


def long_work(wb, heavy: dict) -> dict:
    """The queue of the events that keep the model for long: in class mode a queue of their own beside `heavy`'s (so
    short work passes them), else `heavy` itself (one queue for the model, as before)."""
    return heavy if room(wb) is None else LONG_WORK


def handler(wb, fn):
    """`partial(fn, wb)` outside class mode; in class mode the same handler behind a check of who asks: Stop only for
    the session that started the run or the teacher, Start remembers who started, Measure credit adds the group to
    the class's experiment."""
    classroom = room(wb)
    if classroom is None:
        return partial(fn, wb)
    return {"start_run": _start, "stop_run": _stop, "attribute": _attribute}[fn.__name__](wb, classroom)


def _start(wb, classroom: ClassRoom):
    def start_run(request: gr.Request, *inputs):
        out = rh.start_run(wb, *inputs)
        session = out[2]
        if isinstance(session, Session) and session.run_id is not None:
            classroom.own(session.run_id, request)
        return out
    return start_run


def _stop(wb, classroom: ClassRoom):
    @guarded(2)
    def stop_run(request: gr.Request, session: Session):
        run_id = rh.stop_target(wb, session)
        if run_id is not None and not classroom.may_stop(run_id, request):
            raise WorkbenchError(f"run {run_id} was started by another session: only that session or the teacher "
                                 "can stop it")
        return rh.stop_run.__wrapped__(wb, session)
    return stop_run


def _attribute(wb, classroom: ClassRoom):
    def attribute(request: gr.Request, continuations, session: Session, estimator: str = "mc", crn: bool = True,
                  z: float = h.Z, precision: str = "auto", progress=gr.Progress()):
        out = h.attribute(wb, continuations, session, estimator, crn, z, precision, progress=progress)
        measured = out[-2]
        if isinstance(measured, Session) and measured.credit is not None:
            record(classroom, request, measured, continuations, estimator)
        return out
    return attribute


def record(classroom: ClassRoom, request, session: Session, continuations, estimator: str):
    """Add a session's measured group to the class's experiment (nothing when the session opted out)."""
    rates, c = session.credit.rates(session.z), session.group.config
    window = f"{c.window[0]},{c.window[1]}" if c.window is not None else ""
    link = "/" + share.view_link(session.group.prompt, c.group, c.steps, c.noise_level, c.seed, c.sde, window,
                                 session.reward_spec, continuations, estimator, session, "attribution", "")
    m = int(continuations) if (estimator or "mc") == "mc" else 1  # a look-ahead estimator: one per state
    return classroom.record(request, rates.step.misattributed, rates.chunk.misattributed, session.sizes, c.group,
                            c.steps, m, session.group.prompt, link)


def wire_stop(wb, triggers: list, session, stop: gr.Button) -> None:
    """Class mode: the Stop button is enabled only on the page that may stop the run shown (the handler refuses the
    others anyway)."""
    classroom = room(wb)
    if classroom is None:
        return

    def stop_state(request: gr.Request, session: Session):
        return gr.Button(interactive=may_stop(wb, request, session))
    gr.on(triggers, stop_state, [session], [stop], api_visibility="private", **QUIET)


def may_stop(wb, request, session: Session) -> bool:
    """Whether this page's Stop would stop something it may stop (or finds nothing to stop, and says so)."""
    run_id = rh.stop_target(wb, session)
    return run_id is None or room(wb).may_stop(run_id, request)


def class_view(classroom: ClassRoom, request, seen=None):
    """(summary Markdown, figure, table Markdown, version): the class's experiment for the teacher, and for everyone
    once the teacher shows it; unchanged since `seen`, nothing is sent."""
    version = (classroom.version, classroom.is_teacher(request))
    if seen == version:
        return gr.skip(), gr.skip(), gr.skip(), seen
    if not classroom.sees_class_view(request):
        return "*The teacher has not shown the class's experiment yet.*", gr.skip(), "", version
    rows = classroom.measurements()
    labels = [f"student {m.student}" for m in rows]
    steps, chunks = [m.step for m in rows], [m.chunk for m in rows]
    s, c = spread(steps), spread(chunks)
    summary = (f"**{len(rows)} measured group(s).** Misattributed share of determined cells, mean ± sd across "
               f"students: steps {_pct(s.mean)} ± {_pct(s.sd)} (n = {s.n}), chunks {_pct(c.mean)} ± {_pct(c.sd)} "
               f"(n = {c.n}).")
    table = ("| student | prompt | G | T | M | chunk schedule | steps misattributed | chunks misattributed | link |\n"
             "|---|---|---|---|---|---|---|---|---|\n")
    table += "".join(f"| {m.student} | {escape(m.prompt)} | {m.group} | {m.steps} | {m.continuations} | "
                     f"{','.join(map(str, m.sizes))} | {_pct(m.step)} | {_pct(m.chunk)} | [open]({m.link}) |\n"
                     for m in rows)
    return summary, class_figure(labels, steps, chunks), table if rows else "", version


def _pct(value: float) -> str:
    return "—" if not math.isfinite(value) else f"{100 * value:.0f} %"


def class_tab(wb, demo: gr.Blocks) -> None:
    """The Class tab (class mode only): caps, the opt-out, the teacher's controls and the class view."""
    classroom = room(wb)
    if classroom is None:
        return
    with gr.Tab("Class", id="class") as tab:
        gr.Markdown(CLASS_INTRO, elem_id="class-intro")
        caps_line = gr.Markdown(f"**Caps of every request**: {classroom.caps.line()}", elem_id="class-caps")
        share_box = gr.Checkbox(True, label="Add my measured groups to the class's experiment (anonymous)",
                                elem_id="class-share")
        with gr.Row():
            token = gr.Textbox(label="Teacher token", type="password", elem_id="class-token", scale=3)
            unlock = gr.Button("Unlock the teacher's controls", elem_id="class-unlock", scale=1)
        status = gr.Markdown(elem_id="class-status")
        with gr.Column(visible=False, elem_id="class-teacher") as teacher:
            gr.Markdown("### Teacher's controls")
            with gr.Row():
                caps = [gr.Number(getattr(classroom.caps, name), precision=0, minimum=low, maximum=high,
                                  label=f"Cap on {label}", elem_id=f"class-cap-{name}")
                        for (name, label), (low, high) in zip(CAP_LABELS.items(), CAP_RANGES.values())]
            with gr.Row():
                apply = gr.Button("Apply the caps", elem_id="class-apply")
                shown = gr.Checkbox(classroom.shown, label="Show the class view to the students", elem_id="class-show")
                clear = gr.Button("Clear the class's measurements", elem_id="class-clear")
        summary = gr.Markdown(elem_id="class-summary")
        figure = gr.Plot(label="The class's experiment", elem_id="class-plot")
        table = gr.Markdown(elem_id="class-table")
    seen, timer = gr.State(None), gr.Timer(VIEW_POLL_S)  # seen: the version of the class view this page shows
    _wire(classroom, demo, dict(tab=tab, caps_line=caps_line, share_box=share_box, token=token, unlock=unlock,
                                status=status, teacher=teacher, caps=caps, apply=apply, shown=shown, clear=clear))
    gr.on([tab.select, timer.tick], _viewer(classroom), [seen], [summary, figure, table, seen],
          api_visibility="private", **QUIET)


def _viewer(classroom: ClassRoom):
    def view(seen, request: gr.Request):
        return class_view(classroom, request, seen)
    return view


def _wire(classroom: ClassRoom, demo: gr.Blocks, c: dict) -> None:
    """The Class tab's events; every teacher's action is checked in its handler (`ClassRoom.teacher_only`)."""
    private = dict(api_visibility="private", **QUIET)

    @guarded(2)
    def unlocked(token: str, request: gr.Request):
        if not classroom.unlock(token, request):
            raise WorkbenchError("that is not the teacher's token")
        return gr.Column(visible=True), ok("the teacher's controls are unlocked in this page")

    def from_link(request: gr.Request):
        token = dict(request.query_params).get("teacher", "") if request is not None else ""
        if token and classroom.unlock(token, request):
            return gr.Column(visible=True), ok("the teacher's controls are unlocked in this page (from its link)")
        return gr.skip(), gr.skip()

    @guarded(2)
    def set_caps(request: gr.Request, *values):
        asked = {name: whole_number(v, f"the cap on {label}", 0) for (name, label), v in zip(CAP_LABELS.items(),
                                                                                             values)}
        ClassCaps(**asked)  # checked before it replaces the caps
        now = classroom.set_caps(request, **asked)
        return f"**Caps of every request**: {now.line()}", ok("the caps hold from the next request on")

    @guarded(1)
    def show(shown: bool, request: gr.Request):
        classroom.show(request, shown)
        return ok("the class view is " + ("shown to the students" if shown else "hidden from the students"))

    @guarded(1)
    def clear(request: gr.Request):
        classroom.clear(request)
        return ok("the class's measurements are cleared")

    @guarded(1)
    def opt(share_it: bool, request: gr.Request):
        classroom.opt(request, share_it)
        return ok("your measured groups " + ("join" if share_it else "stay out of") + " the class's experiment")

    gr.on([c["unlock"].click, c["token"].submit], unlocked, [c["token"]], [c["teacher"], c["status"]], **private)
    demo.load(from_link, None, [c["teacher"], c["status"]], **private)
    c["apply"].click(set_caps, c["caps"], [c["caps_line"], c["status"]], **private)
    c["shown"].input(show, [c["shown"]], [c["status"]], **private)
    c["clear"].click(clear, None, [c["status"]], **private)
    c["share_box"].input(opt, [c["share_box"]], [c["status"]], **private)
    c["tab"].select(lambda: f"**Caps of every request**: {classroom.caps.line()}", None, [c["caps_line"]], **private)
