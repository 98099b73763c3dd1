"""Timestep schedules for rectified-flow sampling (SD3-style shift), and MixGRPO's sliding SDE window over them.

`sd3_sigmas` reproduces diffusers' `FlowMatchEulerDiscreteScheduler(shift=...).set_timesteps(N).sigmas`
exactly (tested), so the embedded model and real SD3 models run on the same grid. FLUX's
resolution-dependent schedule lives with its adapter (`workbench.models.adapters.flux_pipeline_sigmas`).
"""

from __future__ import annotations

import numpy as np
import torch

from workbench.core.errors import WorkbenchError

NUM_TRAIN_TIMESTEPS = 1000


def shift_sigmas(sigmas: np.ndarray, shift: float) -> np.ndarray:
    """SD3 time shift: sigma -> shift * sigma / (1 + (shift - 1) * sigma). shift > 1 spends more
    steps at high noise."""
    return shift * sigmas / (1 + (shift - 1) * sigmas)


SCHEDULES = ("model", "linspace")  # the model's own grid (`FlowPolicy.schedule`); GCPO's shifted linspace


def linspace_sigmas(steps: int, shift: float = 3.0) -> torch.Tensor:
    """Sigmas (T + 1,) = shift applied to linspace(1, 0, T + 1): GCPO's grid (xingzhejun/GCPO
    `train_grpo_flux_pickscore.py` l. 219-220, `sd3_time_shift`); it ends at 0 without a sigma_min."""
    if steps < 1:
        raise WorkbenchError(f"steps must be a positive integer, got {steps}")
    if shift <= 0:
        raise WorkbenchError(f"shift must be positive, got {shift}")
    return torch.from_numpy(shift_sigmas(np.linspace(1.0, 0.0, steps + 1), shift)).to(torch.float32)  # (T + 1,)


def sd3_sigmas(steps: int, shift: float = 3.0) -> torch.Tensor:
    """Sigmas (T + 1,) from 1 down to 0 for `steps` = T Euler transitions; the last one is 0."""
    if steps < 1:
        raise WorkbenchError(f"steps must be a positive integer, got {steps}")
    if shift <= 0:
        raise WorkbenchError(f"shift must be positive, got {shift}")
    # diffusers computes sigma_min in float32 at construction, the rest in float64
    sigma_min = float(shift_sigmas(torch.tensor(1.0 / NUM_TRAIN_TIMESTEPS, dtype=torch.float32), shift))
    base = np.linspace(1.0 * NUM_TRAIN_TIMESTEPS, sigma_min * NUM_TRAIN_TIMESTEPS, steps) / NUM_TRAIN_TIMESTEPS
    sigmas = torch.from_numpy(shift_sigmas(base, shift)).to(torch.float32)  # (T,)
    return torch.cat([sigmas, torch.zeros(1)])  # (T + 1,)


def mixgrpo_window(iteration: int, num_steps: int, size: int = 4, shift_every: int = 25) -> tuple[int, int]:
    """MixGRPO's sliding SDE window: (start, size) at this training iteration.

    The window moves one step from high to low noise every shift_every iterations and wraps back to
    step 0 after the last position (num_steps - size).
    """
    if size < 1 or size > num_steps or shift_every < 1 or iteration < 0:
        raise WorkbenchError(f"need 1 <= size <= num_steps ({num_steps}), shift_every >= 1, iteration >= 0; "
                             f"got size={size}, shift_every={shift_every}, iteration={iteration}")
    return (iteration // shift_every) % (num_steps - size + 1), size
