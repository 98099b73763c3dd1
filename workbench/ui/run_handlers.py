"""Handlers of the Fine-tune and Runs tabs: start, stop and watch a training process; compare and export runs.

Same conventions as `handlers`: plain functions `fn(wb, *inputs, ...)`, last output the status Markdown.
The training itself runs in another process (`jobs.JobManager`); these functions only start it and
read its run folder.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
import time
import zlib
from dataclasses import replace
from pathlib import Path

import gradio as gr
import pandas as pd
from PIL import Image

from workbench.core.errors import WorkbenchError
from workbench.core.imaging import with_header
from workbench.models.lora import LORA_FILE
from workbench.train import PRESETS
from workbench.train.hacking import run_verdict
from workbench.train.store import RunStore, compare_runs, export_csv, list_runs
from workbench.ui import train_form as tf
from workbench.ui.eta import time_left
from workbench.ui.guard import escape, guarded, ok
from workbench.ui.jobs import RunView
from workbench.ui.state import Session
from workbench.ui.train_form import (  # noqa: F401 (the form's names, used by the handlers and their callers)
    APP_LIMITS,
    FORM_FIELDS,
    NO_LESSON,
    form_config,
    form_plan,
    lesson_base,
    lesson_form,
    lesson_names,
    method_settings,
)
from workbench.ui.train_time import run_time
from workbench.ui.workbench import Workbench
from workbench.viz import plots

RUN_COLUMNS = ["run", "state", "iteration", "objective", "last reward/mean", "held-out accuracy (no CFG)",
               "held-out accuracy (CFG)", "started"]
DEFAULT_METRIC = "reward/mean"
ELSEWHERE = " (started elsewhere; Stop stops it)"
CLASS_ELSEWHERE = " (started by another session: only that session or the teacher can stop it)"
GRID_ZOOM = 2  # the before/after grids (32-pixel pictures drawn 4x) shown 2x larger, nearest-neighbour: pixels stay
# pixels in the 340-px viewer, and the PNG is a quarter of 4x's 4168x1174, which left the viewer blank while it loaded


def lesson_time(wb: Workbench, lesson: str, config) -> str:
    """How long the lesson takes on this machine (`train_time.run_time`), and the last finished run of it here."""
    try:
        runs = list_runs(wb.jobs.root)
    except WorkbenchError:
        runs = []
    text = (f" **Time**: {run_time(wb, config, lesson, runs)}; once started, its progress bar says the time left at "
            "its own pace" if config.task is not None else "")
    iterations = config.iterations
    for run in runs:
        started, updated = run.status.get("started"), run.status.get("updated")
        if (run.state == "finished" and run.config.get("task") == lesson and run.iteration == iterations
                and all(isinstance(v, (int, float)) for v in (started, updated))):
            text += f"; its last run here, {escape(run.name)}, took {_duration(updated - started)}"
            break
    return text + "." if text else ""


@guarded(12)
def load_lesson(wb: Workbench, lesson: str):
    """Lesson menu -> (the form's 10 values from the lesson's preset, the lesson's description, status). The lessons
    teach the embedded model's toy world: with an SD3 / FLUX model only "none" is offered (the menu is hidden)."""
    config = lesson_base(lesson)
    if tf.real_model(wb):
        if config.task is not None:
            form_plan(wb, *lesson_form(config), lesson)  # raises: the lesson belongs to the toy world
        config = replace(config, lora_rank=tf.REAL_MODEL_LORA_RANK)
        return (*lesson_form(config), "", ok("the form holds TrainConfig's defaults for an SD3 / FLUX model (the "
                                             "shipped real prompts, LoRA)"))
    if config.task is None:
        return (*lesson_form(config), "", ok("the form holds TrainConfig's defaults (the world's training scenes)"))
    doc = (PRESETS.get(lesson).__doc__ or "").strip().split("\n\n")[0]
    held_out = len(config.held_out_prompts())
    text = (f"**Lesson: {escape(lesson)}.** {escape(doc)} Training on {len(config.prompt_pool())} prompts of the "
            f"task; every {config.eval_every} iterations the {held_out} held-out prompts are drawn with fixed noise, "
            "without and with the model's CFG: watch **Before / Now** change and the held-out accuracy rise."
            f"{lesson_time(wb, lesson, config)}")
    return (*lesson_form(config), text, ok(f"loaded the lesson '{escape(lesson)}' (settings from its preset)"))


def memory_estimate(wb: Workbench, objective: str, reward: str, chunks: str, lr, iterations, group, steps, lora_rank,
                    sde: str, window: str, lesson: str | None = None, *real) -> str:
    """The Fine-tune form's estimates before Start: its memory (`train.dry_run`: the settings of a real model it
    depends on and its verdict, with a warning when it cannot fit, `train_form.estimate_line`) and its time on this
    machine (`train_time.run_time`)."""
    try:
        plan, auto = form_plan(wb, objective, reward, chunks, lr, iterations, group, steps, lora_rank, sde, window,
                               lesson, *real)
        memory = tf.estimate_line(plan, auto)[0]
    except WorkbenchError as err:
        return f"Memory estimate: not available until the form is valid ({escape(str(err))})."
    return f"{memory}\n\n**Time**: {run_time(wb, plan.config, lesson)}."


@guarded(5)
def start_run(wb: Workbench, objective: str, reward: str, chunks: str, lr: float, iterations: float, group: float,
              steps: float, lora_rank: float, sde: str, window: str, lesson: str, session: Session, *real):
    """Start -> (live figure, sample, session, timer update, status); a busy device, or a run whose memory estimate
    does not fit the device, is a message (the estimate line). `real`: a real model's settings (REAL_FIELDS)."""
    plan, auto = form_plan(wb, objective, reward, chunks, lr, iterations, group, steps, lora_rank, sde, window,
                           lesson, *real)
    refusal, config = tf.estimate_line(plan, auto)[1], plan.config
    if refusal is not None:
        raise WorkbenchError(refusal)
    job = wb.jobs.start(config)
    if wb.device != "cpu":  # the run loads its own copy of the model: the app's copies leave the GPU meanwhile
        wb.release()
    figure = plots.empty_figure(f"Run {job.run_id}", "starting the training process...")
    task = f", task {config.task}" if config.task else ""
    return (figure, None, replace(session, run_id=job.run_id), gr.Timer(active=True),
            ok(f"started run {job.run_id} ({config.objective}{task}, {config.iterations} iterations) on the "
               f"{wb.device}"))


@guarded(2)
def stop_run(wb: Workbench, session: Session):
    """Stop -> (timer update, status): this session's run, or else the run using the device (any session's).
    A second Stop ends a run that does not stop by itself. (Class mode asks first who may stop it:
    `classroom_view`.)"""
    run_id = stop_target(wb, session)
    if run_id is None:
        raise WorkbenchError("this session has not started a run and no run is using the device")
    return gr.Timer(active=True), ok(escape(wb.jobs.stop(run_id)))


def stop_target(wb: Workbench, session: Session) -> str | None:
    """The run Stop stops: the session's own while it runs, else the one using the device, else None."""
    run_id = session.run_id
    if run_id is None or wb.jobs.view(run_id).done:  # this session's run ended: stop the one using the device
        run_id = wb.jobs.busy() or run_id
    return run_id


def describe(view: RunView) -> str:
    """One Markdown line about a run's state."""
    of = f"/{view.total}" if view.total else ""
    line = f"**Run {escape(view.run_id)}**: {view.state}, iteration {view.iteration}{of}"
    if view.metrics and isinstance(view.metrics[-1].get(DEFAULT_METRIC), (int, float)):
        line += f", reward/mean {view.metrics[-1][DEFAULT_METRIC]:.3f}"
    for key, (its, values) in plots.heldout_series(view.metrics).items():
        line += f", {escape(key)} {values[-1]:.2f} (iteration {its[-1]})"
    verdict = run_verdict(view.metrics)
    if verdict is not None:
        line += f"  \n{'⚠ ' if verdict.flagged else ''}{escape(verdict.text)}"
    return line + (f"  \n⚠ {escape(view.message)}" if view.message else "")


def _duration(seconds: float) -> str:
    """12 s, 3 min 05 s, 1 h 02 min."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def progress_html(view: RunView, now: float | None = None) -> str:
    """A progress bar: iteration of total, elapsed time and, while running, the time left at this run's own pace
    (`ui.eta.time_left`: its finished iterations and held-out evaluations, not the start-up in the elapsed time)."""
    if not view.total:
        return ""
    done = min(view.iteration, view.total)
    share = done / view.total
    parts = [f"iteration {done}/{view.total}"]
    end = (now or time.time()) if view.state in ("starting", "running") else view.updated
    if view.started is not None and end is not None:
        elapsed = max(0.0, end - view.started)
        parts.append(f"{_duration(elapsed)} elapsed")
        left = time_left(view.metrics, view.total, view.eval_every) if view.state == "running" else None
        if left is not None and done < view.total:  # from this run's own iteration and evaluation timings
            parts.append(f"about {_duration(left[0])} left (± {_duration(left[1])})")
    if view.state not in ("starting", "running"):
        parts.append(view.state)
    return (f'<div class="run-progress" style="border:1px solid #ccc;border-radius:4px;height:1.4em;position:relative">'
            f'<div style="width:{100 * share:.1f}%;height:100%;background:#f59e0b66"></div>'
            f'<span style="position:absolute;left:0.5em;top:0.1em;font-size:0.9em">{escape(" · ".join(parts))}</span>'
            '</div>')


def _zoomed(path: Path) -> Image.Image:
    """The grid enlarged, under a white strip where the viewer's label badge sits (it covered the first cells)."""
    image = Image.open(path).convert("RGB")
    image = image.resize((image.width * GRID_ZOOM, image.height * GRID_ZOOM), Image.NEAREST)
    return with_header(image, [], image.width, height=label_strip(image.height))


def label_strip(height: int) -> int:
    """Pixels of white above a grid `height` pixels tall: about 30 px on screen once the image is fitted into
    its 340-px viewer, where the label badge sits."""
    return max(40, round(0.12 * height))


def before_now(view: RunView) -> tuple:
    """(Before, Now) image updates: the first evaluation grid (eval_0000) and the newest one, with their iterations;
    both empty before the first evaluation."""
    if not view.eval_samples:
        return gr.update(value=None, label="Before"), gr.update(value=None, label="Now")
    first, last = view.eval_samples[0], view.eval_samples[-1]
    rows = "top row no CFG, bottom row the model's CFG" if view.eval_cfg else "no CFG"
    # updates, not gr.Image(...): a component built with a value encodes it at once (a WebP of the 1042-pixel grid,
    # ~0.25 s), and Gradio encodes the value again as the output's PNG
    return (gr.update(value=_zoomed(first), label=f"Before: held-out grid at iteration {int(first.stem[5:])} ({rows})"),
            gr.update(value=_zoomed(last), label=f"Now: the same prompts and noise at iteration {int(last.stem[5:])}"))


def panel_keys(view: RunView) -> tuple:
    """What each picture of a run's panel is drawn from: (curves, newest sample, Before, Now, held-out). Equal keys,
    the same picture: `run_panel` leaves a picture the page already shows as it is."""
    metrics = (view.run_id, len(view.metrics), zlib.crc32(repr(view.metrics).encode()))  # rows are rewritten on resume
    first, last = (view.eval_samples[0], view.eval_samples[-1]) if view.eval_samples else (None, None)
    return ((*metrics, view.state), (view.run_id, _stamp(view.sample)), (view.run_id, _stamp(first), view.eval_cfg),
            (view.run_id, _stamp(last), view.eval_cfg), metrics)


def _stamp(path: Path | None) -> tuple | None:
    """A picture file's name and modification time (a resumed run writes its grids again under the same names)."""
    try:
        return None if path is None else (path.name, path.stat().st_mtime_ns)
    except OSError:  # gone since the folder was listed
        return (path.name, None)


def run_panel(view: RunView, shown: tuple = ()) -> tuple:
    """(training curves, newest sample, Before grid, Now grid, held-out figure, progress bar) of a run; a picture
    whose key (`panel_keys`) is in `shown`, the keys of what the page shows, is left as it is (gr.skip()).

    A watched run is polled every second: drawing and encoding its two figures and three grids again each time took
    the app 0.31-0.33 CPU-s per second of a lesson, 0.06 since, beside a training process sharing the two cores
    (docs/performance.md)."""
    keys = panel_keys(view)
    drawn = [shown[i] != key if i < len(shown) else True for i, key in enumerate(keys)]
    figure = plots.training_figure(view.metrics, f"Run {view.run_id} ({view.state})") if drawn[0] else gr.skip()
    sample = (Image.open(view.sample).copy() if view.sample is not None else None) if drawn[1] else gr.skip()
    before, now = before_now(view) if drawn[2] or drawn[3] else (None, None)
    before, now = before if drawn[2] else gr.skip(), now if drawn[3] else gr.skip()
    held_out = (plots.heldout_figure(view.metrics, f"Held-out evaluation of run {view.run_id}") if drawn[4]
                else gr.skip())
    return figure, sample, before, now, held_out, progress_html(view)


@guarded(9)
def poll_run(wb: Workbench, session: Session, shown: tuple = (), opened: bool = False):
    """Timer tick -> (live figure, newest sample image, Before grid, Now grid, held-out figure, progress bar, timer
    update, the keys of the pictures now shown, run Markdown); stops when the run ends. `shown` holds the keys of
    what the page shows (`panel_keys`): those pictures are not sent again. A session that started or chose no run
    follows the run using the device, so every session sees it (and can stop it), else shows the newest run on
    disk. `opened`: the poll of the tab's opening, which never stops the timer (`_timer`)."""
    started = wb.jobs.started
    run_id, why = session.run_id, ""
    if run_id is None:
        run_id, why = wb.jobs.busy(), ELSEWHERE if getattr(wb, "classroom", None) is None else CLASS_ELSEWHERE
    if run_id is None:
        names = _run_names(wb)
        if not names:
            return (*[gr.skip()] * 6, _timer(wb, False, started, opened), gr.skip(),
                    "No run yet: choose " + ("settings" if tf.real_model(wb) else "a lesson or settings")
                    + " and press **Start**.")
        run_id, why = names[0], " (the newest run on disk; choose another under **Show run**)"
    view = wb.jobs.view(run_id)
    return (*run_panel(view, shown), _timer(wb, not view.done, started, opened), panel_keys(view),
            describe(view) + why)


def _timer(wb: Workbench, active: bool, started: int, opened: bool):
    """The poll's timer update: on while the run shown runs. A poll leaves it alone rather than stop it when it
    answers the tab's opening, or when the app started a run while it read (`started`: `wb.jobs.started` before):
    its answer can land after that of a Start pressed meanwhile, and stopping the timer that Start turned on left
    the tab at "No run yet" while the run trained (seen once, under load; tests/test_browser.py replays it)."""
    if active:
        return gr.Timer(active=True)
    if opened or wb.jobs.started != started:
        return gr.skip()
    return gr.Timer(active=False)


@guarded(11)
def show_run(wb: Workbench, name: str | None, session: Session):
    """Show run (Fine-tune) -> (the chosen run's panel, timer update, its pictures' keys, run Markdown, session,
    status), whatever its state; the session follows it (Stop stops it while it runs)."""
    if not name:
        raise WorkbenchError("choose a run to show (its list is read when the tab opens)")
    if name not in _run_names(wb):
        raise WorkbenchError(f"run {name} not found in {wb.jobs.root}; reopen the tab to refresh the list")
    session = replace(session, run_id=name)
    *panel, timer, keys, line = poll_run.__wrapped__(wb, session)
    return (*panel, timer, keys, line, session, ok(f"showing run {escape(name)}"))


@guarded(7)
def runs_show(wb: Workbench, name: str | None):
    """Run chosen in the Runs tab -> (curves, Before grid, Now grid, held-out figure, progress bar, run line,
    status), read from its folder: any run, finished or not, in any session."""
    if not name:  # nothing picked (no run on disk yet): Refresh's message, which runs first, stays
        return (*[gr.skip()] * 6, gr.skip())
    if name not in _run_names(wb):
        raise WorkbenchError(f"run {name} not found in {wb.jobs.root}; press Refresh")
    view = wb.jobs.view(name)
    figure, _, before, now, held_out, bar = run_panel(view)
    return figure, before, now, held_out, bar, describe(view), ok(f"showing run {escape(name)}")


def _share(value: float | None) -> float | None:
    """A held-out accuracy as the Runs table shows it: two decimals (0.65, not 0.6530612244897959)."""
    return None if value is None else round(value, 2)


def run_choices(wb: Workbench, session: Session):
    """Fine-tune opened -> the Show run menu with the runs on disk now (the session's run selected)."""
    try:
        names = _run_names(wb)
    except WorkbenchError:  # the runs root is unreadable: the poll says why
        return gr.skip()
    shown = session.run_id or wb.jobs.busy() or (names[0] if names else None)  # what poll_run shows
    return gr.Dropdown(choices=names, value=shown if shown in names else None)


def _run_names(wb: Workbench) -> list[str]:
    return [r.name for r in list_runs(wb.jobs.root)]


NO_RUN_YET = "start one in the Fine-tune tab (its crosses lesson takes a few minutes)"


@guarded(5)
def refresh_runs(wb: Workbench):
    """Refresh -> (table of runs, compare choices, download choices, metric choices, status)."""
    listed = list_runs(wb.jobs.root)
    rows = []
    for r in listed:
        last = r.series(DEFAULT_METRIC)[1]
        started = r.status.get("started")
        state = r.state if not r.damaged else (f"damaged: {r.damaged}" if r.state == "damaged"
                                                else f"{r.state} (damaged: {r.damaged})")
        held_out = {key.split("/")[0]: values[-1] for key, (_, values) in plots.heldout_series(r.metrics).items()
                    if plots.TASK_METRIC.match(key)}
        rows.append([r.name, state, r.iteration, str(r.config.get("objective", "")),
                     round(last[-1], 3) if last else None, *(_share(held_out.get(k)) for k in ("eval", "eval_cfg")),
                     time.strftime("%Y-%m-%d %H:%M", time.localtime(started))
                     if isinstance(started, (int, float)) and not isinstance(started, bool) else ""])
    names = [r.name for r in listed]
    metrics = sorted({k for r in listed for row in r.metrics for k in row if k != "iteration"}) or [DEFAULT_METRIC]
    metric = DEFAULT_METRIC if DEFAULT_METRIC in metrics else metrics[0]
    compare_choice = gr.Dropdown(choices=names, value=names[:3], multiselect=True)
    download_choice = gr.Dropdown(choices=names, value=names[0] if names else None)
    table = pd.DataFrame(rows, columns=RUN_COLUMNS)
    where = escape(str(wb.jobs.root))
    found = f"{len(rows)} run(s) in {where}" if rows else f"no run yet in {where}: {NO_RUN_YET}"
    return table, compare_choice, download_choice, gr.Dropdown(choices=metrics, value=metric), ok(found)


@guarded(2)
def compare(wb: Workbench, names: list[str] | None, metric: str):
    """Compare -> (overlay figure of one metric over the chosen runs, status)."""
    if not names:
        raise WorkbenchError("choose at least one run to compare (press Refresh if the list is empty; with no run "
                             f"yet, {NO_RUN_YET})")
    known = set(_run_names(wb))
    missing = [n for n in names if n not in known]
    if missing:
        raise WorkbenchError(f"run(s) {', '.join(missing)} not found in {wb.jobs.root}; press Refresh")
    data = compare_runs([wb.jobs.root / n for n in names], metric)
    series = {name: (d["iterations"], d["values"]) for name, d in data.items()}
    return plots.compare_figure(series, metric), ok(f"{escape(metric)} of {len(series)} run(s)")


@guarded(2)
def download(wb: Workbench, name: str | None):
    """Download -> (files: metrics CSV, the newest checkpoint as a zip and, for a LoRA run of SD3 / FLUX, its
    pytorch_lora_weights.safetensors, which diffusers' `pipe.load_lora_weights` reads; status)."""
    if not name:
        raise WorkbenchError(f"choose a run to download (press Refresh if the list is empty; with no run yet, "
                             f"{NO_RUN_YET})")
    if name not in _run_names(wb):
        raise WorkbenchError(f"run {name} not found in {wb.jobs.root}; press Refresh")
    run = RunStore.open(wb.jobs.root / name).info()
    out = _fresh_export_folder()
    files = [str(export_csv(run, out / f"{name}-metrics.csv"))]
    checkpoint, problem = RunStore(run.path).newest_checkpoint()
    if checkpoint is not None:
        files.append(shutil.make_archive(str(out / f"{name}-{checkpoint.folder.name}"), "zip", checkpoint.folder))
        if (checkpoint.folder / LORA_FILE).is_file():  # a LoRA run's adapter in diffusers' format, on its own too
            files.append(str(shutil.copyfile(checkpoint.folder / LORA_FILE,
                                             out / f"{name}-{checkpoint.folder.name}-{LORA_FILE}")))
    note = f" ({problem}; not included)" if problem else ""
    note = note if checkpoint is not None or problem else " (no checkpoint saved yet)"
    return files, ok(f"prepared {len(files)} file(s) for run {escape(name)}{note}")


EXPORTS = Path(tempfile.gettempdir()) / f"workbench-exports-{os.getpid()}"  # this app's exports, removed as it goes
EXPORT_SECONDS = 120.0  # an export folder is removed this long after its download was prepared (gradio has copied it)
EXPORT_CACHE = (300, 600)  # gr.Blocks(delete_cache=...): every 5 min, gradio drops its copies older than 10 min


def _fresh_export_folder() -> Path:
    """A new folder for one download, removed EXPORT_SECONDS later (and any left over when the app exits)."""
    EXPORTS.mkdir(parents=True, exist_ok=True)
    for old in EXPORTS.iterdir():  # left by a timer that did not run
        if time.time() - old.stat().st_mtime > EXPORT_SECONDS:
            shutil.rmtree(old, ignore_errors=True)
    folder = Path(tempfile.mkdtemp(dir=EXPORTS))
    timer = threading.Timer(EXPORT_SECONDS, shutil.rmtree, args=(folder,), kwargs={"ignore_errors": True})
    timer.daemon = True
    timer.start()
    return folder


def remove_exports() -> None:
    """Remove every export of this app (at exit)."""
    shutil.rmtree(EXPORTS, ignore_errors=True)


atexit.register(remove_exports)
