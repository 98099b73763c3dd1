"""The numerics of model evaluations that only look ahead: credit continuations (docs/methods.md "Continuation
numerics").

Monte-Carlo credit spends ~90 % of its time in the transformer's forward pass. On a device with native
bfloat16 arithmetic (CUDA with bf16 support, or a CPU with AVX512-BF16 or AMX) the forward pass under
bfloat16 autocast takes about half the time, and the continuation rewards it gives differ from float32 by
far less than their Monte-Carlo error (`experiments/precision.py` measures both). Flow-GRPO's released
trainer samples its rollouts under `accelerator.autocast()` when it fine-tunes all weights
(scripts/train_sd3.py). Sampling and training stay in float32 here: their log-probs feed importance ratios.

    PRECISIONS  "auto" (bfloat16 where the device has it natively, else float32), "float32", "bfloat16"
"""

from __future__ import annotations

import contextlib
import functools

import torch
import torch.nn.functional as F

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


@functools.cache
def _gelu_classes() -> tuple[type, type]:
    """(diffusers' GELU, its subclass that is exact on bfloat16 CPU inputs); diffusers is imported on first use."""
    from diffusers.models.activations import GELU

    class ExactGELUInBFloat16(GELU):
        """diffusers' `GELU(approximate="tanh")` that computes the exact (erf) GELU of a bfloat16 input on the CPU."""

        def gelu(self, gate: torch.Tensor) -> torch.Tensor:
            if gate.dtype == torch.bfloat16 and gate.device.type == "cpu":
                return F.gelu(gate)
            return super().gelu(gate)

    return GELU, ExactGELUInBFloat16


def exact_gelu_in_bfloat16(model: torch.nn.Module) -> int:
    """Let the tanh-approximated GELUs of `model` (the feed-forward of SD3's and FLUX's blocks, so of the embedded
    model) compute the exact, erf GELU when their input is bfloat16 on the CPU; returns how many were changed.

    docs/methods.md "Continuation numerics": in bfloat16 the two forms agree to within the format's rounding (they
    differ by at most 4.7e-4; bfloat16 rounds a GELU output near 8 by up to 3.1e-2), and torch's tanh form took
    ~5x the time of the erf form there, a fifth of a credit measurement on one thread. Float32 evaluations
    (sampling, re-scoring and training of a float32 model) and other devices keep the tanh form."""
    gelu, exact = _gelu_classes()
    changed = [m for m in model.modules() if type(m) is gelu and m.approximate == "tanh"]
    for module in changed:
        module.__class__ = exact  # the same module, weights and adapters; only `gelu` differs
    return len(changed)
