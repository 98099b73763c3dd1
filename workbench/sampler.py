"""Sampling loops over a `FlowPolicy`: the deterministic Euler ODE, and grouped SDE trajectories with
exact log-probs (`sample_group`, Flow-GRPO arXiv 2505.05470, METHODS.md section 1)."""

from __future__ import annotations

import torch

from workbench.policy import FlowPolicy
from workbench.schedule import sd3_sigmas


def initial_noise(shape: tuple[int, ...], seed: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """x_T ~ N(0, I) of the given shape, reproducible from seed on any device (drawn on the CPU)."""
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(device)


@torch.no_grad()
def ode_sample(policy: FlowPolicy, prompts: list[str], steps: int = 16, seed: int = 0,
               shift: float | None = None, guidance_scale: float = 1.0) -> torch.Tensor:
    """One image per prompt with the deterministic Euler ODE x_{t+dt} = x_t + v dt.

    Returns RGB images (B, 3, H, W) in [0, 1].
    """
    sigmas = sd3_sigmas(steps, policy.default_shift if shift is None else shift).to(policy.device)
    cond = policy.encode(prompts, cfg=guidance_scale != 1.0)
    x = initial_noise((len(prompts), *policy.latent_shape), seed, policy.device)  # (B, C, H, W)
    for i in range(steps):
        v = policy.velocity(x, sigmas[i].expand(len(prompts)), cond, guidance_scale)
        x = x + (sigmas[i + 1] - sigmas[i]) * v.float()
    return policy.decode(x)
