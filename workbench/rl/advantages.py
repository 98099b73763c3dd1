"""Group-relative advantage estimators (docs/methods.md, "Advantages").

Every estimator has one signature, `fn(rewards (N, G), settings: AdvantageSettings, metric (N, G) | None)
-> Advantages`, for N groups (prompts) of G samples; each reads the settings it uses and refuses the ones
it does not (so the trainer never branches on estimator names):

    GRPO / Flow-GRPO (arXiv 2505.05470)  A_i = (r_i - mean_G r) / (std_G r + eps), clipped to +-5
    Dr. GRPO (arXiv 2503.20783)          A_i = r_i - mean_G r
    GPG (arXiv 2504.02546)               A_i = alpha (r_i - mean_G r),  alpha = B / (B - M)
    GFPO (arXiv 2508.09726)              GRPO over the top-k samples of each group by a second metric

The std is the population std (unbiased=False, divide by G), as in flow_grpo's stat tracker
(`np.std`). Groups whose reward std is below `tol` are zero-variance: they carry no learning signal,
are reported in `zero_std` and get advantage 0; nothing is ever divided by a zero std.
DAPO's dynamic sampling (arXiv 2503.14476) is `dynamic_sampling_mask`; `refill_batch` says which
groups of several sampling rounds make up a batch when DAPO or GPG sample more to replace flat groups.

    adv = ADVANTAGES.get("grpo")(torch.tensor([[1.0, 0.0], [1.0, 1.0]]))
    adv.values  # tensor([[ 1.0000, -1.0000], [ 0.0000,  0.0000]]) (up to eps)
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from workbench.core.errors import WorkbenchError
from workbench.core.registry import Registry

ADVANTAGES = Registry("advantage estimator")

EPS = 1e-4  # Flow-GRPO's std offset
CLIP = 5.0  # Flow-GRPO and GCPO clip advantages to +-5
TOL = 1e-6  # reward std below this counts as zero variance


@dataclass
class AdvantageSettings:
    """Settings of the advantage estimators; each estimator uses a subset and refuses the others' non-defaults."""

    eps: float = EPS
    """Std offset in the denominator (Flow-GRPO 1e-4); grpo, gfpo."""
    clip: float | None = CLIP
    """Clip advantages to +-clip (Flow-GRPO, GCPO: 5); None = no clipping. All estimators (see docs/methods.md)."""
    tol: float = TOL
    """Reward std below which a group counts as zero-variance. All estimators."""
    global_std: bool = False
    """grpo: divide by the population std of the whole batch (N*G rewards), Flow-GRPO's `global_std`."""
    unbiased_std: bool = False
    """grpo: the sample std (divide by G - 1; torch's `std()`, GCPO) instead of the population std (np.std,
    Flow-GRPO)."""
    gpg_threshold: float = 0.5
    """gpg: needs_resample when fewer than this fraction of samples are in groups with variance (code: 0.5)."""
    gfpo_keep: int | None = None
    """gfpo: samples kept per group by the metric; None = G // 2 (paper: 8 of 16)."""

    def __post_init__(self):
        if self.tol < 0:
            raise WorkbenchError(f"tol must be >= 0, got {self.tol}")
        if self.clip is not None and not self.clip > 0:
            raise WorkbenchError(f"clip must be > 0 or None (no clipping), got {self.clip}")
        if not self.eps >= 0:
            raise WorkbenchError(f"eps must be >= 0, got {self.eps}")
        if not 0.0 <= self.gpg_threshold <= 1.0:
            raise WorkbenchError(f"gpg threshold is a fraction of valid samples and must be in [0, 1], "
                                 f"got {self.gpg_threshold}")

    def only(self, estimator: str, *used: str) -> AdvantageSettings:
        """Self, after checking that the settings `estimator` does not use are at their defaults."""
        unused = [f.name for f in fields(self) if f.name not in ("tol", "clip", *used)
                  and getattr(self, f.name) != f.default]
        if unused:
            raise WorkbenchError(f"the advantage estimator '{estimator}' does not use {', '.join(unused)}; "
                                 "leave it at its default or choose the estimator that does")
        return self


