"""Timestep schedules for rectified-flow sampling (SD3-style shift).

`sd3_sigmas` reproduces diffusers' `FlowMatchEulerDiscreteScheduler(shift=...).set_timesteps(N).sigmas`
exactly (tested), so the embedded model and real SD3 models run on the same grid. `flux_sigmas`
reproduces the FLUX pipeline's resolution-dependent (exponential) shift.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from workbench.errors import WorkbenchError

NUM_TRAIN_TIMESTEPS = 1000


def shift_sigmas(sigmas: np.ndarray, shift: float) -> np.ndarray:
    """SD3 time shift: sigma -> shift * sigma / (1 + (shift - 1) * sigma). shift > 1 spends more
    steps at high noise."""
    return shift * sigmas / (1 + (shift - 1) * sigmas)


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


def flux_sigmas(steps: int, image_seq_len: int, base_shift: float = 0.5, max_shift: float = 1.15,
                base_seq_len: int = 256, max_seq_len: int = 4096) -> torch.Tensor:
    """FLUX schedule (T + 1,): linspace(1, 1/T) shifted by exp(mu) with mu linear in the token count."""
    if steps < 1:
        raise WorkbenchError(f"steps must be a positive integer, got {steps}")
    slope = (max_shift - base_shift) / (max_seq_len - base_seq_len)
    mu = image_seq_len * slope + (base_shift - slope * base_seq_len)
    base = np.linspace(1.0, 1.0 / steps, steps)
    sigmas = math.exp(mu) / (math.exp(mu) + (1 / base - 1) ** 1.0)
    return torch.cat([torch.from_numpy(sigmas).to(torch.float32), torch.zeros(1)])
