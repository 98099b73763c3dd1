"""The run store: one folder per fine-tuning run. `RunStore` subscribes to the trainer's events and writes
the folder; the command line, the app and the notebooks read runs through it.

    runs/<id>/
        config.json          the TrainConfig (JSON)
        status.json          state (running / finished / stopped / failed), iteration, pid, error, times
        metrics.jsonl        one JSON object per iteration: {"iteration": i, "reward/mean": ..., ...}
        metrics.damaged.txt  lines of metrics.jsonl that were not rows, set aside when a resume rewrote it
        samples/iter_XXXX.png  grid of that iteration's rollout images
        samples/eval_XXXX.png  grid of the first held-out prompts at that evaluation (a row per CFG scale)
        checkpoints/latest.json  -> {"iteration": i, "dir": "iter_XXXX"}
        checkpoints/iter_XXXX/   weights.safetensors (trained parameters: LoRA adapters for LoRA runs),
                                 optimizer.pt (AdamW state), state.json (iteration),
                                 critic.pt (ppo's critic and its Adam state),
                                 pytorch_lora_weights.safetensors (LoRA runs of SD3 / FLUX: diffusers' LoRA
                                 format, `pipe.load_lora_weights(folder)` loads it; `models.lora`)
        tensorboard/         TensorBoard event files (when the run reports to it)
        STOP                 written by `request_stop`; the trainer stops within one iteration

Every file is replaced atomically (`core.files.atomic_write`), so a crash mid-write leaves the previous
version; metrics lines are appended with flush + fsync, and a torn last line from a crash is closed before
the next append, so no complete row is ever lost. A checkpoint becomes visible only once complete, and is
removed only after its successor is (`train.checkpoints`). Nothing read from a run leads outside its folder, and a
run folder removed while its run trains is not made again.
"""

from __future__ import annotations

import csv
import io
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from workbench.core.errors import WorkbenchError
from workbench.core.files import atomic_write, clean_json, read_json, write_json
from workbench.train.checkpoints import CHECKPOINT_NAME, Checkpoint, load_checkpoint, write_checkpoint
from workbench.train.checkpoints import iteration_of as _iteration_of

STATES = ("running", "finished", "stopped", "failed")
CONFIG, STATUS, METRICS, STOP = "config.json", "status.json", "metrics.jsonl", "STOP"
DAMAGED_METRICS = "metrics.damaged.txt"  # lines of metrics.jsonl that were not rows, kept when a resume rewrites it
SD3_PIPELINE_T5_TOKENS = 256  # the T5 tokens of SD3 prompts in runs saved before max_sequence_length existed


def _sd3_folder(model) -> bool:
    """Whether `model` names a diffusers SD3 folder (its model_index.json readable and naming the SD3 pipeline)."""
    try:
        index = json.loads((Path(model).expanduser() / "model_index.json").read_text())
    except (OSError, TypeError, ValueError):
        return False
    return isinstance(index, dict) and index.get("_class_name") == "StableDiffusion3Pipeline"


@dataclass
class RunInfo:
    """What a run folder holds, as read from disk; `damaged` says why a part could not be read."""

    path: Path
    config: dict
    status: dict
    metrics: list[dict] = field(default_factory=list)
    damaged: str = ""

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def state(self) -> str:
        """running, finished, stopped, failed; 'interrupted' for a run whose process is gone while its status
        still says running; 'damaged' when its status cannot be read."""
        if self.damaged and not self.status:
            return "damaged"
        state = self.status.get("state", "unknown")
        if state == "running" and not process_alive(self.status.get("pid"), self.status.get("pid_start")):
            return "interrupted"
        return state

    @property
    def iteration(self) -> int:
        value = self.status.get("iteration", 0)
        return value if isinstance(value, int) else 0

    def series(self, metric: str) -> tuple[list[int], list[float]]:
        """(iterations, values) of one metric over the iterations that logged it."""
        return metric_series(self.metrics, metric)

    def samples(self) -> list[Path]:
        """Rollout grids samples/iter_XXXX.png, oldest first."""
        return sorted((self.path / "samples").glob("iter_*.png"), key=_iteration_of)

    def eval_samples(self) -> list[Path]:
        """Held-out grids samples/eval_XXXX.png (fixed prompts and noise: before/after), oldest first."""
        return sorted((self.path / "samples").glob("eval_*.png"), key=_iteration_of)


