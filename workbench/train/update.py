"""The inner updates of an iteration: minibatches of whole trajectories, the objective, AdamW, over any number of
processes with the one-process gradient (docs/methods.md "Several processes").

One process shuffles the iteration's N G trajectories with a generator seeded by (seed, iteration, epoch) and takes
minibatches of `minibatch / S` of them in that order. Several processes draw the same permutation: minibatch b is
the same set of trajectories, and each process re-scores the members it sampled (the groups q::world, so a share
of a minibatch varies from process to process, and may be empty). The objective couples the rows of a minibatch
(chunk ratios, token means, batch-normalised step weights), so its gradient is split by the chain rule, not by rows:

    1. each process re-scores its rows: log_prob, kl (n_q, S)
    2. the values are gathered (a few floats per transition) and every process evaluates the objective on the
       whole minibatch, in the one-process order, and backpropagates it to those values: dloss/dlog_prob (M, S)
    3. each process backpropagates its rows' share into the weights, times `world`: DDP averages the processes'
       gradients, so the average of world x (each share) is the sum of the shares, the one-process gradient

Every backward of an optimizer step but the last runs under `no_sync` (DDP does not average), the last one
averages what each process accumulated; a process with no row in that minibatch runs a zero-weight pass so the
average can happen. Every process ends the step with the same gradient, clips it the same way and takes the same
AdamW step: the weights stay identical (tests/test_distributed.py).
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch

from workbench.core.errors import WorkbenchError
from workbench.flow.policy import Conditioning
from workbench.flow.sampler import transition
from workbench.flow.trajectory import SamplingConfig
from workbench.rl.objectives import PolicyInputs, transition_kl
from workbench.train.config import TrainConfig
from workbench.train.distributed import DistInfo
from workbench.train.microbatch import backward_in_micro_batches, backward_shared


def seed_of(*parts: int) -> int:
    return int(np.random.SeedSequence(list(parts)).generate_state(1)[0])


def diverged(it: int, lr: float, what: str) -> WorkbenchError:
    return WorkbenchError(f"iteration {it}: the updates at learning rate {lr:g} {what}; the run "
                          f"diverged: lower --lr (default {TrainConfig.lr:g})")


@dataclass
class Stored:
    """One iteration's stored transitions on this process: L = local groups x G trajectories, S trained steps."""

    states: torch.Tensor  # (L, T + 1, C, H, W)
    old_log_prob: torch.Tensor  # (L, S) log-probs at sampling time
    advantages: torch.Tensor  # (L,) or (L, S) per-step advantages
    rows: torch.Tensor  # (L,) bool, trajectories that train (dynamic sampling drops flat groups)
    cond: Conditioning  # L rows
    step_mask: torch.Tensor  # (L, S) bool, the steps each trajectory trains (chunk sampling)
    step_weights: torch.Tensor | None  # (S,) noise-aware weights
    steps: torch.Tensor  # (S,) trained step indices
    sigmas: torch.Tensor  # (T + 1,)
    config: SamplingConfig


@dataclass
class Everyone:
    """The iteration's trajectories of every process in global order (N G rows): who holds each, and what the
    objective needs of it (constants: a few numbers per transition)."""

    owner: torch.Tensor  # (N G,) process that sampled trajectory k
    local: torch.Tensor  # (N G,) its row on that process
    old_log_prob: torch.Tensor  # (N G, S)
    advantages: torch.Tensor  # (N G,) or (N G, S)
    mask: torch.Tensor  # (N G, S) bool, step_mask & rows


def global_index(row: int, rank: int, world: int, group: int) -> int:
    """The global index of this process's trajectory `row`: local group i is batch group i * world + rank."""
    i, j = divmod(row, group)
    return (i * world + rank) * group + j


