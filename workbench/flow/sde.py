"""One stochastic sampling step with its exact log-probability (docs/methods.md "SDE step").

Adapted from flow_grpo's `sde_step_with_logprob` (yifan123/flow_grpo, flow_grpo/diffusers_patch/
sd3_sde_with_logprob.py): rewritten as pure functions over tensors with explicit sigmas instead of a
scheduler object, extended with DanceGRPO's constant-diffusion and CPS variants, and split into the step's
coefficients (`step_coefficients`, which depend on the noise levels alone) and the step itself (`sde_step`).

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


@dataclass
class StepCoefficients:
    """p(x_next | x_t) = N(x_coef x_t + v_coef v, std^2) for S steps (docs/methods.md "SDE step").

    Every kind's mean is affine in x_t and v with coefficients that depend on the noise levels alone, so a loop
    over a schedule computes them for all its steps once (`step_coefficients` over (T,) sigmas) and takes one
    step's row at each step (`at`), instead of ~40 operations on (B, 1, 1, 1) tensors per step.
    """

    x_coef: torch.Tensor  # (S, 1, 1, 1)
    v_coef: torch.Tensor  # (S, 1, 1, 1)
    std: torch.Tensor  # (S,) the step's std, 0 for a deterministic step
    noise_scale: torch.Tensor  # (S,) the SDE's sigma_t (`step_noise_scale`)
    sigma: torch.Tensor  # (S,) t, for the x0 prediction x_t - t v

    def mean(self, x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """The step's mean x_coef x + v_coef v (B, C, H, W), in float32."""
        return x.float() * self.x_coef + v.float() * self.v_coef  # coefficients (B or 1, 1, 1, 1) first

    def at(self, step: int | torch.Tensor) -> StepCoefficients:
        """The rows of step indices `step` (B,), or of one step (an int: one row, which broadcasts over a batch)."""
        rows = slice(step, step + 1) if isinstance(step, int) else step
        return StepCoefficients(self.x_coef[rows], self.v_coef[rows], self.std[rows], self.noise_scale[rows],
                                self.sigma[rows])


def step_coefficients(sigma: torch.Tensor, sigma_next: torch.Tensor, noise_level: float | torch.Tensor,
                      kind: str = "flow_grpo", sigma_max: torch.Tensor | None = None) -> StepCoefficients:
    """Mean coefficients and std of p(x_next | x_t) for steps sigma -> sigma_next (both (S,), t and t_next).

    noise_level (float or (S,)) is `a` for flow_grpo and cps, `eta` for dance_grpo; 0 gives the deterministic
    Euler step for every kind. sigma_max replaces t in sigma_t where t = 1 (the released code uses sigmas[1]; no
    division by 0).

    flow_grpo's coefficients are the released code's expressions. DanceGRPO's mean
    x + dt (v + eta^2 (x - (1 - t) x0_hat) / (2 t^2)) with x0_hat = x - t v expands to flow_grpo's with sigma_t = eta,
    and CPS's (1 - t_next) x0_hat + s x1_hat with x1_hat = x + (1 - t) v to x_coef = 1 - t_next + s,
    v_coef = s (1 - t) - (1 - t_next) t; both equal their released forms up to float32 rounding
    (tests/test_sde_reference.py).

    The log-prob of every kind is the full Normal density (`gaussian_log_prob`). Flow-GRPO's released CPS
    branch keeps only -||x_next - mean||^2 (no constants, no 1 / (2 std^2)), so its ratios move on another
    scale and clip ranges from its CPS configs do not carry over to this one (docs/methods.md "SDE step").
    """
    t = sigma.float().view(-1, 1, 1, 1)  # (S, 1, 1, 1)
    t_next = sigma_next.float().view(-1, 1, 1, 1)
    dt = t_next - t  # < 0
    a = torch.as_tensor(noise_level, dtype=torch.float32, device=t.device).reshape(-1, 1, 1, 1)  # (S or 1, 1, 1, 1)
    if kind in ("flow_grpo", "dance_grpo"):
        if kind == "flow_grpo":  # sigma_t = a sqrt(t / (1 - t))
            t_safe = torch.where(t >= 1, sigma_max.float().view(-1, 1, 1, 1) if sigma_max is not None else t, t)
            sigma_t = a * torch.sqrt(t / (1 - t_safe))
        else:  # DanceGRPO flux_step with sde_solver: sigma_t = eta
            sigma_t = a
        x_coef = 1 + sigma_t**2 / (2 * t) * dt
        v_coef = (1 + sigma_t**2 * (1 - t) / (2 * t)) * dt
        std = sigma_t * torch.sqrt(-dt)
    elif kind == "cps":  # Coefficients-Preserving Sampling (arXiv 2509.05952)
        std = t_next * torch.sin(a * math.pi / 2)
        s = torch.sqrt((t_next**2 - std**2).clamp_min(0))
        x_coef = (1 - t_next) + s
        v_coef = s * (1 - t) - (1 - t_next) * t
    else:
        raise WorkbenchError(f"unknown SDE kind '{kind}'; valid kinds: {', '.join(SDE_KINDS)}")
    x_coef, v_coef, std, t = torch.broadcast_tensors(x_coef, v_coef, std, t)  # every field S rows
    std, sigma_all = std.reshape(-1), t.reshape(-1)  # (S,)
    return StepCoefficients(x_coef, v_coef, std, step_noise_scale(std, sigma_all, t_next.reshape(-1), kind),
                            sigma_all)


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


def sde_step(x: torch.Tensor, v: torch.Tensor, coefficients: StepCoefficients, noise: torch.Tensor | None = None,
             x_next: torch.Tensor | None = None) -> StepOutput:
    """Sample x_next ~ N(mean, std^2) (or score a given x_next) and return its log-prob; x, v: (B, C, H, W),
    coefficients: B rows or one (`StepCoefficients.at`).

    With std 0 (noise level 0, or the last CPS step) the step is the deterministic Euler/ODE step,
    x_next = mean, and log_prob is 0 by convention (a deterministic step carries no ratio).
    """
    c = coefficients
    x, v = x.float(), v.float()
    mean = c.mean(x, v)  # (B, C, H, W)
    std = c.std.expand(x.shape[0])  # (B,)
    if x_next is None:
        if noise is None:
            noise = torch.randn_like(mean)
        x_next = torch.addcmul(mean, std.view(-1, 1, 1, 1), noise.float())
    deterministic = std <= 0  # (B,)
    log_prob = gaussian_log_prob(x_next, mean, torch.where(deterministic, torch.ones_like(std), std))
    log_prob = torch.where(deterministic, torch.zeros_like(log_prob), log_prob)
    x0_pred = torch.addcmul(x, c.sigma.view(-1, 1, 1, 1), v, value=-1)
    return StepOutput(x_next, mean, std, log_prob, x0_pred, c.noise_scale.expand(x.shape[0]))


def sde_step_with_logprob(x: torch.Tensor, v: torch.Tensor, sigma: torch.Tensor, sigma_next: torch.Tensor,
                          noise_level: float | torch.Tensor = 0.7, kind: str = "flow_grpo",
                          noise: torch.Tensor | None = None, x_next: torch.Tensor | None = None,
                          sigma_max: torch.Tensor | None = None) -> StepOutput:
    """One step from its noise levels: `sde_step` with `step_coefficients(sigma, sigma_next, noise_level, kind,
    sigma_max)` (sigma, sigma_next: (B,) or (1,))."""
    return sde_step(x, v, step_coefficients(sigma, sigma_next, noise_level, kind, sigma_max), noise, x_next)