def metric_series(rows: list[dict], metric: str) -> tuple[list[int], list[float]]:
    """(iterations, values) of one metric over the metrics rows that logged a number for it."""
    pairs = [(r["iteration"], float(r[metric])) for r in rows
             if isinstance(r.get(metric), (int, float)) and not isinstance(r.get(metric), bool)]
    return [i for i, _ in pairs], [v for _, v in pairs]


def process_start(pid: int) -> int | None:
    """The start time of a process in clock ticks since boot (/proc/<pid>/stat field 22), None where unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def process_alive(pid, start=None) -> bool:
    """True when process `pid` exists and, where its start time was recorded, is the same process (a pid
    reused after a crash does not count)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid < 2**31:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, owned by someone else
    return start is None or process_start(pid) in (None, start)


class RunStore:
    """One run folder: its paths, the writes the trainer's events cause, and the reads everyone else does.

        store = RunStore.create("runs", "demo")        # a fresh folder
        Trainer(config, store).run()                   # the trainer's events write it
        RunStore.open("runs/demo").info().series("reward/mean")
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.training = False  # set by the trainer's first event: from then on a write never makes the folder again

    @property
    def _within(self) -> Path | None:
        """The folder writes may not make (`core.files.atomic_write`): the run's, once its run trains."""
        return self.path if self.training else None

    def __repr__(self) -> str:
        return f"RunStore({str(self.path)!r})"

    # ------------------------------------------------------------------------------------ folders
    @classmethod
    def create(cls, root: str | Path = "runs", name: str | None = None) -> RunStore:
        """A fresh folder `root/<name>` (default name: the time, e.g. 20250101-120000, made unique).

        An existing non-empty folder is an error when named (resume it instead) and skipped when not."""
        root, auto = Path(root), name is None
        name = name or time.strftime("%Y%m%d-%H%M%S")
        if "/" in name or name in (".", ".."):  # an empty name was replaced by the time above
            raise WorkbenchError(f"run name {name!r} must be a plain folder name such as 'demo'")
        path, suffix = root / name, 1
        while path.exists() and (not path.is_dir() or any(path.iterdir())):
            if not auto:
                raise WorkbenchError(f"run folder {path} already exists and is not empty; choose another name "
                                     "or resume it with --resume")
            path, suffix = root / f"{name}-{suffix}", suffix + 1
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise WorkbenchError(f"cannot create run folder {path}: {err.strerror or err}") from None
        return cls(path)

    @classmethod
    def open(cls, path: str | Path) -> RunStore:
        """An existing run folder (one with config.json); anything else is a WorkbenchError."""
        path = Path(path)
        if not path.is_dir():
            raise WorkbenchError(f"run folder {path} does not exist; pass the folder given to --out")
        if not (path / CONFIG).exists():
            raise WorkbenchError(f"{path} is not a run folder (no {CONFIG}); pass the folder given to --out")
        return cls(path)

    def holds_run(self) -> bool:
        return (self.path / CONFIG).exists()  # a damaged one (a folder named config.json) still marks a run

    def check_fresh(self) -> None:
        """A new run may start here: the folder is missing or empty (never appended to, never a file)."""
        if self.holds_run():
            raise WorkbenchError(f"{self.path} already holds a run; resume it (--resume) or choose a new --out")
        if self.path.exists() and not self.path.is_dir():
            raise WorkbenchError(f"{self.path} is a file; choose a folder for --out")
        if self.path.is_dir() and any(self.path.iterdir()):
            raise WorkbenchError(f"{self.path} is not empty and holds no run; choose a new or empty folder for --out")

    # ------------------------------------------------------------------------------------ the subscriber
    def __call__(self, event) -> None:
        """Write what a trainer event means for the folder (events come from the main process only). A folder
        removed while its run trains is not made again: the run stops with a message, and its end is not written."""
        self.training = True
        if event.kind != "started" and not self.path.is_dir():
            if event.kind in ("finished", "stopped", "failed"):
                return
            raise self._removed()
        try:
            self._write(event)
        except WorkbenchError:
            if event.kind == "started" or self.path.is_dir():
                raise
            raise self._removed() from None  # removed while the event was written

    def _removed(self) -> WorkbenchError:
        return WorkbenchError(f"run folder {self.path} was removed while the run was training; the run stops "
                              "(nothing is written again)")

    def _write(self, event) -> None:
        kind, data = event.kind, event.data
        if kind == "started":
            self.write_config(data["config"])
            if data.get("resumed_from") is not None:
                self.truncate_metrics(data["resumed_from"])
            self.clear_stop()
            self.write_status("running", event.iteration)
        elif kind == "iteration":
            self.append_metrics(data)
            self.write_status("running", event.iteration)
        elif kind == "samples":
            self.save_samples(event.iteration, data["grid"])
        elif kind == "eval_samples":
            self.save_samples(event.iteration, data["grid"], prefix="eval")
        elif kind == "checkpoint":
            self.save_checkpoint(event.iteration, data["weights"], data["optimizer"], keep=data.get("keep", 1),
                                 critic=data.get("critic"), lora=data.get("lora"))
        elif kind in ("finished", "stopped", "failed"):
            self.clear_stop()
            error = f"{data.get('type', 'Error')}: {data['error']}" if kind == "failed" else None
            self.write_status(kind, event.iteration, error)

    # ------------------------------------------------------------------------------------ writes
    def write_config(self, config: dict) -> Path:
        return write_json(self.path / CONFIG, config, within=self._within)

    def write_status(self, state: str, iteration: int, error: str | None = None, started: float | None = None) -> Path:
        """Replace status.json; `started` defaults to the previous file's start time (or now)."""
        if state not in STATES:
            raise WorkbenchError(f"unknown run state '{state}'; valid states: {', '.join(STATES)}")
        if started is None:
            try:
                started = float(self.status().get("started", time.time()))
            except (WorkbenchError, TypeError, ValueError):
                started = time.time()
        return write_json(self.path / STATUS, {"state": state, "iteration": iteration, "pid": os.getpid(),
                                               "pid_start": process_start(os.getpid()), "error": error,
                                               "started": started, "updated": time.time()}, within=self._within)

    def append_metrics(self, record: dict) -> None:
        """Append one JSON line (one write, flush + fsync). A torn last line left by a crash is closed first,
        so the new row is never glued to it (readers skip the torn fragment)."""
        path = self.path / METRICS
        line = json.dumps(clean_json(record), separators=(",", ":")) + "\n"
        try:
            with open(path, "ab+") as f:
                f.seek(0, os.SEEK_END)
                if f.tell() > 0:
                    f.seek(-1, os.SEEK_END)
                    if f.read(1) != b"\n":
                        line = "\n" + line
                f.write(line.encode())
                f.flush()
                os.fsync(f.fileno())
        except OSError as err:
            raise WorkbenchError(f"cannot append to {path}: {err.strerror or err}") from None

    def truncate_metrics(self, last_iteration: int) -> None:
        """Keep the rows with iteration <= last_iteration (resuming from that checkpoint re-does the rest).
        Lines that are not rows (a crash's torn tail, damaged bytes) are kept aside in metrics.damaged.txt."""
        rows = [r for r in self.metrics() if r["iteration"] <= last_iteration]
        path = self.path / METRICS
        raw = path.read_bytes() if path.is_file() else b""
        unread = [line for line in raw.splitlines() if line.strip() and not _is_row(line)]
        if unread:
            with open(self.path / DAMAGED_METRICS, "ab") as f:
                f.write(b"".join(line + b"\n" for line in unread))
        atomic_write(self.path / METRICS, "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows),
                     within=self._within)

    def save_samples(self, iteration: int, image, prefix: str = "iter") -> Path:
        """A PIL image as samples/<prefix>_XXXX.png: the iteration's rollout grid (iter) or held-out grid (eval)."""
        buf = io.BytesIO()
        image.save(buf, format="PNG")
        return atomic_write(self.path / "samples" / f"{prefix}_{iteration:04d}.png", buf.getvalue(),
                            within=self._within)

    def save_checkpoint(self, iteration: int, weights: dict[str, torch.Tensor], optimizer_state: dict,
                        keep: int = 1, critic: dict | None = None, lora=None) -> Path:
        """Write checkpoints/iter_XXXX/ under a temporary name, fsync it, rename it into place, point latest.json
        at it, and only then remove what it replaces: the older checkpoints beyond the newest `keep` (and a folder
        of the same iteration written before). A reader therefore always finds a complete checkpoint; one it
        picked may vanish under it, replaced by a newer one (`CheckpointGone`). A LoRA run's `lora`
        (`models.lora.LoraFile`) is also written in diffusers' format, pytorch_lora_weights.safetensors."""
        return write_checkpoint(self.path / "checkpoints", iteration, weights, optimizer_state, keep, critic,
                                within=self._within, lora=lora)

    # ------------------------------------------------------------------------------------ the stop flag
    def request_stop(self) -> Path | None:
        """Ask the trainer running here to stop (it saves a checkpoint and ends 'stopped'). A run that is not
        running gets no STOP file: None."""
        if not self.holds_run():
            RunStore.open(self.path)  # raises the not-a-run error
        if self.info().state != "running":
            return None
        return atomic_write(self.path / STOP, f"{time.time()}\n", within=self.path)

    def stop_requested(self) -> bool:
        return (self.path / STOP).exists()

    def clear_stop(self) -> None:
        path = self.path / STOP
        if path.is_dir():
            raise WorkbenchError(f"{path} is a folder; remove it (a STOP file asks the run to stop) and try again")
        path.unlink(missing_ok=True)

    # ------------------------------------------------------------------------------------ reads
    def config(self) -> dict:
        """The run's saved settings. A run saved before `max_sequence_length` existed encoded SD3
        prompts with the diffusers pipeline's 256 T5 tokens, and keeps them when it resumes or loads (the default is
        now Flow-GRPO's 128, docs/methods.md "Real models")."""
        saved = read_json(self.path / CONFIG)
        if isinstance(saved, dict) and "max_sequence_length" not in saved and _sd3_folder(saved.get("model")):
            saved = {**saved, "max_sequence_length": SD3_PIPELINE_T5_TOKENS}
        return saved

    def status(self) -> dict:
        return read_json(self.path / STATUS) if (self.path / STATUS).exists() else {}

    def metrics(self) -> list[dict]:
        """Every complete row of metrics.jsonl (objects with an integer iteration); torn or garbled lines skipped."""
        path = self.path / METRICS
        try:
            if path.exists() and not path.is_file():
                raise WorkbenchError(f"{path} is not a file; its rows cannot be read")
            text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
        except OSError as err:
            raise WorkbenchError(f"cannot read {path}: {err.strerror or err}") from None
        return [json.loads(line) for line in text.splitlines() if _is_row(line)]

    def info(self) -> RunInfo:
        """Config, status and metrics; a part that cannot be read leaves the run listed as damaged, with the reason."""
        parts, problems = {}, []
        for name, read in (("config", self.config), ("status", self.status), ("metrics", self.metrics)):
            try:
                parts[name] = read()
            except WorkbenchError as err:
                parts[name] = [] if name == "metrics" else {}
                problems.append(str(err))
        return RunInfo(self.path, parts["config"], parts["status"], parts["metrics"], "; ".join(problems))

    def checkpoints(self) -> list[Path]:
        """Checkpoint folders inside this run, the one latest.json names first, then the others newest first."""
        root = self.path / "checkpoints"
        folders = sorted((p for p in root.glob("iter_*") if p.is_dir() and CHECKPOINT_NAME.match(p.name)),
                         key=_iteration_of, reverse=True)
        pointer = root / "latest.json"
        if pointer.is_file():
            try:
                named = read_json(pointer).get("dir")
            except WorkbenchError:
                named = None
            if isinstance(named, str) and CHECKPOINT_NAME.match(named) and (root / named) in folders:
                folders.remove(root / named)
                folders.insert(0, root / named)
        return folders

    def latest_checkpoint(self) -> Checkpoint | None:
        """The newest complete checkpoint (latest.json's first, then older complete ones), or None if none is."""
        return self.newest_checkpoint()[0]

    def newest_checkpoint(self) -> tuple[Checkpoint | None, str]:
        """(the newest complete checkpoint or None, why the first checkpoint folder tried could not be read: '')."""
        problem = ""
        for folder in self.checkpoints():
            try:
                return load_checkpoint(folder), problem
            except WorkbenchError as err:
                problem = problem or _samples_still(folder, str(err))
        return None, problem