@dataclass
class Advantages:
    """Advantages of N groups of G samples and the group statistics behind them."""

    values: torch.Tensor  # (N, G) advantage per sample; 0 where rejected or in a zero-variance group
    group_mean: torch.Tensor  # (N,) mean reward of each group (over the kept samples for GFPO)
    group_std: torch.Tensor  # (N,) population std of each group's rewards (kept samples for GFPO)
    zero_std: torch.Tensor  # (N,) bool, groups whose reward std < tol
    kept: torch.Tensor  # (N, G) bool, samples that take part (all True except GFPO)
    clipped: torch.Tensor  # (N, G) bool, samples whose advantage was clipped to +-clip
    alpha: float = 1.0  # GPG's scale B / (B - M); 1.0 for the other estimators
    valid_fraction: float = 1.0  # (B - M) / B, share of samples outside zero-variance groups
    needs_resample: bool = False  # GPG: valid_fraction fell below its threshold

    def stats(self) -> dict[str, float]:
        """Namespaced metrics over the kept samples: `adv/mean`, `adv/std`, `adv/abs_max`, ..."""
        kept_values = self.values[self.kept]  # (number kept,)
        return {
            "adv/mean": kept_values.mean().item(),
            "adv/std": kept_values.std(unbiased=False).item(),
            "adv/abs_max": kept_values.abs().max().item(),
            "adv/zero_std_frac": self.zero_std.float().mean().item(),
            "adv/clip_frac": self.clipped[self.kept].float().mean().item(),
            "adv/alpha": self.alpha,
            "adv/valid_frac": self.valid_fraction,
        }


def _check_rewards(rewards: torch.Tensor) -> torch.Tensor:
    """Validate (N, G) rewards and return them as a float tensor."""
    if not isinstance(rewards, torch.Tensor):
        raise WorkbenchError(f"rewards must be a torch.Tensor of shape (N, G), got {type(rewards).__name__}")
    if rewards.dim() != 2:
        raise WorkbenchError(f"rewards must be 2-D (N groups, G samples), got shape {tuple(rewards.shape)}; "
                             "reshape them to (num_prompts, group_size)")
    if rewards.shape[0] < 1 or rewards.shape[1] < 2:
        raise WorkbenchError(f"rewards of shape {tuple(rewards.shape)} need at least 1 group of G >= 2 samples; "
                             "group-relative advantages compare samples of the same prompt")
    if not torch.isfinite(rewards).all():
        raise WorkbenchError("rewards contain NaN or inf; check the reward function's output")
    return rewards if rewards.is_floating_point() else rewards.float()


