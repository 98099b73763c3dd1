"""Fine-tuning runs as separate processes: start, refuse a second run per device, stop, and read progress.

A run is `python -m workbench train ... --out <runs>/<id>` started with `subprocess.Popen`, so a crash
or an out-of-memory kill in training ends that process only, never the app. The trainer writes
config.json, status.json, metrics.jsonl and samples/ into the run folder (see `workbench.train.store`); the
app only reads them. Writing `<run>/STOP` asks the trainer to stop within one iteration.
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
from workbench.rl.chunking import parse_chunk_spec
from workbench.rl.objectives import OBJECTIVES
from workbench.train import store as runs
from workbench.train.presets import PRESETS
from workbench.ui.guard import number, whole_number

TRAIN_COMMAND = (sys.executable, "-m", "workbench", "train")
OBJECTIVE_ORDER = ("chunk_grpo", "step_grpo", "gspo", "dapo", "gpg", "gfpo", "dr_grpo")  # how the menu lists them
LOG_DIR = ".logs"  # <runs root>/.logs/<id>.log holds each run's stdout and stderr
REPO_ROOT = Path(__file__).resolve().parents[2]  # so `-m workbench` imports this checkout


@dataclass
class TrainForm:
    """The Fine-tune tab's fields, checked before any process starts."""

    objective: str = "chunk_grpo"  # a registered objective (workbench.rl.objectives.OBJECTIVES)
    reward: str = "adherence"  # reward spec "name:weight,..." (workbench.rewards)
    chunks: str = "2,3,4,7"  # chunk sizes over the trained steps (GCPO's temporal chunks)
    lr: float = 3e-5  # AdamW learning rate (the trainer's embedded_demo default)
    iterations: int = 30  # policy-update iterations
    group: int = 8  # G, images per prompt
    steps: int = 16  # T, denoising steps per trajectory
    lora_rank: int = 0  # LoRA rank for real models; 0 = full fine-tuning
    model: str | None = None  # model folder; None = the embedded model
    device: str | None = None  # passed on only when the app was started with --device

    def __post_init__(self):
        from workbench.rewards import parse_reward_spec

        OBJECTIVES.get(self.objective)  # an unknown name lists the valid ones
        parse_reward_spec(self.reward)
        self.steps = whole_number(self.steps, "steps", 1)
        self.group = whole_number(self.group, "group size", 2)
        self.iterations = whole_number(self.iterations, "iterations", 1)
        self.lora_rank = whole_number(self.lora_rank, "LoRA rank", 0)
        parse_chunk_spec(self.chunks, self.steps)
        self.lr = number(self.lr, "learning rate")
        if not 0 < self.lr < 1:
            raise WorkbenchError(f"learning rate must be in (0, 1), e.g. 1e-4; got {self.lr}")

    def args(self, out: Path) -> list[str]:
        """Command-line flags of `workbench train` for this form; dapo, gpg, gspo and gfpo start from their
        presets, which add what the method pairs with its loss (DAPO's dynamic sampling, GPG's advantages, ...)."""
        flags = ["--preset", self.objective] if self.objective in PRESETS else []
        flags += ["--objective", self.objective, "--chunks", self.chunks.replace(" ", ""), "--reward", self.reward,
                 "--group", str(self.group), "--steps", str(self.steps), "--iterations", str(self.iterations),
                 "--lr", repr(self.lr), "--out", str(out)]
        if self.lora_rank > 0:
            flags += ["--lora-rank", str(self.lora_rank)]
        if self.model:
            flags += ["--model", self.model]
        if self.device:
            flags += ["--device", self.device]
        return flags


def objective_names() -> list[str]:
    """Registered objectives, the issue's order first (chunk_grpo, step_grpo, gspo, ...), then any others."""
    names = OBJECTIVES.names()
    return [n for n in OBJECTIVE_ORDER if n in names] + [n for n in names if n not in OBJECTIVE_ORDER]


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
        return self.process.poll() is None


@dataclass
class RunView:
    """What the app shows about a run right now."""

    run_id: str
    state: str  # starting, running, finished, stopped, failed, unknown
    iteration: int
    message: str  # error or note, '' when none
    metrics: list[dict]
    sample: Path | None  # newest samples/iter_XXXX.png

    @property
    def done(self) -> bool:
        return self.state in ("finished", "stopped", "failed")


