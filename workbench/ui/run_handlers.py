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
from dataclasses import replace
from pathlib import Path

import gradio as gr
import pandas as pd
from PIL import Image

from workbench.core.errors import WorkbenchError
from workbench.train import PRESETS, TrainConfig, preset
from workbench.train.store import RunStore, compare_runs, export_csv, list_runs
from workbench.ui import plots
from workbench.ui.guard import escape, guarded, number, ok, parse_window, whole_number
from workbench.ui.jobs import RunView
from workbench.ui.state import Session
from workbench.ui.workbench import Workbench

RUN_COLUMNS = ["run", "state", "iteration", "objective", "last reward/mean", "started"]
DEFAULT_METRIC = "reward/mean"
APP_LIMITS = {"iterations": 2000, "group": 32, "steps": 64}  # a fine-tune started from the app is capped here
FORM_FIELDS = ("objective", "reward", "chunks", "lr", "iterations", "group", "steps", "lora_rank", "sde", "window")


def form_config(wb: Workbench, objective: str, reward: str, chunks: str, lr, iterations, group, steps, lora_rank,
                sde: str, window: str) -> TrainConfig:
    """The TrainConfig of the Fine-tune form: dapo, gpg, gspo and gfpo start from their presets (which add what the
    method pairs with its loss: DAPO's dynamic sampling, GPG's advantages, ...); TrainConfig validates it all."""
    overrides = dict(reward=reward or "", chunks=(chunks or "").replace(" ", ""), lr=number(lr, "learning rate"),
                     iterations=whole_number(iterations, "iterations", 1), group=whole_number(group, "group size", 2),
                     steps=whole_number(steps, "steps", 1), lora_rank=whole_number(lora_rank, "LoRA rank", 0),
                     sde=sde or "", window=parse_window(window), model=wb.model_path, device=wb.explicit_device)
    for name, cap in APP_LIMITS.items():
        if overrides[name] > cap:
            raise WorkbenchError(f"{name} is at most {cap} in the app (got {overrides[name]}); "
                                 "run larger fine-tunes with `workbench train`")
    if objective in PRESETS:
        return preset(objective, **overrides)
    return TrainConfig(objective=objective or "", **overrides)


@guarded(5)
def start_run(wb: Workbench, objective: str, reward: str, chunks: str, lr: float, iterations: float, group: float,
              steps: float, lora_rank: float, sde: str, window: str, session: Session):
    """Start -> (live figure, sample, session, timer update, status); a busy device is a message."""
    config = form_config(wb, objective, reward, chunks, lr, iterations, group, steps, lora_rank, sde, window)
    job = wb.jobs.start(config)
    figure = plots.empty_figure(f"Run {job.run_id}", "starting the training process...")
    return (figure, None, replace(session, run_id=job.run_id), gr.Timer(active=True),
            ok(f"started run {job.run_id} ({config.objective}, {config.iterations} iterations) on the {wb.device}"))


@guarded(2)
def stop_run(wb: Workbench, session: Session):
    """Stop -> (timer update, status): this session's run, or else the run using the device (any session's).
    A second Stop ends a run that does not stop by itself."""
    run_id = session.run_id if session.run_id is not None else wb.jobs.busy()
    if run_id is None:
        raise WorkbenchError("this session has not started a run and no run is using the device")
    return gr.Timer(active=True), ok(escape(wb.jobs.stop(run_id)))


def describe(view: RunView) -> str:
    """One Markdown line about a run's state."""
    of = f"/{view.total}" if view.total else ""
    line = f"**Run {escape(view.run_id)}**: {view.state}, iteration {view.iteration}{of}"
    if view.metrics and isinstance(view.metrics[-1].get(DEFAULT_METRIC), (int, float)):
        line += f", reward/mean {view.metrics[-1][DEFAULT_METRIC]:.3f}"
    return line + (f"  \n⚠ {escape(view.message)}" if view.message else "")


@guarded(4)
def poll_run(wb: Workbench, session: Session):
    """Timer tick -> (live figure, newest sample image, timer update, run Markdown); stops when the run ends.
    A session that started no run follows the run using the device, so every session sees it (and can stop it)."""
    run_id = session.run_id if session.run_id is not None else wb.jobs.busy()
    if run_id is None:
        return gr.skip(), gr.skip(), gr.Timer(active=False), "No run is using the device."
    view = wb.jobs.view(run_id)
    figure = plots.training_figure(view.metrics, f"Run {view.run_id} ({view.state})")
    sample = Image.open(view.sample).copy() if view.sample is not None else gr.skip()
    started_here = "" if session.run_id is not None else " (started elsewhere; Stop stops it)"
    return figure, sample, gr.Timer(active=not view.done), describe(view) + started_here


def _run_names(wb: Workbench) -> list[str]:
    return [r.name for r in list_runs(wb.jobs.root)]


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
        rows.append([r.name, state, r.iteration, str(r.config.get("objective", "")),
                     round(last[-1], 4) if last else None,
                     time.strftime("%Y-%m-%d %H:%M", time.localtime(started))
                     if isinstance(started, (int, float)) and not isinstance(started, bool) else ""])
    names = [r.name for r in listed]
    metrics = sorted({k for r in listed for row in r.metrics for k in row if k != "iteration"}) or [DEFAULT_METRIC]
    metric = DEFAULT_METRIC if DEFAULT_METRIC in metrics else metrics[0]
    compare_choice = gr.Dropdown(choices=names, value=names[:3], multiselect=True)
    download_choice = gr.Dropdown(choices=names, value=names[0] if names else None)
    table = pd.DataFrame(rows, columns=RUN_COLUMNS)
    return (table, compare_choice, download_choice, gr.Dropdown(choices=metrics, value=metric),
            ok(f"{len(rows)} run(s) in {escape(str(wb.jobs.root))}"))


@guarded(2)
def compare(wb: Workbench, names: list[str] | None, metric: str):
    """Compare -> (overlay figure of one metric over the chosen runs, status)."""
    if not names:
        raise WorkbenchError("choose at least one run to compare (press Refresh if the list is empty)")
    known = set(_run_names(wb))
    missing = [n for n in names if n not in known]
    if missing:
        raise WorkbenchError(f"run(s) {', '.join(missing)} not found in {wb.jobs.root}; press Refresh")
    data = compare_runs([wb.jobs.root / n for n in names], metric)
    series = {name: (d["iterations"], d["values"]) for name, d in data.items()}
    return plots.compare_figure(series, metric), ok(f"{escape(metric)} of {len(series)} run(s)")


@guarded(2)
def download(wb: Workbench, name: str | None):
    """Download -> (files: metrics CSV and the newest checkpoint as a zip, status)."""
    if not name:
        raise WorkbenchError("choose a run to download (press Refresh if the list is empty)")
    if name not in _run_names(wb):
        raise WorkbenchError(f"run {name} not found in {wb.jobs.root}; press Refresh")
    run = RunStore.open(wb.jobs.root / name).info()
    out = _fresh_export_folder()
    files = [str(export_csv(run, out / f"{name}-metrics.csv"))]
    checkpoint = RunStore(run.path).latest_checkpoint()
    if checkpoint is not None:
        files.append(shutil.make_archive(str(out / f"{name}-{checkpoint.folder.name}"), "zip", checkpoint.folder))
    note = "" if checkpoint is not None else " (no checkpoint saved yet)"
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
