"""The run store: one folder per fine-tuning run, written by the trainer and read by the app and the CLI.

    runs/<id>/
        config.json          the TrainConfig (JSON)
        status.json          state (running / finished / stopped / failed), iteration, pid, error, times
        metrics.jsonl        one JSON object per iteration: {"iteration": i, "reward/mean": ..., ...}
        samples/iter_XXXX.png  grid of that iteration's rollout images
        checkpoints/latest.json  -> {"iteration": i, "dir": "iter_XXXX"}
        checkpoints/iter_XXXX/   weights.safetensors (trained parameters: LoRA adapters for LoRA runs),
                                 optimizer.pt (AdamW state), state.json (iteration)
        STOP                 written by `request_stop`; the trainer stops within one iteration

Every file is replaced atomically (written to a temporary file in the same folder, then `os.replace`),
so a crash mid-write leaves the previous version intact; metrics lines are appended with flush + fsync.
A checkpoint folder is complete before `latest.json` points at it.
"""

from __future__ import annotations

import csv
import json
import math
import os
import pickle
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from workbench.core.errors import WorkbenchError

STATES = ("running", "finished", "stopped", "failed")
CONFIG, STATUS, METRICS, STOP = "config.json", "status.json", "metrics.jsonl", "STOP"


# ------------------------------------------------------------------------------------ atomic files
def atomic_write(path: str | Path, data: bytes | str) -> Path:
    """Write `data` to `path` through a temporary file in the same folder and `os.replace`."""
    path = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(raw)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as err:
        raise WorkbenchError(f"cannot write {path}: {err.strerror or err}; choose a writable run folder") from None
    return path


def write_json(path: str | Path, obj) -> Path:
    return atomic_write(path, json.dumps(clean_json(obj), indent=2))


def clean_json(obj):
    """Make obj strict JSON: NaN / inf floats become None, tuples become lists (recursively)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): clean_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean_json(v) for v in obj]
    return obj


def read_json(path: str | Path) -> dict:
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise WorkbenchError(f"{path} does not exist; is {path.parent} a run folder (made by `workbench train`)?"
                             ) from None
    except (OSError, json.JSONDecodeError) as err:
        raise WorkbenchError(f"cannot read {path}: {err}") from None


# ------------------------------------------------------------------------------------ run folders
def new_run_dir(root: str | Path = "runs", name: str | None = None) -> Path:
    """Create and return a fresh run folder `root/<name>` (default name: the time, e.g. 20250101-120000).

    An existing non-empty folder is an error (use `Trainer.resume` to continue a run).
    """
    root = Path(root)
    auto = name is None
    name = name or time.strftime("%Y%m%d-%H%M%S")
    if "/" in name or name in ("", ".", ".."):
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
    return path


def check_run_dir(path: str | Path) -> Path:
    """The run folder as a Path; a missing folder or one without config.json is a WorkbenchError."""
    path = Path(path)
    if not path.is_dir():
        raise WorkbenchError(f"run folder {path} does not exist; list runs with `workbench train --list` "
                             "or pass the folder given to --out")
    if not (path / CONFIG).is_file():
        raise WorkbenchError(f"{path} is not a run folder (no {CONFIG}); pass the folder given to --out")
    return path


def write_status(run_dir: str | Path, state: str, iteration: int, error: str | None = None,
                 started: float | None = None) -> Path:
    """Replace status.json; `started` defaults to the previous file's start time (or now)."""
    if state not in STATES:
        raise WorkbenchError(f"unknown run state '{state}'; valid states: {', '.join(STATES)}")
    path = Path(run_dir) / STATUS
    if started is None:
        started = read_json(path).get("started", time.time()) if path.is_file() else time.time()
    return write_json(path, {"state": state, "iteration": iteration, "pid": os.getpid(), "error": error,
                             "started": started, "updated": time.time()})


# ------------------------------------------------------------------------------------ metrics
def append_metrics(run_dir: str | Path, record: dict) -> None:
    """Append one JSON line to metrics.jsonl (single write, flush + fsync: a line is all there or absent)."""
    path = Path(run_dir) / METRICS
    line = json.dumps(clean_json(record), separators=(",", ":")) + "\n"
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
    except OSError as err:
        raise WorkbenchError(f"cannot append to {path}: {err.strerror or err}") from None


