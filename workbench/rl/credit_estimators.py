"""Credit estimators: ways to value the states of a sampled group (docs/methods.md "Credit estimators").

Every estimator is `fn(policy, group, reward_fn, continuations, seed, crn, progress, precision) -> Estimate`
(precision: the numerics of its transformer evaluations, core/precision.py) and values
states 1..T-1 of every trajectory (and, for the look-ahead estimators, the start state 0). It is registered
with an `EstimatorInfo` that the app's menu, the CLI's choices, the credit handlers and the training config
read (`ESTIMATORS.register(name, info=EstimatorInfo(...))`):

- `mc`  Monte-Carlo: the mean reward of M continuations sampled with the same policy (the reference);
- `ode` ODE completion: the reward of the deterministic Euler completion from the state (TP-GRPO, arXiv
        2602.06422);
- `x0`  denoised prediction: the reward of the model's x0 prediction at the state (Stepwise-Flow-GRPO,
        arXiv 2603.28718; DenseGRPO, arXiv 2601.20218, in the same spirit).

Continuations run through `run_continuations`: rows (trajectory i, start state s, index k), batched
step by step. With common random numbers (crn=True) the noise of step u of continuation k of trajectory
i is seeded by (seed, i, k, u) alone, so continuations from different states of a trajectory share
their noise on the steps they share; independent continuations also seed it by s.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import torch

from workbench.core.precision import evaluation_numerics, resolve_precision
from workbench.core.registry import Registry
from workbench.flow.policy import FlowPolicy
from workbench.flow.trajectory import TrajectoryGroup


@dataclass
class Estimate:
    """State values of one group from one estimator."""

    continuation_rewards: torch.Tensor  # (G, T - 1, M) rewards per state 1..T-1 (M = 1 for look-ahead estimators)
    start: torch.Tensor | None  # (G,) value of state 0, or None: the group mean reward (Monte-Carlo)
    deterministic: bool  # no Monte-Carlo noise: every credit has error 0
    nfe: int  # transformer evaluations of one latent (the cost that dominates)
    seconds: float = 0.0
    start_continuations: torch.Tensor | None = None  # (G, M) continuation rewards from each own x_T (no shared start)


ESTIMATORS: Registry = Registry("credit estimator")


@dataclass(frozen=True)
class EstimatorInfo:
    """One credit estimator's description (see the module doc)."""

    label: str
    """One line for menus and help: what values a state."""
    continuations: bool = False
    """It samples M continuations per state (Monte-Carlo); False: one look-ahead per state, M unused."""
    transformer: bool = True
    """It evaluates the transformer, in the chosen numerics; False: it reuses what the sampler computed (x0)."""
    lookahead: bool = False
    """A deterministic value of every state 0..T-1: a look-ahead reward dense_grpo can train with
    (TrainConfig.lookahead)."""
    order: int = 100
    """Position in menus (lower first)."""


def estimator_names() -> list[str]:
    """The registered estimators in menu order."""
    return sorted(ESTIMATORS.names(), key=lambda name: (ESTIMATORS.info(name).order, name))


def lookahead_names() -> list[str]:
    """The estimators dense_grpo can take its look-ahead reward from (`EstimatorInfo.lookahead`)."""
    return [name for name in estimator_names() if ESTIMATORS.info(name).lookahead]


def estimator_help() -> str:
    """'mc (Monte-Carlo ...), ode (...), ...' for help texts and menus."""
    return ", ".join(f"{name} ({ESTIMATORS.info(name).label})" for name in estimator_names())


def noise_seed(seed: int, traj: int, k: int, step: int, start: int | None) -> int:
    """The generator seed of one continuation's noise at one step; start=None for common random numbers."""
    return hash((seed, traj, k, step, -1 if start is None else start)) & (2 ** 63 - 1)


def _step_noise(rows: torch.Tensor, step: int, seed: int, crn: bool, shape) -> torch.Tensor:
    """(R, C, H, W) noise for the active rows (R, 3) = (i, s, k) at `step`; rows with one key share a draw."""
    cache: dict[int, torch.Tensor] = {}
    out = []
    for i, s, k in rows.tolist():
        key = noise_seed(seed, i, k, step, None if crn else s)
        if key not in cache:
            cache[key] = torch.randn(shape, generator=torch.Generator().manual_seed(key))
        out.append(cache[key])
    return torch.stack(out)


