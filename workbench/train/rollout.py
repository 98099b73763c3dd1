"""One training iteration's rollout: sample groups, score them, gather across processes, refill.

Flow-GRPO (arXiv 2505.05470): each iteration samples G SDE trajectories for each of N prompts and
scores the final images. Under several processes, process q samples the groups q::world of the same
global list, so the N groups do not depend on the number of processes.

DAPO's dynamic sampling (arXiv 2503.14476) and GPG (arXiv 2504.02546) replace zero-variance groups
by sampling further rounds of N groups (`advantages.refill_batch` picks the batch). Round r draws
its prompts and seeds from (seed, iteration, r) only, so a resumed run samples exactly what a run
straight through does. Each process fills its own N / world batch slots from its own groups: every
process then stores as many trajectories, and all take the same number of rounds (the decision is
made on the gathered rewards, identically everywhere).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

import numpy as np
import torch

from workbench.flow.policy import FlowPolicy
from workbench.flow.sampler import sample_groups
from workbench.flow.trajectory import SamplingConfig, TrajectoryGroup
from workbench.rewards import RewardFunction
from workbench.rl.advantages import dynamic_sampling_mask, refill_batch
from workbench.train.config import TrainConfig
from workbench.train.distributed import DistInfo


def iteration_seeds(seed: int, iteration: int, pool: int, count: int,
                    round: int = 0) -> tuple[list[int], list[int]]:
    """(prompt indices, group seeds) of one sampling round of an iteration, derived only from (seed, iteration,
    round); round 0 draws from (seed, iteration) alone."""
    rng = np.random.default_rng([seed, iteration] + ([round] if round else []))
    idx = rng.choice(pool, size=count, replace=pool < count).tolist()
    return idx, rng.integers(0, 2**31 - 1, size=count).tolist()


def reward_metrics(rewards: torch.Tensor, components: dict[str, torch.Tensor]) -> dict[str, float]:
    """reward/mean, reward/std, reward/min, reward/max over all samples, reward/<name>/mean per component."""
    out = {"reward/mean": rewards.mean().item(), "reward/std": rewards.std(unbiased=False).item(),
           "reward/min": rewards.min().item(), "reward/max": rewards.max().item()}
    return out | {f"reward/{name}/mean": v.mean().item() for name, v in components.items()}


@dataclass
class Rollout:
    """One iteration's rollout: the N groups that train and every group sampled on the way (R rounds)."""

    groups: list[TrajectoryGroup]  # this process's N / world batch groups
    rewards: torch.Tensor  # (N, G) batch rewards in global group order
    components: dict[str, torch.Tensor]  # name -> (N, G)
    metric: torch.Tensor | None  # (N, G) GFPO filter metric
    flat: torch.Tensor  # (N,) bool, batch groups with zero reward variance
    sampled: torch.Tensor  # (R * N, G) rewards of every sampled group
    sampled_components: dict[str, torch.Tensor]  # name -> (R * N, G)
    rounds: int  # R
    seconds: tuple[float, float]  # (sampling, scoring) over all rounds

    def metrics(self) -> dict[str, float]:
        """reward/* over every sampled trajectory (an unbiased view of the policy) and rollout/* counts."""
        sampled_flat = ~dynamic_sampling_mask(self.sampled)  # (R * N,)
        return reward_metrics(self.sampled, self.sampled_components) | {
            "rollout/groups": float(len(self.sampled)), "rollout/trajectories": float(self.sampled.numel()),
            "rollout/rounds": float(self.rounds), "rollout/zero_std_frac": sampled_flat.float().mean().item(),
            "time/rollout_s": self.seconds[0], "time/reward_s": self.seconds[1]}