def read_metrics(run_dir: str | Path) -> list[dict]:
    """Every complete line of metrics.jsonl as a dict (a torn last line from a crash is skipped)."""
    path = Path(run_dir) / METRICS
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def truncate_metrics(run_dir: str | Path, last_iteration: int) -> None:
    """Keep only the lines with iteration <= last_iteration (used when resuming from a checkpoint)."""
    rows = [r for r in read_metrics(run_dir) if r.get("iteration", 0) <= last_iteration]
    atomic_write(Path(run_dir) / METRICS, "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows))


# ------------------------------------------------------------------------------------ stop requests
def request_stop(run_dir: str | Path) -> Path:
    """Ask the trainer running in run_dir to stop: it saves a checkpoint and ends with state 'stopped'."""
    return atomic_write(check_run_dir(run_dir) / STOP, f"{time.time()}\n")


def stop_requested(run_dir: str | Path) -> bool:
    return (Path(run_dir) / STOP).exists()


def clear_stop(run_dir: str | Path) -> None:
    (Path(run_dir) / STOP).unlink(missing_ok=True)


# ------------------------------------------------------------------------------------ checkpoints
def save_checkpoint(run_dir: str | Path, iteration: int, weights: dict[str, torch.Tensor],
                    optimizer_state: dict, keep: int = 1) -> Path:
    """Write checkpoints/iter_XXXX/ completely, then point checkpoints/latest.json at it; keep the newest `keep`."""
    root = Path(run_dir) / "checkpoints"
    final = root / f"iter_{iteration:04d}"
    tmp = root / f".iter_{iteration:04d}.tmp"
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        save_file({k: v.detach().cpu().contiguous() for k, v in weights.items()}, str(tmp / "weights.safetensors"))
        torch.save(optimizer_state, tmp / "optimizer.pt")
        (tmp / "state.json").write_text(json.dumps({"iteration": iteration}))
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
    except OSError as err:
        raise WorkbenchError(f"cannot write checkpoint {final}: {err.strerror or err}") from None
    write_json(root / "latest.json", {"iteration": iteration, "dir": final.name})
    old = sorted(p for p in root.glob("iter_*") if p.is_dir() and p.name != final.name)
    for p in old[:max(0, len(old) - (keep - 1))]:
        shutil.rmtree(p, ignore_errors=True)
    return final


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The folder checkpoints/latest.json points at, or None if the run has no checkpoint yet."""
    pointer = Path(run_dir) / "checkpoints" / "latest.json"
    if not pointer.is_file():
        return None
    folder = pointer.parent / read_json(pointer)["dir"]
    return folder if folder.is_dir() else None


def load_checkpoint(folder: str | Path) -> tuple[int, dict[str, torch.Tensor], dict]:
    """(iteration, weights, optimizer state) of a checkpoint folder."""
    folder = Path(folder)
    try:
        iteration = json.loads((folder / "state.json").read_text())["iteration"]
        weights = load_file(str(folder / "weights.safetensors"))
        optimizer_state = torch.load(folder / "optimizer.pt", weights_only=True)
    except (OSError, KeyError, EOFError, ValueError, pickle.UnpicklingError, SafetensorError, RuntimeError) as err:
        raise WorkbenchError(f"checkpoint {folder} is incomplete or corrupted ({err}); "
                             "start a new run or restore the folder") from None
    return iteration, weights, optimizer_state


# ------------------------------------------------------------------------------------ reading runs
@dataclass
class RunInfo:
    """What a run folder holds, as read from disk."""

    path: Path
    config: dict
    status: dict
    metrics: list[dict] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def state(self) -> str:
        return self.status.get("state", "unknown")

    def series(self, metric: str) -> tuple[list[int], list[float]]:
        """(iterations, values) of one metric over the iterations that logged it."""
        rows = [(r["iteration"], r[metric]) for r in self.metrics if r.get(metric) is not None]
        return [i for i, _ in rows], [float(v) for _, v in rows]

    def samples(self) -> list[Path]:
        return sorted((self.path / "samples").glob("iter_*.png"))


def load_run(path: str | Path) -> RunInfo:
    """Config, status and metrics of one run folder."""
    path = check_run_dir(path)
    status = read_json(path / STATUS) if (path / STATUS).is_file() else {"state": "unknown", "iteration": 0}
    return RunInfo(path, read_json(path / CONFIG), status, read_metrics(path))


def list_runs(root: str | Path = "runs") -> list[RunInfo]:
    """Every run folder directly under root, newest first (a missing root is an empty list)."""
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise WorkbenchError(f"{root} is a file, not a folder of runs")
    folders = [p for p in root.glob("*") if (p / CONFIG).is_file()] if root.is_dir() else []
    return sorted((load_run(p) for p in folders), key=lambda r: r.status.get("started", 0), reverse=True)


def compare_runs(paths: list[str | Path], metric: str) -> dict[str, dict]:
    """{run name: {"iterations": [...], "values": [...], "last": float | None}} for one metric."""
    if not paths:
        raise WorkbenchError("compare_runs needs at least one run folder")
    out = {}
    for p in paths:
        run = load_run(p)
        its, values = run.series(metric)
        out[run.name] = {"iterations": its, "values": values, "last": values[-1] if values else None}
    if all(not v["values"] for v in out.values()):
        names = sorted({k for p in paths for r in load_run(p).metrics for k in r if k != "iteration"})
        raise WorkbenchError(f"no run logged metric '{metric}'; logged metrics: {', '.join(names) or 'none'}")
    return out


def export_csv(run: RunInfo | str | Path, path: str | Path) -> Path:
    """Write the run's metrics as CSV: one row per iteration, one column per metric (empty where unlogged)."""
    run = run if isinstance(run, RunInfo) else load_run(run)
    columns = ["iteration"] + sorted({k for r in run.metrics for k in r if k != "iteration"})
    lines: list[str] = []

    class _Sink:
        def write(self, text: str) -> None:
            lines.append(text)

    writer = csv.DictWriter(_Sink(), fieldnames=columns, restval="", lineterminator="\n")
    writer.writeheader()
    for row in run.metrics:
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return atomic_write(path, "".join(lines))
