"""Temporal dynamics of generation (GCPO arXiv 2510.21583; docs/methods.md "Temporal dynamics").

L1_rel(t) = ||x_t - x_{t-1}||_1 / ||x_t||_1 along a sampled trajectory: how much one step changes the
latent, relative to its size. GCPO finds the curve prompt-invariant and step-dependent and cuts chunks
along it; it also reports L2 and cosine variants that behave alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.core.errors import WorkbenchError
from workbench.flow.policy import FlowPolicy
from workbench.flow.sampler import sample_groups
from workbench.flow.trajectory import SamplingConfig, offset_seed

METRICS = ("l1", "l2", "cosine")


def relative_change(states: torch.Tensor, metric: str = "l1") -> torch.Tensor:
    """Per-step relative change of a trajectory batch: states (G, T + 1, ...) -> (G, T), detached.

    l1: ||x_t - x_next||_1 / ||x_t||_1; l2: the same with L2 norms; cosine: 1 - cos(x_t, x_next).
    """
    if metric not in METRICS:
        raise WorkbenchError(f"unknown dynamics metric '{metric}'; valid metrics: {', '.join(METRICS)}")
    x = states.detach().float().flatten(2)  # (G, T + 1, D)
    cur, nxt = x[:, :-1], x[:, 1:]  # (G, T, D) each
    if metric == "cosine":
        return 1 - torch.nn.functional.cosine_similarity(cur, nxt, dim=-1)  # (G, T)
    p = 1 if metric == "l1" else 2
    size = torch.linalg.vector_norm(cur, ord=p, dim=-1).clamp_min(1e-12)  # (G, T)
    return torch.linalg.vector_norm(cur - nxt, ord=p, dim=-1) / size


@dataclass
class DynamicsCurve:
    """A relative-change curve over many prompts: per-step mean and spread."""

    metric: str
    per_trajectory: torch.Tensor  # (N, T): one row per sampled trajectory
    sigmas: torch.Tensor  # (T + 1,)

    @property
    def mean(self) -> torch.Tensor:
        return self.per_trajectory.mean(0)  # (T,)

    @property
    def std(self) -> torch.Tensor:
        return self.per_trajectory.std(0, unbiased=False)  # (T,)

    @property
    def quantiles(self) -> torch.Tensor:
        """(2, T): 10th and 90th percentile per step."""
        return torch.quantile(self.per_trajectory, torch.tensor([0.1, 0.9]), dim=0)


def dynamics_curve(policy: FlowPolicy, prompts: list[str], config: SamplingConfig, metric: str = "l1",
                   batch: int = 16, progress=None) -> DynamicsCurve:
    """Sample `config.group` trajectories per prompt and gather their relative-change curves."""
    if not prompts:
        raise WorkbenchError("dynamics_curve needs at least one prompt")
    rows, sigmas = [], None
    for i in range(0, len(prompts), batch):
        groups = sample_groups(policy, prompts[i:i + batch], config,
                               seeds=[offset_seed(config.seed, j) for j in range(i, min(i + batch, len(prompts)))])
        rows += [relative_change(g.states, metric) for g in groups]
        sigmas = groups[0].sigmas
        if progress is not None:
            progress(min(i + batch, len(prompts)), len(prompts))
    return DynamicsCurve(metric, torch.cat(rows), sigmas)
