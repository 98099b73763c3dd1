"""Fine-tuning runs as separate processes: start, refuse a second run per device, stop, reap, and read progress.

A run is `python -m workbench train --config <file> --out <runs>/<id>` started with `subprocess.Popen`, so a
crash or an out-of-memory kill in training ends that process only, never the app; a thread per process waits on
it, so a finished process is reaped at once. The app builds and
validates the `TrainConfig` (the one source of truth), saves it as JSON beside the run's log, and the
training process reads it back. Progress is read through the run's `RunStore`; writing STOP asks the
trainer to stop within one iteration.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from workbench.core.errors import WorkbenchError
from workbench.core.files import write_json
from workbench.core.threads import PASSIVE_WAIT
from workbench.train.config import TrainConfig
from workbench.train.explained import ordered_objectives
from workbench.train.store import RunInfo, RunStore, list_runs

TRAIN_COMMAND = (sys.executable, "-m", "workbench", "train")
LOG_DIR = ".logs"  # <runs root>/.logs/<id>.log holds each run's stdout and stderr, <id>.json its config
REPO_ROOT = Path(__file__).resolve().parents[2]  # so `-m workbench` imports this checkout


def objective_names() -> list[str]:
    """Registered objectives in the order their registrations give, then by name (`train.explained`)."""
    return ordered_objectives()


@dataclass
class Job:
    """One training process this app started."""

    run_id: str
    run_dir: Path
    process: subprocess.Popen
    log_path: Path
    started: float = field(default_factory=time.time)
    stop_requested: bool = False
    killed: bool = False  # terminated by the app (stopped before the trainer wrote its first file, or forced)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None  # poll() also reaps a finished process (no zombie is left)


@dataclass
class RunView:
    """What the app shows about a run right now."""

    run_id: str
    state: str  # starting, running, finished, stopped, failed, interrupted, damaged, unknown
    iteration: int
    total: int | None  # iterations the run was started for
    message: str  # error or note, '' when none
    metrics: list[dict]
    sample: Path | None  # newest samples/iter_XXXX.png
    eval_samples: list[Path] = field(default_factory=list)  # samples/eval_XXXX.png, oldest (before) first
    eval_cfg: bool = False  # the evaluation grids have a second row at the model's CFG
    started: float | None = None  # when the run started (time.time(), from status.json)
    updated: float | None = None  # when its status was last written
    eval_every: int | None = None  # held-out evaluation every this many iterations (config.json); None: none said

    @property
    def done(self) -> bool:
        return self.state not in ("starting", "running")


class JobManager:
    """Starts training processes, one per device at a time, and reports on them (thread-safe)."""

    def __init__(self, runs_root: str | Path, device: str, command: tuple[str, ...] | list[str] = TRAIN_COMMAND):
        self.root, self.device, self.command = Path(runs_root), device, list(command)
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()

    def training(self) -> bool:
        """Whether a training process this app started is alive (it shares this machine's cores)."""
        return any(job.alive for job in list(self._jobs.values()))

    @property
    def started(self) -> int:
        """How many runs this app has started: a poll that reads it before and after knows a Start overtook it."""
        return len(self._jobs)

    def busy(self) -> str | None:
        """The id of the run using this device: a live process of ours, or a running run on disk (any session,
        any process: the command line's too)."""
        for job in self._jobs.values():
            if job.alive:
                return job.run_id
        for info in list_runs(self.root):
            if info.name not in self._jobs and info.state == "running":
                return info.name
        return None

    def start(self, config: TrainConfig) -> Job:
        """Start `workbench train` for a validated config in a fresh run folder; WorkbenchError when busy."""
        with self._lock:
            running = self.busy()
            if running is not None:
                raise WorkbenchError(f"busy: run {running} is using the {self.device}; stop it or wait for it to end")
            run_id = self._new_id(config.objective)
            run_dir, logs = self.root / run_id, self.root / LOG_DIR
            log_path, config_path = logs / f"{run_id}.log", write_json(logs / f"{run_id}.json", config.to_dict())
            env = {**PASSIVE_WAIT, **os.environ, "PYTHONUNBUFFERED": "1", "GRADIO_ANALYTICS_ENABLED": "False",
                   "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)}
            argv = [*self.command, "--config", str(config_path), "--out", str(run_dir)]
            with open(log_path, "wb") as log:
                process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                           env=env, start_new_session=True)
            job = Job(run_id, run_dir, process, log_path)
            self._jobs[run_id] = job
            # reap the process the moment it ends (no zombie left until the next poll or Start)
            threading.Thread(target=process.wait, name=f"reap-{run_id}", daemon=True).start()
            return job

    def _new_id(self, objective: str) -> str:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run_id, n = f"{stamp}-{objective}", 1
        while (self.root / run_id).exists() or run_id in self._jobs:
            run_id, n = f"{stamp}-{objective}-{n}", n + 1
        return run_id

    def stop(self, run_id: str) -> str:
        """Ask a run to stop; a second request (or a run that has not started training yet) ends our process.
        A run another process started (another app, the command line) gets the STOP request only."""
        job = self._jobs.get(run_id)
        if job is None:
            store = RunStore(self.root / run_id)
            if store.holds_run() and store.request_stop() is not None:
                return f"stop requested: run {run_id} saves a checkpoint and stops within one iteration"
            return f"run {run_id} is not running"
        if not job.alive:
            return f"run {run_id} is not running"
        store = RunStore(job.run_dir)
        if store.holds_run() and not job.stop_requested and store.request_stop() is not None:
            job.stop_requested = True
            return f"stop requested: run {run_id} saves a checkpoint and stops within one iteration"
        job.process.terminate()
        job.killed = True
        try:
            job.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            job.process.kill()
            job.process.wait()
        return f"run {run_id} was ended"

    def view(self, run_id: str) -> RunView:
        """State, iteration, metrics and newest sample of a run, reconciling the store with our process."""
        job = self._jobs.get(run_id)
        store = RunStore(job.run_dir if job else self.root / run_id)
        info = store.info() if store.holds_run() else RunInfo(store.path, {}, {})
        state, message = info.state, info.status.get("error") or info.damaged or ""
        if job is not None and not job.alive and state in ("unknown", "running", "interrupted"):
            state, message = _ended_without_status(job)
        elif job is not None and job.alive and not info.status:
            state = "starting"
        total = info.config.get("iterations")
        samples = info.samples()
        started, updated = (info.status.get(k) for k in ("started", "updated"))
        return RunView(run_id, state, info.iteration, total if isinstance(total, int) else None, message,
                       info.metrics, samples[-1] if samples else None, info.eval_samples(),
                       info.config.get("eval_cfg") is True, _time(started), _time(updated),
                       every if isinstance(every := info.config.get("eval_every"), int) and info.config.get(
                           "eval_prompts") else None)

    def shutdown(self) -> None:
        """When the app exits: ask live runs to stop (they save a checkpoint first); end those not yet started."""
        for job in self._jobs.values():
            if not job.alive:
                continue
            if RunStore(job.run_dir).holds_run():
                RunStore(job.run_dir).request_stop()
            else:
                job.process.terminate()


def _time(value) -> float | None:
    """A status.json time stamp, or None when it is missing or not a number."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _ended_without_status(job: Job) -> tuple[str, str]:
    """State and message of a process that exited while its status still said running (or never existed)."""
    if job.killed:
        return "stopped", "the training process was ended by the app"
    code = job.process.returncode
    reason = "killed (out of memory?)" if code in (-9, 137) else f"exit code {code}"
    return "failed", f"the training process ended ({reason}): {last_log_line(job.log_path)}"


def last_log_line(path: Path, limit: int = 300) -> str:
    """The last non-empty line of a log (an error message, never a whole traceback), shortened."""
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no log"
    return (lines[-1][:limit] if lines else "no output")