def gather_everyone(stored: Stored, dist: DistInfo, group: int) -> Everyone:
    """Every process's trajectories of the iteration, in global order, on this process's device."""
    dev, n = stored.states.device, stored.states.shape[0]
    mine = (stored.old_log_prob.cpu(), stored.advantages.cpu(), (stored.step_mask & stored.rows[:, None]).cpu())
    parts = dist.gather(mine)
    total = sum(p[0].shape[0] for p in parts)
    owner, local = torch.empty(total, dtype=torch.long), torch.empty(total, dtype=torch.long)
    cols = [torch.empty((total, *t.shape[1:]), dtype=t.dtype) for t in mine]
    for rank, part in enumerate(parts):
        index = torch.tensor([global_index(r, rank, dist.world, group) for r in range(part[0].shape[0])])
        owner[index], local[index] = rank, torch.arange(part[0].shape[0])
        for col, value in zip(cols, part):
            col[index] = value
    assert n == int((owner == dist.rank).sum())
    return Everyone(owner.to(dev), local.to(dev), *(c.to(dev) for c in cols))


class Updater:
    """Runs the inner epochs of an iteration for a Trainer (its policy, reference, objective and optimizer)."""

    def __init__(self, trainer):
        self.t = trainer

    def run(self, it: int, stored: Stored) -> dict[str, float]:
        """Inner epochs over shuffled minibatches of whole trajectories; returns the averaged diagnostics."""
        t, cfg = self.t, self.t.config
        s, world = len(stored.steps), t.dist.world
        everyone = gather_everyone(stored, t.dist, cfg.group) if world > 1 else None
        n_rows = stored.states.shape[0] * world
        mask = everyone.mask if everyone else stored.step_mask & stored.rows[:, None]  # (N G, S)
        stats, norms, transitions = [], [], 0.0
        t.model.train()
        for epoch in range(cfg.inner_epochs):
            gen = torch.Generator().manual_seed(seed_of(cfg.seed, it, epoch, 0))
            batches = torch.randperm(n_rows, generator=gen).split(cfg.minibatch_size // s)  # global trajectory ids
            for start in range(0, len(batches), cfg.grad_accum):
                step = batches[start:start + cfg.grad_accum]
                active = [idx for idx in step if bool(mask[idx.to(mask.device)].any())]
                for b, idx in enumerate(active):
                    idx = idx.to(mask.device)
                    out = self.minibatch(stored, idx, everyone, sync=b == len(active) - 1)
                    stats.append(out.stats() | chunk_stats(out))
                    transitions += float(mask[idx].sum())
                if active:
                    norms.append(self._optimizer_step(it))
        t.model.eval()
        out = mean_stats(stats)
        out["policy/grad_norm"] = float(np.mean(norms)) if norms else float("nan")
        out["train/optimizer_steps"] = float(len(norms))
        out["train/transitions"] = transitions
        return out

    def _rescorer(self, stored: Stored, rows: torch.Tensor):
        """rescore(part): log_prob and kl (or None) of the transitions `part` of this process's trajectories
        `rows`, row m * S + s = trajectory m's s-th trained step (with gradient when gradients are enabled)."""
        t, m, s = self.t, len(rows), len(stored.steps)
        x = stored.states[rows][:, stored.steps].flatten(0, 1)  # (M * S, C, H, W)
        x_next = stored.states[rows][:, stored.steps + 1].flatten(0, 1)  # (M * S, C, H, W)
        step = stored.steps.repeat(m)  # (M * S,)
        cond = stored.cond.index(rows).repeat(s)  # (M * S) rows, row m * S + s is trajectory m

        def rescore(part: slice):
            c, args = cond.index(part), (stored.sigmas, step[part])
            with t.autocast():
                out = transition(t.train_policy, x[part], *args, c, stored.config, x_next=x_next[part])
                if t.reference is None:
                    return out.log_prob, None  # (n,)
                with torch.no_grad():
                    ref = transition(t.reference, x[part], *args, c, stored.config, x_next=x_next[part])
                return out.log_prob, transition_kl(out.mean, ref.mean, out.std, out.noise_scale, t.config.kl_form)
        return rescore

    def _objective(self, stored: Stored, log_prob: torch.Tensor, kl: torch.Tensor | None, old: torch.Tensor,
                   adv: torch.Tensor, mask: torch.Tensor):
        m, s = mask.shape
        inputs = PolicyInputs(log_prob.view(m, s), old, adv, step_mask=mask, step_weights=stored.step_weights,
                              kl=None if kl is None else kl.view(m, s))  # (M, S)
        return self.t.objective(inputs, self.t.settings)

    def minibatch(self, stored: Stored, idx: torch.Tensor, everyone: Everyone | None = None, sync: bool = True):
        """Backpropagate one minibatch's objective into the weights' gradients and return its output: global
        trajectory ids idx (M,); several processes share it (`everyone`), `sync` = the optimizer step's last."""
        t, cfg = self.t, self.t.config
        micro = cfg.micro_batch if isinstance(cfg.micro_batch, int) else None
        if everyone is None:  # one process: the trajectories are its rows
            mask = stored.step_mask[idx] & stored.rows[idx, None]  # (M, S)
            return backward_in_micro_batches(
                self._rescorer(stored, idx), lambda lp, kl: self._objective(
                    stored, lp, kl, stored.old_log_prob[idx], stored.advantages[idx], mask),
                len(idx) * len(stored.steps), micro, 1 / cfg.grad_accum)
        mine = everyone.owner[idx] == t.dist.rank  # (M,) this process's members, in minibatch order
        rows = everyone.local[idx[mine]]
        shares = [int((everyone.owner[idx] == q).sum()) * len(stored.steps) for q in range(t.dist.world)]

        def objective(lp: torch.Tensor, kl: torch.Tensor | None):  # lp, kl (M * S,) in minibatch order
            return self._objective(stored, lp, kl, everyone.old_log_prob[idx], everyone.advantages[idx],
                                   everyone.mask[idx])

        def context(synced: bool):
            return nullcontext() if synced else t.dist.no_sync(t.model)

        rows = rows if len(rows) else torch.zeros(1, dtype=torch.long, device=idx.device)  # idle passes' row
        order = owner_order(everyone.owner[idx], len(stored.steps), t.dist.world)
        return backward_shared(self._rescorer(stored, rows), objective, order, shares, t.dist, micro,
                               t.dist.world / cfg.grad_accum, context, sync)

    def _optimizer_step(self, it: int) -> float:
        """Clip the (averaged) gradient and take an AdamW step; NaN weights stop the run."""
        t = self.t
        params = list(t.params.values())
        norm = t.dist.clip_grad_norm_(t.model, params, t.config.max_grad_norm)
        t.optimizer.step()
        t.optimizer.zero_grad(set_to_none=True)
        if not bool(torch.stack([p.detach().isfinite().all() for p in params]).all()):
            raise diverged(it, t.config.lr, "made the trained weights NaN or inf")
        return float(norm)


def owner_order(owner: torch.Tensor, steps: int, world: int) -> torch.Tensor:
    """(M * S,) the position in the minibatch of each gathered value: the processes' shares concatenated in rank
    order (each share in minibatch order) -> the minibatch's own order (row m * S + s)."""
    rows = torch.cat([torch.nonzero(owner == q).flatten() for q in range(world)])  # (M,)
    return (rows[:, None] * steps + torch.arange(steps, device=owner.device)).flatten()


def chunk_stats(out) -> dict[str, float]:
    return ({f"chunk/ratio_mean_{j}": v for j, v in enumerate(out.chunk_ratio_mean)}
            | {f"chunk/ratio_std_{j}": v for j, v in enumerate(out.chunk_ratio_std)})


def mean_stats(parts: list[dict]) -> dict[str, float]:
    """Mean of each key over the dicts that have a finite value for it (NaN-aware)."""
    keys = sorted({k for p in parts for k in p})
    out = {}
    for k in keys:
        vals = [p[k] for p in parts if k in p and p[k] is not None and np.isfinite(p[k])]
        out[k] = float(np.mean(vals)) if vals else float("nan")
    return out
