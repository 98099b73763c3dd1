"""A fine-tuning run's checkpoints: written so that a reader always finds a complete one, and read back.

    checkpoints/iter_XXXX/   weights.safetensors (trained parameters: LoRA adapters for LoRA runs),
                             optimizer.pt (AdamW state), state.json (iteration), critic.pt (ppo's critic),
                             pytorch_lora_weights.safetensors (LoRA runs of SD3 / FLUX, diffusers' format)
    checkpoints/latest.json  -> {"iteration": i, "dir": "iter_XXXX"}

`write_checkpoint` writes a checkpoint under a temporary name, fsyncs it and renames it into place; the older ones
it replaces are removed only after that. A run that is training can so always be loaded: a reader that picked a
checkpoint the trainer removed meanwhile gets `CheckpointGone` and takes the newest again (`train.sources`).
Sampling needs the weights only (`load_checkpoint(optimizer=False)`); a resume needs the optimizer state too.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from workbench.core.errors import WorkbenchError
from workbench.core.files import write_json

CHECKPOINT_NAME = re.compile(r"^iter_\d{4,}$")


def iteration_of(path: Path) -> int:
    """The iteration in a name such as iter_0042 / eval_10000.png (numeric order: iter_10000 after iter_9999)."""
    digits = re.search(r"_(\d+)", path.name)
    return int(digits.group(1)) if digits else -1


@dataclass
class Checkpoint:
    """A complete checkpoint read back from a run."""

    iteration: int
    weights: dict[str, torch.Tensor]
    optimizer_state: dict | None  # None when read for sampling only (`load_checkpoint(optimizer=False)`)
    folder: Path
    critic: dict | None = None  # ppo's critic and its optimizer state (critic.pt); None for other objectives


def write_checkpoint(root: Path, iteration: int, weights: dict[str, torch.Tensor], optimizer_state: dict,
                     keep: int = 1, critic: dict | None = None, within: Path | None = None, lora=None) -> Path:
    """Write root/iter_XXXX/ (root: a run's checkpoints folder) as `RunStore.save_checkpoint` describes; `within`:
    the run's folder when it must exist already (never made again, `core.files.atomic_write`); `lora`: a LoRA
    run's `models.lora.LoraFile`, written in diffusers' format too."""
    final, tmp = root / f"iter_{iteration:04d}", root / f".iter_{iteration:04d}.tmp"
    replaced = root / f".iter_{iteration:04d}.old"
    try:
        root.mkdir(parents=within is None, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        save_file({k: v.detach().cpu().contiguous() for k, v in weights.items()}, str(tmp / "weights.safetensors"))
        torch.save(optimizer_state, tmp / "optimizer.pt")
        if critic is not None:
            torch.save(critic, tmp / "critic.pt")
        if lora is not None:
            from workbench.models.lora import save_lora_file

            save_lora_file(tmp, lora)
        (tmp / "state.json").write_text(json.dumps({"iteration": iteration}))
        for part in (*tmp.iterdir(), tmp):
            _fsync(part)
        if final.exists():
            shutil.rmtree(replaced, ignore_errors=True)
            os.replace(final, replaced)
        os.replace(tmp, final)
        _fsync(root)
    except (OSError, SafetensorError, RuntimeError) as err:  # safetensors' and torch.save's I/O errors are their own
        why = getattr(err, "strerror", None) or (str(err).splitlines() or [type(err).__name__])[0][:200]
        raise WorkbenchError(f"cannot write checkpoint {final}: {why}") from None
    write_json(root / "latest.json", {"iteration": iteration, "dir": final.name}, within=within)
    old = sorted((p for p in root.glob("iter_*") if p.is_dir() and p.name != final.name), key=iteration_of)
    for p in [*old[:max(0, len(old) - (keep - 1))], replaced]:
        _remove(p)
    return final


def _remove(folder: Path) -> None:
    """Remove a checkpoint folder so that no reader sees it half deleted: renamed out of sight first (atomic), then
    deleted file by file."""
    gone = folder.with_name(f".{folder.name.lstrip('.')}.gone")
    try:
        os.replace(folder, gone)
    except OSError:  # already gone
        return
    shutil.rmtree(gone, ignore_errors=True)


class CheckpointGone(WorkbenchError):
    """A checkpoint folder vanished while it was read: its run saved a newer one and removed it (`keep_checkpoints`)."""


def _fsync(path: Path) -> None:
    """Flush a file or folder to the disk (a folder: the names in it), so a rename publishes complete contents."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _reading(folder: Path, read):
    """read() of a checkpoint's parts; a failure because the folder vanished meanwhile is `CheckpointGone`, another
    one a WorkbenchError naming the part that cannot be read and why (`read` sets `part[0]` as it goes)."""
    part = ["state.json"]
    try:
        return read(part)
    except (OSError, KeyError, EOFError, ValueError, TypeError, IndexError, pickle.UnpicklingError, SafetensorError,
            RuntimeError, AttributeError, zipfile.BadZipFile) as err:  # a damaged zip or pickle fails in many ways
        if not folder.is_dir():
            raise CheckpointGone(f"checkpoint {folder} was removed while it was read: its run saved a newer one "
                                 "(it keeps its newest keep_checkpoints); load the run again for its newest") from None
        if isinstance(err, FileNotFoundError):
            raise WorkbenchError(f"checkpoint {folder} is incomplete: {part[0]} is missing") from None
        why = (str(err).splitlines() or [type(err).__name__])[0][:100]
        raise WorkbenchError(f"checkpoint {folder} is incomplete or corrupted: {part[0]} cannot be read ({why})"
                             ) from None


def _read_iteration(folder: Path) -> int:
    iteration = json.loads((folder / "state.json").read_text())["iteration"]
    if not isinstance(iteration, int) or isinstance(iteration, bool) or iteration < 0:
        raise ValueError(f"iteration {iteration!r} is not a count")
    return iteration


def checkpoint_iteration(folder: str | Path) -> int:
    """The iteration of a checkpoint whose state and weights can be read, from state.json and the weights' header
    (no weights loaded: how the picker resolves a run to its newest checkpoint); else a WorkbenchError."""
    from safetensors import safe_open

    folder = Path(folder)

    def read(part: list) -> int:
        iteration = _read_iteration(folder)
        part[0] = "weights.safetensors"
        with safe_open(str(folder / part[0]), "pt") as f:
            f.keys()
        return iteration
    return _reading(folder, read)


def load_checkpoint(folder: str | Path, optimizer: bool = True) -> Checkpoint:
    """A checkpoint folder's iteration, weights and (with optimizer=True, what a resume needs) optimizer state and
    critic; an incomplete one is a WorkbenchError naming the part. Sampling reads the weights only
    (optimizer=False): a checkpoint that lost optimizer.pt still samples."""
    folder = Path(folder)

    def read(part: list) -> tuple:
        iteration = _read_iteration(folder)
        part[0] = "weights.safetensors"
        weights = load_file(str(folder / part[0]))
        if not optimizer:
            return iteration, weights, None, None
        part[0] = "optimizer.pt"
        with zipfile.ZipFile(folder / part[0]) as archive:  # torch.save's zip: its CRCs catch damaged bytes
            damaged = archive.testzip()
        if damaged is not None:
            raise ValueError(f"{damaged} fails its CRC check")
        optimizer_state = torch.load(folder / part[0], weights_only=True)
        if not isinstance(optimizer_state, dict):
            raise ValueError(f"it holds a {type(optimizer_state).__name__}, not an optimizer state")
        part[0] = "critic.pt"
        critic = torch.load(folder / part[0], weights_only=True) if (folder / part[0]).is_file() else None
        return iteration, weights, optimizer_state, critic

    iteration, weights, optimizer_state, critic = _reading(folder, read)
    bad = [name for name, t in weights.items() if t.is_floating_point() and not bool(torch.isfinite(t).all())]
    if bad:
        raise WorkbenchError(f"checkpoint {folder} holds NaN or inf weights (e.g. {bad[0]}): the run diverged "
                             "before it was saved")
    return Checkpoint(iteration, weights, optimizer_state, folder, critic)