def run_continuations(policy: FlowPolicy, group: TrajectoryGroup, reward_fn, rows: torch.Tensor, seed: int = 0,
                      crn: bool = True, noise_level: float | None = None, progress=None,
                      max_rows: int = 256, precision: str = "float32") -> torch.Tensor:
    """Rewards (R,) of continuations given as rows (R, 3) = (trajectory i, start state s in 0..T-1, index k).

    All rows run in one loop over steps: the rows that start at state s join the batch at step s, so each
    step is one forward pass over every active row, in slices of at most `max_rows` rows. Rows that hold the same
    state (the continuations of one start state, until the first noisy step tells them apart) share one
    transformer evaluation (`distinct_states`). `noise_level` replaces the group's (0 = the deterministic ODE
    completion). `progress(done_steps, steps)` is called after every step and before every further slice: an
    exception raised from it (a cancelled event) stops the work there. `precision` (core/precision.py) is the
    numerics of the transformer's evaluations; the states and rewards stay float32.
    """
    from workbench.flow.sampler import schedule_coefficients, step_from_velocity

    cfg = group.config if noise_level is None else replace(group.config, noise_level=noise_level)
    t_steps, shape = group.num_steps, group.states.shape[2:]
    order = rows[:, 1].argsort(stable=True)
    rows = rows[order]  # sorted by start state
    sigmas, sde = group.sigmas.to(policy.device), cfg.sde_mask()
    coefficients = schedule_coefficients(sigmas, cfg)  # every step's, once
    cond = policy.encode([group.prompt], cfg=cfg.guidance_scale != 1.0)
    x = torch.empty(0, *shape, device=policy.device)  # active rows (A, C, H, W)
    held = torch.empty(0, dtype=torch.long)  # (A,) the state each row holds: i * T + s until its first noisy step
    first = int(rows[:, 1].min())
    with evaluation_numerics(precision, policy.device):  # one context for the loop: weights are cast once
        for u in range(first, t_steps):
            joining = rows[rows[:, 1] == u]
            x = torch.cat([x, group.states[joining[:, 0], u].to(policy.device)])
            held = torch.cat([held, joining[:, 0] * t_steps + u])
            active = rows[: x.shape[0]]  # (A, 3)
            reps, inverse = distinct_states(held)
            v = []
            for j, part in enumerate(reps.to(x.device).split(max_rows)):
                if progress is not None and j:  # also between slices, so a caller can stop the work within one
                    progress(u - first, t_steps - first)
                v.append(policy.velocity(x[part], sigmas[u].expand(len(part)), cond.repeat(len(part)),
                                         cfg.guidance_scale))
            v = torch.cat(v)[inverse.to(x.device)]  # (A, C, H, W)
            noise = _step_noise(active, u, seed, crn, shape).to(policy.device) if sde[u] else None
            parts = noise.split(max_rows) if noise is not None else [None] * len(x.split(max_rows))
            x = torch.cat([step_from_velocity(xb, vb, sigmas, u, cfg, noise=nb, coefficients=coefficients)
                           .x_next.to(xb.dtype)  # keep the dtype
                           for xb, vb, nb in zip(x.split(max_rows), v.split(max_rows), parts)])
            if sde[u]:  # each row drew its own noise: from here on no two rows are known to hold one state
                held = -1 - torch.arange(len(held))
            if progress is not None:
                progress(u - first + 1, t_steps - first)
    rewards = torch.cat([torch.as_tensor(reward_fn(policy.decode(xb), [group.prompt] * xb.shape[0]),
                                         dtype=torch.float32).cpu() for xb in x.split(max_rows)])  # (R,)
    out = torch.empty_like(rewards)
    out[order] = rewards
    return out


run_continuations = torch.no_grad()(run_continuations)  # not a decorator: mutmut skips decorated functions


