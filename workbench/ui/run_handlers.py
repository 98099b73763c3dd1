"""Handlers of the Fine-tune and Runs tabs: start, stop and watch a training process; compare and export runs.

Same conventions as `handlers`: plain functions `fn(wb, *inputs, ...)`, last output the status Markdown.
The training itself runs in another process (`jobs.JobManager`); these functions only start it and
read its run folder.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import gradio as gr
import pandas as pd
from PIL import Image

from workbench.core.errors import WorkbenchError
from workbench.train import store as runs
from workbench.ui import plots
from workbench.ui.guard import escape, guarded, ok
from workbench.ui.jobs import RunView, TrainForm
from workbench.ui.state import Session
from workbench.ui.workbench import Workbench

RUN_COLUMNS = ["run", "state", "iteration", "objective", "last reward/mean", "started"]
DEFAULT_METRIC = "reward/mean"


@guarded(5)
def start_run(wb: Workbench, objective: str, reward: str, chunks: str, lr: float, iterations: float, group: float,
              steps: float, lora_rank: float, session: Session):
    """Start -> (live figure, sample, session, timer update, status); a busy device is a message."""
    form = TrainForm(objective=objective, reward=reward or "", chunks=chunks or "", lr=lr, iterations=iterations,
                     group=group, steps=steps, lora_rank=lora_rank, model=wb.model_path, device=wb.explicit_device)
    job = wb.jobs.start(form)
    figure = plots.empty_figure(f"Run {job.run_id}", "starting the training process...")
    return (figure, None, replace(session, run_id=job.run_id), gr.Timer(active=True),
            ok(f"started run {job.run_id} ({form.objective}, {form.iterations} iterations) on the {wb.device}"))


@guarded(2)
def stop_run(wb: Workbench, session: Session):
    """Stop -> (timer update, status). A second Stop ends a run that does not stop by itself."""
    if session.run_id is None:
        raise WorkbenchError("this session has not started a run; start one first")
    return gr.Timer(active=True), ok(escape(wb.jobs.stop(session.run_id)))


def describe(view: RunView, total: int | None) -> str:
    """One Markdown line about a run's state."""
    of = f"/{total}" if total else ""
    line = f"**Run {escape(view.run_id)}**: {view.state}, iteration {view.iteration}{of}"
    if view.metrics and isinstance(view.metrics[-1].get(DEFAULT_METRIC), (int, float)):
        line += f", reward/mean {view.metrics[-1][DEFAULT_METRIC]:.3f}"
    return line + (f"  \n⚠ {escape(view.message)}" if view.message else "")


@guarded(4)
def poll_run(wb: Workbench, session: Session):
    """Timer tick -> (live figure, newest sample image, timer update, run Markdown); stops when the run ends."""
    if session.run_id is None:
        return gr.skip(), gr.skip(), gr.Timer(active=False), "No run started in this session."
    view = wb.jobs.view(session.run_id)
    config_path = wb.jobs.root / view.run_id / runs.CONFIG
    total = runs.read_json(config_path).get("iterations") if config_path.is_file() else None
    figure = plots.training_figure(view.metrics, f"Run {view.run_id} ({view.state})")
    sample = Image.open(view.sample).copy() if view.sample is not None else gr.skip()
    return figure, sample, gr.Timer(active=not view.done), describe(view, total)


def _run_names(wb: Workbench) -> list[str]:
    return [r.name for r in runs.list_runs(wb.jobs.root)]


@guarded(5)
def refresh_runs(wb: Workbench):
    """Refresh -> (table of runs, compare choices, download choices, metric choices, status)."""
    listed = runs.list_runs(wb.jobs.root)
    rows = []
    for r in listed:
        last = r.series(DEFAULT_METRIC)[1]
        started = r.status.get("started")
        rows.append([r.name, r.state, r.status.get("iteration", 0), r.config.get("objective", ""),
                     round(last[-1], 4) if last else None,
                     time.strftime("%Y-%m-%d %H:%M", time.localtime(started)) if started else ""])
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
    data = runs.compare_runs([wb.jobs.root / n for n in names], metric)
    series = {name: (d["iterations"], d["values"]) for name, d in data.items()}
    return plots.compare_figure(series, metric), ok(f"{escape(metric)} of {len(series)} run(s)")


@guarded(2)
def download(wb: Workbench, name: str | None):
    """Download -> (files: metrics CSV and the newest checkpoint as a zip, status)."""
    if not name:
        raise WorkbenchError("choose a run to download (press Refresh if the list is empty)")
    if name not in _run_names(wb):
        raise WorkbenchError(f"run {name} not found in {wb.jobs.root}; press Refresh")
    run = runs.load_run(wb.jobs.root / name)
    out = Path(tempfile.mkdtemp(prefix="workbench-export-"))
    files = [str(runs.export_csv(run, out / f"{name}-metrics.csv"))]
    checkpoint = runs.latest_checkpoint(run.path)
    if checkpoint is not None:
        files.append(shutil.make_archive(str(out / f"{name}-{checkpoint.name}"), "zip", checkpoint))
    note = "" if checkpoint is not None else " (no checkpoint saved yet)"
    return files, ok(f"prepared {len(files)} file(s) for run {escape(name)}{note}")
