"""Memory budgets: the bytes a sampling, credit or training job will hold, estimated before it starts, so a
size that cannot fit is refused with a message instead of failing with MemoryError after minutes of work.

`rollout_bytes` is the estimate (a pure function of the sizes, docs/methods.md "Memory estimate");
`free_bytes` asks the device what it has; `check_fits` compares them.
"""

from __future__ import annotations

import math
from pathlib import Path

from workbench.core.errors import WorkbenchError

FLOAT_BYTES = 4  # every stored state, prediction and mean is float32


def check_counts(what: str, positive: dict, non_negative: dict | None = None) -> None:
    """The sizes an estimate is computed from are whole numbers, > 0 (`positive`) or >= 0 where zero means none
    (`non_negative`); else a WorkbenchError naming `what` and the size. A size of 0 or -3 would make any job "fit"."""
    for name, value in [*positive.items(), *(non_negative or {}).items()]:
        low = 0 if non_negative and name in non_negative else 1
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise WorkbenchError(f"{what}: {name} must be a whole number >= {low}, got {value!r}")


def rollout_bytes(group: int, steps: int, latent_shape: tuple[int, ...], prompts: int = 1, continuations: int = 0,
                  copies: int = 2) -> int:
    """Bytes of the float32 tensors a rollout keeps: for each of `prompts` groups of G trajectories over T steps,
    the states (T + 1 per trajectory), x0 predictions and step means (T each), held `copies` times (per-step
    lists, then stacked); with M `continuations` per intermediate state (Monte-Carlo credit) also the (T - 1) G M
    continuation rows and their noise. A lower bound: the model's activations come on top.

        rollout_bytes(8, 16, (3, 32, 32))  # -> 9633792 (about 9.6 MB)
    """
    check_counts("the rollout estimate", {"group": group, "steps": steps, "prompts": prompts, "copies": copies,
                                          **{f"latent_shape[{i}]": d for i, d in enumerate(latent_shape)}},
                 {"continuations": continuations})
    latent = math.prod(latent_shape)  # elements of one state, C * H * W
    per_trajectory = copies * (3 * steps + 1) * latent
    per_continuation_row = 2 * max(steps - 1, 0) * continuations * latent  # rows and their noise
    return FLOAT_BYTES * prompts * group * (per_trajectory + per_continuation_row)


def free_bytes(device) -> int | None:
    """Free memory of `device`: CUDA's free memory for a GPU, else the host's available memory; None if unknown."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KB'; powers of 1000, one decimal."""
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} PB"


def check_fits(needed: int, device, what: str, fix: str, free: int | None = None) -> None:
    """Refuse a job whose estimate exceeds the device's free memory, saying what to lower. `free` defaults to
    `free_bytes(device)`; an unknown amount passes (the job then fails, if it must, with its own error)."""
    if not isinstance(needed, (int, float)) or isinstance(needed, bool) or not 0 <= needed < math.inf:
        raise WorkbenchError(f"{what}: the memory estimate {needed!r} is not a byte count")
    free = free_bytes(device) if free is None else free
    if free is not None and needed > free:
        raise WorkbenchError(f"{what} needs at least {human_bytes(needed)} of memory but the {device} has "
                             f"{human_bytes(free)} free; {fix}")
