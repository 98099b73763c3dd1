"""The numerics of model evaluations that only look ahead: credit continuations (docs/methods.md "Continuation
numerics").

Monte-Carlo credit spends ~90 % of its time in the transformer's forward pass. On a device with native
bfloat16 arithmetic (CUDA with bf16 support, or a CPU with AVX512-BF16 or AMX) the forward pass under
bfloat16 autocast takes about half the time, and the continuation rewards it gives differ from float32 by
far less than their Monte-Carlo error (`scripts/precision_check.py` measures both). Flow-GRPO's released
trainer samples its rollouts under `accelerator.autocast()` when it fine-tunes all weights
(scripts/train_sd3.py). Sampling and training stay in float32 here: their log-probs feed importance ratios.

    PRECISIONS  "auto" (bfloat16 where the device has it natively, else float32), "float32", "bfloat16"
"""

from __future__ import annotations

import contextlib

import torch

from workbench.core.errors import WorkbenchError

PRECISIONS = ("auto", "float32", "bfloat16")


def native_bf16(device: str | torch.device) -> bool:
    """Whether `device` computes in bfloat16 natively (so autocast to it is faster, not an emulation)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        cpu = getattr(torch, "cpu", None)
        checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
        return any(bool(getattr(cpu, name, lambda: False)()) for name in checks)
    return False


def resolve_precision(precision: str, device: str | torch.device, weights: torch.dtype = torch.float32) -> str:
    """The numerics a PRECISIONS name gives on `device` for a model whose weights are `weights`: "float32" or
    "bfloat16"; a model loaded in half precision computes in its own dtype ("auto" or that name only).
    An unknown name lists the valid ones."""
    if precision not in PRECISIONS:
        raise WorkbenchError(f"unknown precision '{precision}'; valid: {', '.join(PRECISIONS)}")
    if weights != torch.float32:
        own = str(weights).removeprefix("torch.")
        if precision not in ("auto", own):
            raise WorkbenchError(f"the model's weights are {own}: its continuations run in {own}, not {precision} "
                                 "(load the model in float32 to choose)")
        return own
    if precision == "auto":
        return "bfloat16" if native_bf16(device) else "float32"
    return precision


def evaluation_numerics(precision: str, device: str | torch.device):
    """A context in which model evaluations run at a resolved `precision`: bfloat16 autocast, or nothing (float32,
    or a half-precision model's own dtype)."""
    if precision != "bfloat16":
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)
