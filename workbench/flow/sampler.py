"""Sampling loops over a `FlowPolicy`: the deterministic Euler ODE, and grouped SDE trajectories with
exact log-probs (`sample_group`, Flow-GRPO arXiv 2505.05470; docs/methods.md "SDE step")."""

from __future__ import annotations

from dataclasses import replace

import torch

from workbench.flow.policy import Conditioning, FlowPolicy
from workbench.flow.schedule import linspace_sigmas
from workbench.flow.sde import StepCoefficients, StepOutput, sde_step, step_coefficients
from workbench.flow.trajectory import SamplingConfig, TrajectoryGroup, offset_seed


def initial_noise(shape: tuple[int, ...], seed: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """x_T ~ N(0, I) of the given shape, reproducible from seed on any device (drawn on the CPU)."""
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(device)


def ode_sample(policy: FlowPolicy, prompts: list[str], steps: int = 16, seed: int = 0,
               shift: float | None = None, guidance_scale: float = 1.0, noise: torch.Tensor | None = None
               ) -> torch.Tensor:
    """One image per prompt with the deterministic Euler ODE x_{t+dt} = x_t + v dt, from x_T = `noise` (B, C, H, W)
    or else drawn from `seed`.

    Returns RGB images (B, 3, H, W) in [0, 1].
    """
    sigmas = policy.schedule(steps, shift)
    cond = policy.encode(prompts, cfg=guidance_scale != 1.0)
    x = (initial_noise((len(prompts), *policy.latent_shape), seed, policy.device) if noise is None
         else noise.to(policy.device))  # (B, C, H, W)
    for i in range(steps):
        v = policy.velocity(x, sigmas[i].expand(len(prompts)), cond, guidance_scale)
        x = x + (sigmas[i + 1] - sigmas[i]) * v.float()
    return policy.decode(x)


ode_sample = torch.no_grad()(ode_sample)  # not a decorator: mutmut skips decorated functions


def config_sigmas(policy: FlowPolicy, config: SamplingConfig) -> torch.Tensor:
    """Sigmas (T + 1,) of a sampling config: the model's own grid, or GCPO's shifted linspace."""
    if config.schedule == "linspace":
        shift = policy.default_shift if config.shift is None else config.shift
        return linspace_sigmas(config.steps, shift).to(policy.device)
    return policy.schedule(config.steps, config.shift)


def group_noise(config: SamplingConfig, latent_shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Generator]:
    """x_T for one group (G, C, H, W) and the generator that then draws its SDE noise, both from config.seed."""
    gen = torch.Generator().manual_seed(config.seed)
    n = 1 if config.shared_noise else config.group
    x_T = torch.randn((n, *latent_shape), generator=gen).expand(config.group, *latent_shape)
    return x_T.contiguous(), gen


def schedule_coefficients(sigmas: torch.Tensor, config: SamplingConfig) -> StepCoefficients:
    """The SDE step's coefficients (`flow.sde.step_coefficients`) of all T steps of `config` over sigmas (T + 1,):
    noise_level inside the SDE window, 0 (a deterministic Euler step) outside it."""
    level = config.noise_level * config.sde_mask().to(sigmas.device).float()  # (T,)
    return step_coefficients(sigmas[:-1], sigmas[1:], level, config.sde, sigma_max=sigmas[1].expand(config.steps))


def transition(policy: FlowPolicy, x: torch.Tensor, sigmas: torch.Tensor, step: torch.Tensor | int,
               cond: Conditioning, config: SamplingConfig, noise: torch.Tensor | None = None,
               x_next: torch.Tensor | None = None, coefficients: StepCoefficients | None = None) -> StepOutput:
    """One step for a batch: sample x_next (given `noise`) or score a stored `x_next`.

    x: (B, C, H, W); step: int or (B,) step indices into sigmas. Steps outside the SDE window (or
    noise_level 0) are deterministic Euler steps with log_prob 0. This is the function re-scoring
    and training differentiate through. coefficients: `schedule_coefficients(sigmas, config)`, which a loop
    over steps computes once (by default every call does).
    """
    v = policy.velocity(x, sigmas[torch.as_tensor(step, device=sigmas.device).expand(x.shape[0])], cond,
                        config.guidance_scale)  # sigma (B,)
    return step_from_velocity(x, v, sigmas, step, config, noise, x_next, coefficients)


def step_from_velocity(x: torch.Tensor, v: torch.Tensor, sigmas: torch.Tensor, step: torch.Tensor | int,
                       config: SamplingConfig, noise: torch.Tensor | None = None,
                       x_next: torch.Tensor | None = None, coefficients: StepCoefficients | None = None) -> StepOutput:
    """The step of `transition` given the velocity v (B, C, H, W) already evaluated at x."""
    coefficients = schedule_coefficients(sigmas, config) if coefficients is None else coefficients
    rows = step if isinstance(step, int) else torch.as_tensor(step, device=sigmas.device).expand(x.shape[0])  # (B,)
    return sde_step(x, v, coefficients.at(rows), noise, x_next)


def sample_groups(policy: FlowPolicy, prompts: list[str], config: SamplingConfig,
                  seeds: list[int] | None = None, progress=None) -> list[TrajectoryGroup]:
    """G SDE trajectories for each prompt, batched across groups, recording every state and log-prob.

    seeds: one group seed per prompt (default config.seed + i). `progress(done, total)` is called after
    each step.
    """
    for prompt in prompts:
        policy.check_prompt(prompt)
    seeds = [offset_seed(config.seed, i) for i in range(len(prompts))] if seeds is None else seeds
    configs = [replace(config, seed=s) for s in seeds]
    sigmas = config_sigmas(policy, config)
    device = policy.device
    noise = [group_noise(c, policy.latent_shape) for c in configs]
    x = torch.cat([x_T for x_T, _ in noise]).to(device)  # (N * G, C, H, W)
    cond = policy.encode(prompts, cfg=config.guidance_scale != 1.0).repeat(config.group)
    steps, sde, coefficients = config.steps, config.sde_mask().tolist(), schedule_coefficients(sigmas, config)
    states, x0s, means, stds, lps = [x], [], [], [], []
    for t in range(steps):
        eps = None
        if sde[t]:  # each group's SDE noise from its own generator
            draws = [torch.randn(x_T.shape, generator=gen) for x_T, gen in noise]
            eps = (draws[0] if len(draws) == 1 else torch.cat(draws)).to(device)  # (N * G, C, H, W)
        out = transition(policy, x, sigmas, t, cond, config, noise=eps, coefficients=coefficients)
        x = out.x_next
        states.append(x), x0s.append(out.x0_pred), means.append(out.mean)
        stds.append(out.std), lps.append(out.log_prob)
        if progress is not None:
            progress(t + 1, steps)
    images = policy.decode(x)  # (N * G, 3, H', W')

    fields = {name: torch.stack(items, dim=1).cpu() for name, items in  # (N * G, T or T + 1, ...), stacked once
              (("states", states), ("x0_preds", x0s), ("means", means), ("stds", stds), ("log_probs", lps))}
    fields["images"] = images.cpu()

    def rows(i: int) -> dict[str, torch.Tensor]:  # group i's rows
        return {name: x[i * config.group:(i + 1) * config.group] for name, x in fields.items()}

    return [TrajectoryGroup(prompt=p, config=c, sigmas=sigmas.cpu(), meta={"model": policy.name}, **rows(i))
            for i, (p, c) in enumerate(zip(prompts, configs))]


sample_groups = torch.no_grad()(sample_groups)  # not a decorator: mutmut skips decorated functions


def sample_group(policy: FlowPolicy, prompt: str, config: SamplingConfig, progress=None) -> TrajectoryGroup:
    """G trajectories of one prompt with group seed config.seed (see `sample_groups`)."""
    return sample_groups(policy, [prompt], config, [config.seed], progress)[0]


def rescore(policy: FlowPolicy, group: TrajectoryGroup) -> torch.Tensor:
    """Recompute the log-probs (G, T) of a stored group's transitions under `policy`.

    With the weights that sampled the group every ratio exp(new - old) is 1 (to float32 precision).
    """
    cfg = group.config
    cond = policy.encode([group.prompt], cfg=cfg.guidance_scale != 1.0).repeat(group.group_size)
    sigmas, states = group.sigmas.to(policy.device), group.states.to(policy.device)
    coefficients = schedule_coefficients(sigmas, cfg)
    out = [transition(policy, states[:, t], sigmas, t, cond, cfg, x_next=states[:, t + 1],
                      coefficients=coefficients).log_prob for t in range(group.num_steps)]
    return torch.stack(out, dim=1).cpu()  # (G, T)


rescore = torch.no_grad()(rescore)  # not a decorator: mutmut skips decorated functions
