"""One stochastic sampling step with its exact log-probability (docs/methods.md "SDE step").

Adapted from flow_grpo's `sde_step_with_logprob` (yifan123/flow_grpo, flow_grpo/diffusers_patch/
sd3_sde_with_logprob.py): rewritten as pure functions over tensors with explicit sigmas instead of a
scheduler object, and extended with DanceGRPO's constant-diffusion and CPS variants.

Convention: x_t = (1 - t) x_0 + t eps, sampling runs t: 1 -> 0, dt = t_next - t < 0.
The step log-prob is the MEAN over latent elements (flow_grpo, DanceGRPO and GCPO all do this),
computed in float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from workbench.core.errors import WorkbenchError

SDE_KINDS = ("flow_grpo", "dance_grpo", "cps")
_LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))


@dataclass
class StepOutput:
    """One transition x_t -> x_next. Tensors (B, C, H, W) except log_prob and std (B,)."""

    x_next: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor  # (B,) one std per sample (same for every element)
    log_prob: torch.Tensor  # (B,) mean over elements of log N(x_next; mean, std^2)
    x0_pred: torch.Tensor  # x_t - t v, the model's guess of the final image
    noise_scale: torch.Tensor | None = None  # (B,) the SDE's sigma_t (see `step_noise_scale`); None = std


def step_mean_std(x: torch.Tensor, v: torch.Tensor, sigma: torch.Tensor, sigma_next: torch.Tensor,
                  noise_level: float | torch.Tensor, kind: str = "flow_grpo",
                  sigma_max: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean (B, C, H, W) and std (B,) of p(x_next | x_t) for one SDE step.

    sigma, sigma_next: (B,) current and next noise level (t and t_next). noise_level (float or (B,)) is
    `a` for flow_grpo and cps, `eta` for dance_grpo; 0 gives the deterministic Euler step for every kind.
    sigma_max replaces t in sigma_t where t = 1 (the released code uses sigmas[1]; no division by 0).

    The log-prob of every kind is the full Normal density (`gaussian_log_prob`). Flow-GRPO's released CPS
    branch keeps only -||x_next - mean||^2 (no constants, no 1 / (2 std^2)), so its ratios move on another
    scale and clip ranges from its CPS configs do not carry over to this one (docs/methods.md "SDE step").
    """
    x, v = x.float(), v.float()
    t = sigma.float().view(-1, 1, 1, 1)  # (B, 1, 1, 1)
    t_next = sigma_next.float().view(-1, 1, 1, 1)
    dt = t_next - t  # < 0
    a = torch.as_tensor(noise_level, dtype=torch.float32, device=x.device).reshape(-1, 1, 1, 1)  # (B or 1, 1, 1, 1)
    if kind == "flow_grpo":
        t_safe = torch.where(t >= 1, sigma_max.float().view(-1, 1, 1, 1) if sigma_max is not None else t, t)
        std_t = a * torch.sqrt(t / (1 - t_safe))  # sigma_t = a sqrt(t / (1 - t))
        mean = (x * (1 + std_t**2 / (2 * t) * dt)
                + v * ((1 + std_t**2 * (1 - t) / (2 * t)) * dt))  # coefficients (B, 1, 1, 1) first
        std = std_t * torch.sqrt(-dt)
    elif kind == "dance_grpo":  # DanceGRPO flux_step with sde_solver: std = eta sqrt(sigma - sigma_next)
        std = a * torch.sqrt(-dt)
        x0_hat = x - t * v
        # Euler mean plus the score correction: score = -(x - (1 - t) x0_hat) / t^2
        mean = x + dt * (v + 0.5 * a**2 * (x - (1 - t) * x0_hat) / t**2)
    elif kind == "cps":  # Coefficients-Preserving Sampling (arXiv 2509.05952)
        std = t_next * torch.sin(a * math.pi / 2)
        x0_hat = x - t * v
        x1_hat = x + (1 - t) * v
        mean = (1 - t_next) * x0_hat + torch.sqrt((t_next**2 - std**2).clamp_min(0)) * x1_hat
    else:
        raise WorkbenchError(f"unknown SDE kind '{kind}'; valid kinds: {', '.join(SDE_KINDS)}")
    return mean, std.reshape(-1).expand(x.shape[0])


def step_noise_scale(std: torch.Tensor, sigma: torch.Tensor, sigma_next: torch.Tensor, kind: str) -> torch.Tensor:
    """(B,) the noise scale sigma_t that the released code returns beside a step (its `std_dev_t`).

    flow_grpo: std = sigma_t sqrt(-dt), so sigma_t = std / sqrt(-dt) = a sqrt(t / (1 - t)); dance_grpo:
    std = eta sqrt(-dt), so it is eta; cps: the step std itself (t_next sin(a pi / 2)). Flow-GRPO's training
    code divides its KL term by 2 sigma_t^2 (docs/methods.md, "KL to the reference").
    """
    if kind == "cps":
        return std
    neg_dt = (sigma.float() - sigma_next.float()).reshape(-1).expand_as(std)  # (B,) -dt > 0
    return std / neg_dt.sqrt()


def gaussian_log_prob(x_next: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Mean over elements of log N(x_next; mean, std^2): (B, C, H, W), (B,) -> (B,).

    The squared distance is averaged over the elements first and divided by 2 std^2 after (std is one number
    per sample): the same value with two passes over the latent instead of five."""
    std = std.float()
    sq = (x_next.float() - mean.float()).square().flatten(1).mean(dim=1)  # (B,)
    return -sq / (2 * std**2) - torch.log(std) - _LOG_SQRT_2PI


def sde_step_with_logprob(x: torch.Tensor, v: torch.Tensor, sigma: torch.Tensor, sigma_next: torch.Tensor,
                          noise_level: float | torch.Tensor = 0.7, kind: str = "flow_grpo",
                          noise: torch.Tensor | None = None, x_next: torch.Tensor | None = None,
                          sigma_max: torch.Tensor | None = None) -> StepOutput:
    """Sample x_next ~ N(mean, std^2) (or score a given x_next) and return its log-prob.

    With noise_level 0 (or std 0, e.g. the last CPS step) the step is the deterministic Euler/ODE step,
    x_next = mean, and log_prob is 0 by convention (a deterministic step carries no ratio).
    """
    mean, std = step_mean_std(x, v, sigma, sigma_next, noise_level, kind, sigma_max)
    if x_next is None:
        if noise is None:
            noise = torch.randn_like(mean)
        x_next = torch.addcmul(mean, std.view(-1, 1, 1, 1), noise.float())
    deterministic = std <= 0  # (B,)
    log_prob = gaussian_log_prob(x_next, mean, torch.where(deterministic, torch.ones_like(std), std))
    log_prob = torch.where(deterministic, torch.zeros_like(log_prob), log_prob)
    x0_pred = torch.addcmul(x.float(), sigma.float().view(-1, 1, 1, 1), v.float(), value=-1)
    return StepOutput(x_next, mean, std, log_prob, x0_pred, step_noise_scale(std, sigma, sigma_next, kind))