def _samples_still(folder: Path, problem: str) -> str:
    """A checkpoint's problem for a resume, saying so when its weights still sample (only its optimizer state or
    critic is missing or damaged)."""
    try:
        load_checkpoint(folder, optimizer=False)
    except WorkbenchError:
        return problem
    return f"{problem}; its weights still sample (the app's picker, --model with the run), but a resume needs all"


def _is_row(line: str | bytes) -> bool:
    """A metrics line is a row when it is a JSON object with an integer iteration."""
    try:
        row = json.loads(line)
    except (ValueError, RecursionError):
        return False
    iteration = row.get("iteration") if isinstance(row, dict) else None
    return isinstance(iteration, int) and not isinstance(iteration, bool)


# ------------------------------------------------------------------------------------ many runs
def list_runs(root: str | Path = "runs") -> list[RunInfo]:
    """Every run folder directly under root, newest first; a damaged run is listed (state 'damaged') and
    never hides the others. A missing root is an empty list."""
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise WorkbenchError(f"{root} is a file, not a folder of runs")
    folders = [p for p in root.glob("*") if RunStore(p).holds_run()] if root.is_dir() else []

    def started(info: RunInfo) -> float:
        value = info.status.get("started", 0)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0

    return sorted((RunStore(p).info() for p in folders), key=started, reverse=True)


def compare_runs(paths: list[str | Path], metric: str) -> dict[str, dict]:
    """{run name: {"iterations": [...], "values": [...], "last": float | None}} for one metric."""
    if not paths:
        raise WorkbenchError("compare_runs needs at least one run folder")
    infos = [RunStore.open(p).info() for p in paths]
    out = {}
    for info in infos:
        its, values = info.series(metric)
        out[info.name] = {"iterations": its, "values": values, "last": values[-1] if values else None}
    if all(not v["values"] for v in out.values()):
        names = sorted({k for info in infos for r in info.metrics for k in r if k != "iteration"})
        raise WorkbenchError(f"no run logged metric '{metric}'; logged metrics: {', '.join(names) or 'none'}")
    return out


def export_csv(run: RunInfo, path: str | Path) -> Path:
    """Write a run's metrics as CSV: one row per iteration, one column per metric (empty where unlogged)."""
    columns = ["iteration"] + sorted({k for r in run.metrics for k in r if k != "iteration"})
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")  # a missing or None value: ""
    writer.writeheader()
    writer.writerows(run.metrics)
    return atomic_write(path, buffer.getvalue())