def _clip(values: torch.Tensor, clip: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Clip (N, G) values to +-clip; also return which were clipped."""
    if clip is None:
        return values, torch.zeros_like(values, dtype=torch.bool)
    return values.clamp(-clip, clip), values.abs() > clip


def _valid_fraction(zero_std: torch.Tensor) -> float:
    """(B - M) / B: every group has G samples, so this is the share of groups with variance."""
    return 1.0 - zero_std.float().mean().item()


def _centered(r: torch.Tensor, tol: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Group mean (N,), population std (N,), zero-variance mask (N,) and r - mean (N, G), 0 in flat groups."""
    mean = r.mean(dim=1)  # (N,)
    std = r.std(dim=1, unbiased=False)  # (N,)
    zero_std = std < tol  # (N,)
    centered = (r - mean[:, None]).masked_fill(zero_std[:, None], 0.0)  # (N, G)
    return mean, std, zero_std, centered


def grpo(rewards: torch.Tensor, settings: AdvantageSettings | None = None,
         metric: torch.Tensor | None = None) -> Advantages:
    """GRPO / Flow-GRPO: A = (r - mean_G) / (std + eps), clipped to +-clip; rewards (N, G).

    settings.global_std divides by the population std of the whole batch (N*G rewards) instead of each
    group's, as Flow-GRPO's `global_std` option; zero-variance groups still get 0.
    """
    s = (settings or AdvantageSettings()).only("grpo", "eps", "global_std", "unbiased_std")
    r = _check_rewards(rewards)
    mean, std, zero_std, centered = _centered(r, s.tol)
    if s.unbiased_std:
        std = r.std(dim=1, unbiased=True) if r.shape[1] > 1 else std  # (N,)
    scale = r.std(unbiased=s.unbiased_std).expand_as(std) if s.global_std else std  # (N,)
    denom = scale[:, None] + s.eps  # (N, 1); 0 only for a flat group (or batch) with eps 0
    raw = (centered / denom).masked_fill(zero_std[:, None] | (denom == 0), 0.0)  # (N, G); never 0 / 0
    values, clipped = _clip(raw, s.clip)  # (N, G)
    return Advantages(values=values, group_mean=mean, group_std=std, zero_std=zero_std,
                      kept=torch.ones_like(r, dtype=torch.bool), clipped=clipped,
                      valid_fraction=_valid_fraction(zero_std))


ADVANTAGES.add(grpo, "grpo")


def dr_grpo(rewards: torch.Tensor, settings: AdvantageSettings | None = None,
            metric: torch.Tensor | None = None) -> Advantages:
    """Dr. GRPO (arXiv 2503.20783): A = r - mean_G, no std normalisation; rewards (N, G), clipped to +-clip."""
    s = (settings or AdvantageSettings()).only("dr_grpo")
    r = _check_rewards(rewards)
    mean, std, zero_std, centered = _centered(r, s.tol)
    values, clipped = _clip(centered, s.clip)  # (N, G)
    return Advantages(values=values, group_mean=mean, group_std=std, zero_std=zero_std,
                      kept=torch.ones_like(r, dtype=torch.bool), clipped=clipped,
                      valid_fraction=_valid_fraction(zero_std))


ADVANTAGES.add(dr_grpo, "dr_grpo")


def gpg(rewards: torch.Tensor, settings: AdvantageSettings | None = None,
        metric: torch.Tensor | None = None) -> Advantages:
    """GPG (arXiv 2504.02546, AMAP-ML/GPG): A = alpha (r - mean_G), alpha = B / (B - M); rewards (N, G).

    B = N*G samples, M of them in zero-variance groups. alpha rescales the batch-mean gradient so that
    flat groups do not dilute it. needs_resample is set when (B - M) / B < settings.gpg_threshold (the
    code then resamples, up to 20 rounds). If every group is flat (M = B) the values are 0, alpha is
    reported as 1.0 (there is nothing to rescale) and needs_resample is True.
    """
    s = (settings or AdvantageSettings()).only("gpg", "gpg_threshold")
    r = _check_rewards(rewards)
    mean, std, zero_std, centered = _centered(r, s.tol)
    valid_fraction = _valid_fraction(zero_std)
    alpha = 1.0 / valid_fraction if valid_fraction > 0 else 1.0  # B / (B - M)
    values, clipped = _clip(alpha * centered, s.clip)  # (N, G)
    return Advantages(values=values, group_mean=mean, group_std=std, zero_std=zero_std,
                      kept=torch.ones_like(r, dtype=torch.bool), clipped=clipped, alpha=alpha,
                      valid_fraction=valid_fraction,
                      needs_resample=valid_fraction == 0 or valid_fraction < s.gpg_threshold)


ADVANTAGES.add(gpg, "gpg")


def gfpo_keep_mask(metric: torch.Tensor, keep: int) -> torch.Tensor:
    """(N, G) bool: the `keep` samples of each group with the highest metric, ties to the lower index.

    The sort is stable, so among equal metrics the earlier sample wins. To keep the shortest or
    cheapest samples (as the GFPO paper does with response length), pass the negated quantity.
    """
    order = torch.sort(metric, dim=1, descending=True, stable=True).indices  # (N, G)
    kept = torch.zeros_like(metric, dtype=torch.bool)
    return kept.scatter(1, order[:, :keep], True)  # (N, G)


def gfpo(rewards: torch.Tensor, settings: AdvantageSettings | None = None,
         metric: torch.Tensor | None = None) -> Advantages:
    """GFPO (arXiv 2508.09726): GRPO over the top-k samples of each group by `metric`; rewards (N, G).

    metric (N, G): the filtering score, higher is kept. k = settings.gfpo_keep in 1..G, default G // 2
    (paper: G=16, k=8). Mean and population std are taken over the kept set only; rejected samples get 0.
    """
    s = (settings or AdvantageSettings()).only("gfpo", "eps", "gfpo_keep")
    eps, clip, tol = s.eps, s.clip, s.tol
    r = _check_rewards(rewards)
    n, g = r.shape
    if metric is None:
        raise WorkbenchError("gfpo needs `metric`, an (N, G) score per sample used to keep the top-k; "
                             "pass e.g. metric=-lengths or a second reward")
    if not isinstance(metric, torch.Tensor) or metric.shape != r.shape or not torch.isfinite(metric).all():
        shape = tuple(metric.shape) if isinstance(metric, torch.Tensor) else type(metric).__name__
        raise WorkbenchError(f"gfpo metric must be a finite tensor of the rewards' shape {(n, g)}, got {shape}")
    keep = g // 2 if s.gfpo_keep is None else s.gfpo_keep
    if not isinstance(keep, int) or not 1 <= keep <= g:
        raise WorkbenchError(f"gfpo keep must be an integer in 1..G={g}, got {keep}")
    kept = gfpo_keep_mask(metric, keep)  # (N, G)
    mask = kept.to(r.dtype)
    mean = (r * mask).sum(dim=1) / keep  # (N,)
    std = (((r - mean[:, None]) ** 2 * mask).sum(dim=1) / keep).sqrt()  # (N,) population std of the kept set
    zero_std = std < tol  # (N,)
    flat_or_rejected = zero_std[:, None] | ~kept  # (N, G)
    raw = ((r - mean[:, None]) / (std[:, None] + eps)).masked_fill(flat_or_rejected, 0.0)  # (N, G)
    values, clipped = _clip(raw, clip)
    return Advantages(values=values, group_mean=mean, group_std=std, zero_std=zero_std, kept=kept,
                      clipped=clipped, valid_fraction=_valid_fraction(zero_std))


ADVANTAGES.add(gfpo, "gfpo")


def dynamic_sampling_mask(rewards: torch.Tensor, tol: float = TOL) -> torch.Tensor:
    """DAPO dynamic sampling (arXiv 2503.14476): (N,) bool, True for groups to keep (reward std >= tol).

    DAPO drops the zero-variance groups and samples more prompts until the batch is full; the caller
    does the resampling, this only says which groups carry signal.
    """
    r = _check_rewards(rewards)
    if tol < 0:
        raise WorkbenchError(f"tol must be >= 0, got {tol}")
    return r.std(dim=1, unbiased=False) >= tol  # (N,)


def refill_batch(flat: list[bool], n: int, need: int) -> tuple[list[int], bool]:
    """Which of the groups sampled so far form a batch of n, and whether it holds `need` groups with variance.

    flat: one flag per sampled group in sampling order (round 0's n groups first, then each further
    round's), True for zero reward variance. The batch takes every group with variance, earliest first, up
    to n, and fills the slots left with the earliest flat groups. Returns (sorted indices into `flat`,
    len n), and True once `need` groups with variance were found (the caller stops sampling then).
      DAPO dynamic sampling (arXiv 2503.14476): need = n, "sample more until the batch is full"; the flat
        groups left in an unfilled batch do not train.
      GPG (arXiv 2504.02546; its trainer keeps every valid group across rounds and uses flat groups only
        as filler): need = ceil(threshold * n), resample until the valid fraction reaches the threshold;
        flat groups in the batch count in alpha = B / (B - M).

        refill_batch([True, False, False, True], n=2, need=2)  # ([1, 2], True): slot 0 refilled by round 1
        refill_batch([False, True, True, True] + [False] * 4, n=4, need=2)  # ([0, 4, 5, 6], True): alpha 1
    """
    if not 1 <= need <= n <= len(flat):
        raise WorkbenchError(f"refill_batch needs 1 <= need ({need}) <= n ({n}) <= sampled groups ({len(flat)})")
    taken = [i for i, f in enumerate(flat) if not f][:n]
    fill = [i for i, f in enumerate(flat) if f][:n - len(taken)]
    return sorted(taken + fill), len(taken) >= need