class JobManager:
    """Starts training processes, one per device at a time, and reports on them (thread-safe)."""

    def __init__(self, runs_root: str | Path, device: str, command: tuple[str, ...] | list[str] = TRAIN_COMMAND):
        self.root, self.device, self.command = Path(runs_root), device, list(command)
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()

    def busy(self) -> str | None:
        """The id of the run using this device: a live process of ours, or a running run on disk."""
        for job in self._jobs.values():
            if job.alive:
                return job.run_id
        for status_path in self.root.glob(f"*/{runs.STATUS}"):
            if status_path.parent.name in self._jobs:
                continue
            try:
                status = runs.read_json(status_path)
            except WorkbenchError:
                continue
            if status.get("state") == "running" and _training_pid_alive(status.get("pid")):
                return status_path.parent.name
        return None

    def start(self, form: TrainForm) -> Job:
        """Start `workbench train` for the form in a fresh run folder; WorkbenchError when the device is busy."""
        with self._lock:
            running = self.busy()
            if running is not None:
                raise WorkbenchError(f"busy: run {running} is using the {self.device}; stop it or wait for it to end")
            run_id = self._new_id(form.objective)
            run_dir, log_path = self.root / run_id, self.root / LOG_DIR / f"{run_id}.log"
            log_path.parent.mkdir(parents=True, exist_ok=True)
            env = {**os.environ, "PYTHONUNBUFFERED": "1", "GRADIO_ANALYTICS_ENABLED": "False",
                   "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)}
            with open(log_path, "wb") as log:
                process = subprocess.Popen([*self.command, *form.args(run_dir)], stdout=log, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, env=env, start_new_session=True)
            job = Job(run_id, run_dir, process, log_path)
            self._jobs[run_id] = job
            return job

    def _new_id(self, objective: str) -> str:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run_id, n = f"{stamp}-{objective}", 1
        while (self.root / run_id).exists() or run_id in self._jobs:
            run_id, n = f"{stamp}-{objective}-{n}", n + 1
        return run_id

    def stop(self, run_id: str) -> str:
        """Ask a run to stop; a second request (or a run that has not started training yet) ends the process."""
        job = self._jobs.get(run_id)
        if job is None or not job.alive:
            return f"run {run_id} is not running"
        started = (job.run_dir / runs.CONFIG).is_file()
        if started and not job.stop_requested:
            runs.request_stop(job.run_dir)
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
        """State, iteration, metrics and newest sample of a run, reconciling status.json with the process."""
        job = self._jobs.get(run_id)
        run_dir = job.run_dir if job else self.root / run_id
        status = runs.read_json(run_dir / runs.STATUS) if (run_dir / runs.STATUS).is_file() else {}
        state, message = status.get("state", "unknown"), status.get("error") or ""
        if job is not None and not job.alive and state in ("unknown", "running"):
            state, message = _ended_without_status(job)
        elif job is not None and job.alive and not status:
            state = "starting"
        samples = sorted((run_dir / "samples").glob("iter_*.png"))
        return RunView(run_id, state, int(status.get("iteration", 0) or 0), message, runs.read_metrics(run_dir),
                       samples[-1] if samples else None)

    def shutdown(self) -> None:
        """When the app exits: ask live runs to stop (they save a checkpoint first); end those not yet started."""
        for job in self._jobs.values():
            if not job.alive:
                continue
            if (job.run_dir / runs.CONFIG).is_file():
                runs.request_stop(job.run_dir)
            else:
                job.process.terminate()


def _ended_without_status(job: Job) -> tuple[str, str]:
    """State and message of a process that exited while status.json still said running (or never existed)."""
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


def _training_pid_alive(pid) -> bool:
    """True when pid is a live `workbench` process (a stale status.json from a crash does not count)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    cmdline = Path(f"/proc/{pid}/cmdline")
    if cmdline.exists():
        try:
            return b"workbench" in cmdline.read_bytes()
        except OSError:
            return False
    return True