def distinct_states(held: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows (A,) labelled by the state they hold -> (representatives (D,), inverse (A,)): row a holds the state of
    row representatives[inverse[a]], the first row with its label."""
    labels, inverse = torch.unique(held, return_inverse=True)
    rows = torch.arange(len(held))
    reps = torch.full((len(labels),), len(held), dtype=torch.long).scatter_reduce_(0, inverse, rows, "amin")
    return reps, inverse


def grid_rows(g: int, states: range, ks: range) -> torch.Tensor:
    """Rows (G * S * M, 3) = (i, s, k) for every trajectory, state and continuation index, k fastest."""
    return torch.cartesian_prod(torch.arange(g), torch.tensor(list(states)), torch.tensor(list(ks)))


def continuation_cost(rows: torch.Tensor, steps: int, noisy: torch.Tensor | None = None) -> int:
    """Transformer evaluations `run_continuations` spends on rows (R, 3): a row from state s runs T - s steps, and
    the rows from one state share their evaluations up to and including the first noisy step at or after s
    (noisy: (T,) bool, the SDE steps; None = every step)."""
    noisy = torch.ones(steps, dtype=torch.bool) if noisy is None else noisy.bool()
    starts, counts = rows[:, :2].unique(dim=0, return_counts=True)  # (D, 2) distinct (i, s), rows of each
    cost = 0
    for s, n in zip(starts[:, 1].tolist(), counts.tolist()):
        later = noisy[s:].nonzero()
        shared = int(later[0]) + 1 if len(later) else steps - s  # steps its n rows take as one
        cost += shared + n * (steps - s - shared)
    return cost


def monte_carlo(policy, group, reward_fn, continuations: int = 4, seed: int = 0, crn: bool = True,
                progress=None, precision: str = "float32") -> Estimate:
    """M continuations from every state 1..T-1 with the group's own sampler; V = their mean reward.

    Without shared start noise the trajectories start from different x_T, so the group mean is not their
    start value: M continuations from each x_T^i are sampled too (T more steps each)."""
    g, t = group.group_size, group.num_steps
    first = 1 if group.config.shared_noise else 0
    rows = grid_rows(g, range(first, t), range(continuations))
    start = time.perf_counter()
    rewards = run_continuations(policy, group, reward_fn, rows, seed, crn, progress=progress, precision=precision)
    rewards = rewards.view(g, t - first, continuations)  # (G, S, M)
    own = None if first else rewards[:, 0]  # (G, M) from each x_T^i
    cost = continuation_cost(rows, t, group.config.sde_mask())
    return Estimate(rewards[:, 1 - first:], None, False, cost, time.perf_counter() - start, own)


ESTIMATORS.add(monte_carlo, "mc",
               info=EstimatorInfo("Monte-Carlo: M continuations per state", continuations=True, order=0))


# M, the seed and CRN only share the Monte-Carlo estimator's signature (the ODE has no noise, x0 no
# continuation): mutants of their defaults are equivalent.
def ode_completion(policy, group, reward_fn,
                   continuations: int = 1, seed: int = 0, crn: bool = True,  # pragma: no mutate (above)
                   progress=None, precision: str = "float32") -> Estimate:
    """V(x_s) = reward of the deterministic Euler ODE completion from x_s, for states 0..T-1 (TP-GRPO)."""
    g, t = group.group_size, group.num_steps
    rows = grid_rows(g, range(0, t), range(1))
    start = time.perf_counter()
    rewards = run_continuations(policy, group, reward_fn, rows, seed, noise_level=0.0, progress=progress,
                                precision=precision).view(g, t)
    return Estimate(rewards[:, 1:, None], rewards[:, 0], True, continuation_cost(rows, t),
                    time.perf_counter() - start)


ESTIMATORS.add(ode_completion, "ode", info=EstimatorInfo("ODE completion", lookahead=True, order=10))


# M, the seed and CRN only share the Monte-Carlo estimator's signature (the ODE has no noise, x0 no
# continuation): mutants of their defaults are equivalent.
def denoised_prediction(policy, group, reward_fn,
                        continuations: int = 1, seed: int = 0, crn: bool = True,  # pragma: no mutate (above)
                        progress=None, precision: str = "float32") -> Estimate:
    """V(x_s) = reward of the x0 prediction x_s - t_s v(x_s) stored at sampling, for states 0..T-1.

    The sampler already evaluated the model at every state, so the cost is G T decodes and rewards, no
    transformer evaluation (and `precision` changes nothing)."""
    g, t = group.group_size, group.num_steps
    start = time.perf_counter()
    x0 = group.x0_preds.flatten(0, 1).to(policy.device)  # (G * T, C, H, W), state-major within each trajectory
    rewards = torch.cat([torch.as_tensor(reward_fn(policy.decode(xb), [group.prompt] * xb.shape[0]),
                                         dtype=torch.float32).cpu() for xb in x0.split(256)]).view(g, t)
    if progress is not None:
        progress(1, 1)
    return Estimate(rewards[:, 1:, None], rewards[:, 0], True, 0, time.perf_counter() - start)


ESTIMATORS.add(torch.no_grad()(denoised_prediction), "x0",  # no_grad not as a decorator: mutmut skips those
               info=EstimatorInfo("denoised prediction", transformer=False, lookahead=True, order=20))


def measured_precision(policy: FlowPolicy, estimator: str, precision: str = "auto") -> str:
    """The numerics a credit measured with `estimator` at `precision` records (`Credit.precision`): the resolved
    PRECISIONS name, or the weights' own dtype for an estimator that evaluates no transformer."""
    resolved = resolve_precision(precision, policy.device, policy.dtype)  # an unknown name is refused either way
    if not ESTIMATORS.info(estimator).transformer:  # it reuses the sampler's predictions: the weights' numerics
        return str(policy.dtype).removeprefix("torch.")
    return resolved