class RolloutSampler:
    """Samples and scores an iteration's groups for a trainer (one per process)."""

    def __init__(self, policy: FlowPolicy, config: TrainConfig, pool: list[str], reward_fn: RewardFunction,
                 metric_fn: RewardFunction | None, dist: DistInfo, autocast: Callable[[], AbstractContextManager]):
        self.policy, self.config, self.pool = policy, config, pool
        self.reward_fn, self.metric_fn, self.dist, self.autocast = reward_fn, metric_fn, dist, autocast

    def collect(self, it: int, scfg: SamplingConfig) -> Rollout:
        """Sample rounds of N groups until every process's batch is complete (`refill_batch`), or R rounds."""
        cfg, world = self.config, self.dist.world
        n, total = cfg.prompts_per_iteration // world, cfg.prompts_per_iteration  # groups per process, N

        def sampled_index(q: int, i: int) -> int:  # local group i of process q -> row of the (R * N, G) rewards
            r, j = divmod(i, n)
            return r * total + j * world + q

        groups, scored, seconds = [], [], [0.0, 0.0]
        for r in range(cfg.sample_rounds):
            t0 = time.perf_counter()
            groups += self.sample(it, scfg, r)
            t1 = time.perf_counter()
            scored.append(self.score(groups[-n:]))
            seconds[0], seconds[1] = seconds[0] + t1 - t0, seconds[1] + time.perf_counter() - t1
            flat = ~dynamic_sampling_mask(torch.cat([s[0] for s in scored]))  # ((r + 1) * N,)
            filled = [refill_batch([bool(flat[sampled_index(q, i)]) for i in range((r + 1) * n)], n,
                                   cfg.refill_need(n)) for q in range(world)]  # per process: (picks, done)
            if all(done for _, done in filled):
                break
        picks = [p for p, _ in filled]
        order = torch.tensor([sampled_index(k % world, picks[k % world][k // world]) for k in range(total)])  # (N,)
        rewards = torch.cat([s[0] for s in scored])  # (R * N, G)
        components = {k: torch.cat([s[1][k] for s in scored]) for k in scored[0][1]}
        metric = torch.cat([s[2] for s in scored])[order] if scored[0][2] is not None else None
        return Rollout(groups=[groups[i] for i in picks[self.dist.rank]], rewards=rewards[order],
                       components={k: v[order] for k, v in components.items()}, metric=metric, flat=flat[order],
                       sampled=rewards, sampled_components=components, rounds=len(scored), seconds=tuple(seconds))

    def sample(self, it: int, scfg: SamplingConfig, round: int = 0) -> list[TrajectoryGroup]:
        """This process's groups (q::world of the round's N) with their SDE trajectories."""
        cfg = self.config
        idx, seeds = iteration_seeds(cfg.seed, it, len(self.pool), cfg.prompts_per_iteration, round)
        mine = range(self.dist.rank, cfg.prompts_per_iteration, self.dist.world)
        with self.autocast():
            return sample_groups(self.policy, [self.pool[idx[k]] for k in mine], scfg, [seeds[k] for k in mine])

    def score(self, groups: list[TrajectoryGroup]):
        """Rewards (N, G), components name -> (N, G) and the GFPO metric (N, G) or None, in global group order."""
        g = self.config.group
        images = torch.cat([grp.images for grp in groups])  # (n * G, 3, H, W)
        prompts = [grp.prompt for grp in groups for _ in range(g)]
        comps = {k: v.view(-1, g) for k, v in self.reward_fn.components(images, prompts).items()}  # (n, G)
        metric = self.metric_fn(images, prompts).view(-1, g) if self.metric_fn else None
        parts = self.dist.gather(({k: v.cpu() for k, v in comps.items()}, None if metric is None else metric.cpu()))
        world, n = self.dist.world, self.config.prompts_per_iteration

        def assemble(per_rank: list[torch.Tensor]) -> torch.Tensor:  # group k: row k // world of rank k % world
            return torch.stack([per_rank[k % world][k // world] for k in range(n)])  # (N, G)

        components = {k: assemble([p[0][k] for p in parts]) for k in comps}
        metric = assemble([p[1] for p in parts]) if metric is not None else None
        return self.reward_fn.combine(components), components, metric
