"""Policy objectives over per-step log-probs: step GRPO, Chunk-GRPO and relatives (docs/methods.md "Objectives").

Every objective has one signature, `fn(inputs: PolicyInputs, settings: ObjectiveSettings) -> ObjectiveOutput`,
and is registered in `OBJECTIVES` (verl's `register_policy_loss`). Shapes: B trajectories, T transitions,
K chunks. A "trained unit" is a step (step objectives) or a chunk with at least one trained step
(chunk objectives). The per-step log-ratio is l_{i,t} = log p_theta - log p_old.

    objective = OBJECTIVES.get("chunk_grpo")
    out = objective(PolicyInputs(log_prob, old_log_prob, advantages), ObjectiveSettings(chunks=[2, 3, 4, 7]))
    out.loss.backward()

Each registration carries an `ObjectiveInfo` (unit, chunks, paired advantage, formula, preset, menu order);
the rest of the workbench reads it from `OBJECTIVES.info(name)`. Step objectives also take per-step
advantages (B, T): PPO's GAE over a learned critic and the dense look-ahead credit (`step_advantages.py`).

Also here: the KL term to the reference (Flow-GRPO's closed form), TempFlow-GRPO's noise-aware step weights
and MixGRPO's sliding SDE window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from workbench.core.errors import WorkbenchError
from workbench.core.registry import Registry
from workbench.rl.chunking import chunk_ids, chunk_sum
from workbench.rl.objective_info import PER_STEP_FORMULA, STEP_FORMULA, Formula, ObjectiveInfo

OBJECTIVES = Registry("objective")


@dataclass
class PolicyInputs:
    """What an objective needs from one batch of trajectories."""

    log_prob: torch.Tensor  # (B, T) current policy per-step log-probs, requires grad
    old_log_prob: torch.Tensor  # (B, T) log-probs at sampling time (treated as constants)
    advantages: torch.Tensor  # (B,) one advantage per trajectory, or (B, T) one per step (constants)
    step_mask: torch.Tensor | None = None  # (B, T) bool, steps that are trained; None = all
    step_weights: torch.Tensor | None = None  # (T,) non-negative per-step weights; None = all 1
    kl: torch.Tensor | None = None  # (B, T) per-step KL to the reference policy, already computed

    def __post_init__(self):
        if self.log_prob.dim() != 2:
            raise WorkbenchError(f"log_prob must be (B, T), got shape {tuple(self.log_prob.shape)}")
        b, t = self.log_prob.shape
        _check_shape("old_log_prob", self.old_log_prob, (b, t))
        _check_shape("advantages", self.advantages, (b,) if self.advantages.dim() == 1 else (b, t))
        _check_shape("step_mask", self.step_mask, (b, t))
        _check_shape("step_weights", self.step_weights, (t,))
        _check_shape("kl", self.kl, (b, t))
        if self.step_mask is not None and self.step_mask.dtype != torch.bool:
            raise WorkbenchError(f"step_mask must be a bool tensor, got {self.step_mask.dtype}; use mask.bool()")
        if self.step_weights is not None and bool((self.step_weights < 0).any()):
            raise WorkbenchError("step_weights must be non-negative; pass e.g. noise_aware_weights(stds)")

    def step_advantages(self) -> torch.Tensor:
        """(B, T) detached advantages: the per-step ones, or each trajectory's copied to its steps."""
        adv = self.advantages.detach().to(self.log_prob)
        return adv if adv.dim() == 2 else adv.unsqueeze(1).expand_as(self.log_prob)

    def trained(self) -> torch.Tensor:
        """(B, T) bool mask of trained steps; raises if it trains nothing."""
        mask = self.step_mask if self.step_mask is not None else torch.ones_like(self.log_prob, dtype=torch.bool)
        if not bool(mask.any()):
            raise WorkbenchError("step_mask trains no step; set at least one entry to True")
        return mask


def _check_shape(name: str, x: torch.Tensor | None, shape: tuple[int, ...]) -> None:
    if x is not None and tuple(x.shape) != shape:
        raise WorkbenchError(f"{name} must have shape {shape} to match log_prob, got {tuple(x.shape)}")


@dataclass
class ObjectiveSettings:
    """Hyper-parameters shared by all objectives."""

    clip_low: float = 1e-4
    """Lower clip range eps: ratios below 1 - eps are clipped (Flow-GRPO 1e-4; GCPO 5e-5; GSPO 3e-4)."""
    clip_high: float | None = None
    """Upper clip range: ratios above 1 + clip_high are clipped; None = clip_low (DAPO clip-higher; GSPO 4e-4)."""
    chunks: list[int] | None = None
    """Chunk sizes summing to T, needed by chunk_grpo (GCPO [2, 3, 4, 7] of 16 transitions)."""
    kl_beta: float = 0.0
    """Weight of the KL-to-reference term (Flow-GRPO 0.01-0.04; 0 in GCPO and for FLUX)."""

    def __post_init__(self):
        if self.clip_low < 0 or self.clip_low >= 1:
            raise WorkbenchError(f"clip_low must be in [0, 1), got {self.clip_low}; Flow-GRPO uses 1e-4")
        if self.clip_high is not None and self.clip_high < 0:
            raise WorkbenchError(f"clip_high must be >= 0 or None (= clip_low), got {self.clip_high}")
        if self.chunks is not None:
            if len(self.chunks) == 0 or any(int(c) != c or c <= 0 for c in self.chunks):
                raise WorkbenchError(f"chunks must be a non-empty list of positive integers, got {self.chunks}")
        if self.kl_beta < 0:
            raise WorkbenchError(f"kl_beta must be >= 0, got {self.kl_beta}; use 0 to disable the KL term")

    @property
    def eps_high(self) -> float:
        """The effective upper clip range."""
        return self.clip_low if self.clip_high is None else self.clip_high


@dataclass
class ObjectiveOutput:
    """Loss with grad plus detached diagnostics.

    Ratio statistics are over trained units (steps or chunks); ratio_std is the population std.
    chunk_ratio_mean / chunk_ratio_std have one entry per chunk for chunk objectives and one per step
    for step objectives (each step is its own chunk): mean / std over the trajectories that train it,
    NaN where no trajectory does.
    """

    loss: torch.Tensor  # scalar, policy loss + kl_beta * kl_loss
    policy_loss: float
    kl_loss: float  # mean KL over trained steps, unscaled by kl_beta (0 when inputs.kl is None)
    clip_frac: float
    approx_kl: float  # mean of (ratio - 1) - log ratio over trained units (k3)
    ratio_mean: float
    ratio_std: float
    chunk_ratio_mean: list[float] = field(default_factory=list)
    chunk_ratio_std: list[float] = field(default_factory=list)
    step_ratio: torch.Tensor | None = None  # (B, T) detached: the ratio of the unit each step is in; 1 if untrained
    step_clipped: torch.Tensor | None = None  # (B, T) bool: the step's unit takes the clipped branch (no gradient)

    def stats(self) -> dict[str, float]:
        """Namespaced metrics; chunk/* are means over the chunks some trajectory trains."""
        return {
            "loss/policy": self.policy_loss,
            "loss/kl": self.kl_loss,
            "loss/total": float(self.loss.detach()),
            "policy/clip_frac": self.clip_frac,
            "policy/approx_kl": self.approx_kl,
            "policy/ratio_mean": self.ratio_mean,
            "policy/ratio_std": self.ratio_std,
            "chunk/ratio_mean": _finite_mean(self.chunk_ratio_mean),
            "chunk/ratio_std": _finite_mean(self.chunk_ratio_std),
        }


def _finite_mean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else 0.0


# ---------------------------------------------------------------- shared pieces

def clipped_surrogate(ratio: torch.Tensor, adv: torch.Tensor, eps_low: float, eps_high: float
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO loss -min(r A, clip(r, 1 - eps_low, 1 + eps_high) A) and where clipping is active.

    ratio, adv: same shape (broadcast A per unit). Returns (loss, clipped), both of that shape; clipped
    marks the units whose gradient is zero because the clipped branch is taken.
    """
    unclipped = ratio * adv
    clipped_value = ratio.clamp(1 - eps_low, 1 + eps_high) * adv
    loss = -torch.minimum(unclipped, clipped_value)
    clipped = ((adv > 0) & (ratio > 1 + eps_high)) | ((adv < 0) & (ratio < 1 - eps_low))
    return loss, clipped


def _step_weights(inputs: PolicyInputs, mask: torch.Tensor) -> torch.Tensor:
    """(B, T) weights, normalised to mean 1 over the trained steps of the batch (TempFlow-GRPO)."""
    if inputs.step_weights is None:
        return torch.ones_like(inputs.log_prob)
    w = inputs.step_weights.to(inputs.log_prob).expand_as(inputs.log_prob)  # (B, T)
    total = w[mask].sum()
    if float(total) <= 0:
        raise WorkbenchError("step_weights are zero on every trained step; train steps with non-zero weight")
    return w * (mask.sum() / total)


def _log_ratio(inputs: PolicyInputs, mask: torch.Tensor) -> torch.Tensor:
    """(B, T) l = log p_theta - log p_old on trained steps, 0 elsewhere (no gradient leaks from masked steps)."""
    diff = inputs.log_prob - inputs.old_log_prob.detach()
    return torch.where(mask, diff, torch.zeros_like(diff))


def _mean_over_units(values: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Mean over valid units per trajectory, then over trajectories with a valid unit: (B, U) -> ()."""
    count = valid.sum(dim=1)  # (B,)
    per_traj = torch.where(valid, values, torch.zeros_like(values)).sum(dim=1) / count.clamp_min(1)  # (B,)
    has = count > 0
    return per_traj[has].mean()


def _unit_stats(log_ratio: torch.Tensor, valid: torch.Tensor) -> dict:
    """Ratio diagnostics of (B, U) log-ratios over the valid units, all detached."""
    lr = log_ratio.detach()[valid]  # (N,)
    r = lr.exp()
    ratio = torch.where(valid, log_ratio.detach().exp(), torch.zeros_like(log_ratio))  # (B, U)
    count = valid.sum(dim=0).to(ratio)  # (U,)
    mean_u = ratio.sum(dim=0) / count  # (U,) NaN where no trajectory trains the unit
    var_u = torch.where(valid, (ratio - mean_u) ** 2, torch.zeros_like(ratio)).sum(dim=0) / count
    return {
        "approx_kl": float(((r - 1) - lr).mean()),
        "ratio_mean": float(r.mean()),
        "ratio_std": float(r.std(unbiased=False)),
        "chunk_ratio_mean": mean_u.tolist(),
        "chunk_ratio_std": var_u.sqrt().tolist(),
    }


def _finish(policy_loss: torch.Tensor, inputs: PolicyInputs, settings: ObjectiveSettings, mask: torch.Tensor,
            log_ratio: torch.Tensor, valid: torch.Tensor, clipped: torch.Tensor,
            chunks: list[int] | None = None) -> ObjectiveOutput:
    """Add the optional KL term (mean over trained steps) and collect the diagnostics.

    log_ratio, valid, clipped: (B, U) per unit; chunks: the sizes of the U units over the T steps
    (None: every step is its own unit). They are also broadcast back to steps (step_ratio, step_clipped).
    """
    if settings.kl_beta > 0 and inputs.kl is None:
        raise WorkbenchError("kl_beta > 0 needs inputs.kl (per-step KL to the reference); pass it or set kl_beta=0")
    kl = inputs.kl[mask].mean() if inputs.kl is not None else torch.zeros((), device=policy_loss.device)
    loss = policy_loss + settings.kl_beta * kl if settings.kl_beta > 0 else policy_loss
    return ObjectiveOutput(
        loss=loss, policy_loss=float(policy_loss.detach()), kl_loss=float(kl.detach()),
        clip_frac=float(clipped[valid].float().mean()), **_unit_stats(log_ratio, valid),
        **_per_step(log_ratio, clipped, mask, chunks),
    )


def _per_step(log_ratio: torch.Tensor, clipped: torch.Tensor, mask: torch.Tensor, chunks: list[int] | None
              ) -> dict[str, torch.Tensor]:
    """Unit ratios and clip flags (B, U) broadcast to the steps (B, T) of each unit; untrained steps: 1, False."""
    unit = chunk_ids(chunks).to(mask.device) if chunks is not None else torch.arange(mask.shape[1], device=mask.device)
    ratio = log_ratio.detach().exp()[:, unit]  # (B, T)
    return {"step_ratio": torch.where(mask, ratio, torch.ones_like(ratio)), "step_clipped": clipped[:, unit] & mask}


# ---------------------------------------------------------------- step objectives

def _step_objective(inputs: PolicyInputs, settings: ObjectiveSettings, reduce: str) -> ObjectiveOutput:
    """Per-step clipped surrogate rho_{i,t} = exp(l_{i,t}), weighted by the step weights.

    reduce: "trajectory" (mean over trained steps of each trajectory, then over trajectories),
    "token" (mean over all trained steps of the batch, DAPO) or "constant" (sum over steps / T,
    then mean over the trajectories with a trained step, Dr. GRPO).
    """
    mask = inputs.trained()  # (B, T)
    l = _log_ratio(inputs, mask)  # (B, T)
    adv = inputs.step_advantages()  # (B, T)
    per_step, clipped = clipped_surrogate(l.exp(), adv, settings.clip_low, settings.eps_high)
    per_step = torch.where(mask, per_step * _step_weights(inputs, mask), torch.zeros_like(per_step))
    if reduce == "trajectory":
        policy_loss = _mean_over_units(per_step, mask)
    elif reduce == "token":
        policy_loss = per_step.sum() / mask.sum()
    elif reduce == "constant":  # Dr. GRPO: a constant normaliser T, then the mean over the trajectories that train
        # (rows left out by dynamic sampling are not in the batch, as in the other objectives; docs/methods.md)
        policy_loss = (per_step.sum(dim=1) / l.shape[1])[mask.any(dim=1)].mean()
    else:
        raise ValueError(f"unknown reduce {reduce!r}")  # pragma: no mutate (a programming error's message)
    return _finish(policy_loss, inputs, settings, mask, l, mask, clipped)


def step_grpo(inputs: PolicyInputs, settings: ObjectiveSettings) -> ObjectiveOutput:
    """Flow-GRPO / DanceGRPO (arXiv 2505.05470): per-step clipped ratio, mean over steps then trajectories."""
    return _step_objective(inputs, settings, "trajectory")


OBJECTIVES.add(step_grpo, "step_grpo",
               info=ObjectiveInfo(formula=STEP_FORMULA, order=1, label="Flow-GRPO per-step ratio"))


def gfpo(inputs: PolicyInputs, settings: ObjectiveSettings) -> ObjectiveOutput:
    """GFPO (arXiv 2508.09726): the step GRPO surrogate; its filtering lives in the advantage estimator."""
    return _step_objective(inputs, settings, "trajectory")


OBJECTIVES.add(gfpo, "gfpo", info=ObjectiveInfo(
    advantage="gfpo", formula=STEP_FORMULA, order=7, label="GRPO over a filtered group",
    companions=lambda c: {"gfpo_metric": c.gfpo_metric or "sharpness"},  # the paper keeps the shortest
    preset={}))


def dapo(inputs: PolicyInputs, settings: ObjectiveSettings) -> ObjectiveOutput:
    """DAPO (arXiv 2503.14476): clip-higher (clip_low, clip_high), token-level mean over all trained steps."""
    return _step_objective(inputs, settings, "token")


OBJECTIVES.add(dapo, "dapo", info=ObjectiveInfo(
    formula=Formula(r"\rho_{i,t}", r"-\frac{A_i\,\rho_{i,t}}{N}", ("N",)), order=5,
    label="token-level mean, clip-higher",
    companions=lambda c: {"dynamic_sampling": True,  # refill groups with zero reward variance
                          "clip_high": c.clip_low * 0.28 / 0.2},  # DAPO's 0.2 / 0.28 clip asymmetry
    preset={}))


def dr_grpo(inputs: PolicyInputs, settings: ObjectiveSettings) -> ObjectiveOutput:
    """Dr. GRPO (arXiv 2503.20783): surrogate summed over steps / T (a constant), mean over the batch.

    The std-free advantage r_i - mean_G r comes from the advantage estimator, not from here.
    """
    return _step_objective(inputs, settings, "constant")


OBJECTIVES.add(dr_grpo, "dr_grpo", info=ObjectiveInfo(
    advantage="dr_grpo", formula=Formula(r"\rho_{i,t}", r"-\frac{A_i\,\rho_{i,t}}{B\,T}", ("B", "T")), order=8,
    label="std-free advantages, constant normaliser", preset={}))


def gpg(inputs: PolicyInputs, settings: ObjectiveSettings) -> ObjectiveOutput:
    """GPG (arXiv 2504.02546): no ratio, loss = -log p_theta * A_i, mean over trained steps then trajectories.

    Meant for one update per rollout; clip_frac is 0, the ratio statistics are still reported.
    """
    mask = inputs.trained()  # (B, T)
    adv = inputs.step_advantages()  # (B, T)
    per_step = -inputs.log_prob * adv * _step_weights(inputs, mask)  # (B, T)
    per_step = torch.where(mask, per_step, torch.zeros_like(per_step))
    policy_loss = _mean_over_units(per_step, mask)
    return _finish(policy_loss, inputs, settings, mask, _log_ratio(inputs, mask), mask, torch.zeros_like(mask))


OBJECTIVES.add(gpg, "gpg", info=ObjectiveInfo(
    advantage="gpg", formula=Formula(None, r"-\frac{A_i}{B\,T_i}", ("B", "T_i")), order=6, label="no ratio",
    companions=lambda c: {"minibatch": 0},  # one update per rollout: all of an iteration's transitions
    preset={}))


# ---------------------------------------------------------------- chunk objectives

def chunk_objective(inputs: PolicyInputs, settings: ObjectiveSettings, chunks: list[int]) -> ObjectiveOutput:
    """Chunk-level clipped surrogate (GCPO, arXiv 2510.21583).

    r_{i,j} = exp(mean over the trained steps t of chunk j of w_t l_{i,t}), clipped like PPO, mean over
    chunks with a trained step, then over trajectories. With step weights (normalised to mean 1 over
    trained steps) each step's log-ratio is weighted inside the chunk mean, so the gradient of step t
    is scaled by w_t; chunk size 1 then matches weighted step GRPO on-policy (exactly only unweighted).
    """
    t = inputs.log_prob.shape[1]
    if sum(chunks) != t:
        raise WorkbenchError(f"chunk sizes {chunks} sum to {sum(chunks)} but there are T={t} steps; "
                             f"make them sum to {t}")
    if inputs.advantages.dim() != 1:
        raise WorkbenchError("chunk and sequence objectives take one advantage per trajectory (B,); per-step "
                             "advantages (B, T) need a step objective (step_grpo, ppo, dense_grpo)")
    mask = inputs.trained()  # (B, T)
    l = _log_ratio(inputs, mask) * _step_weights(inputs, mask)  # (B, T) w_t l_{i,t}
    count = chunk_sum(mask.to(l), chunks)  # (B, K) trained steps per chunk
    valid = count > 0  # (B, K)
    chunk_l = chunk_sum(l, chunks) / count.clamp_min(1)  # (B, K) mean log-ratio over trained steps
    adv = inputs.advantages.detach().to(l).unsqueeze(1).expand_as(chunk_l)  # (B, K)
    per_chunk, clipped = clipped_surrogate(chunk_l.exp(), adv, settings.clip_low, settings.eps_high)
    policy_loss = _mean_over_units(per_chunk, valid)
    return _finish(policy_loss, inputs, settings, mask, chunk_l, valid, clipped, chunks)


def chunk_grpo(inputs: PolicyInputs, settings: ObjectiveSettings) -> ObjectiveOutput:
    """Chunk-GRPO / GCPO (arXiv 2510.21583): geometric-mean ratio per chunk of settings.chunks."""
    if settings.chunks is None:
        raise WorkbenchError("chunk_grpo needs settings.chunks, chunk sizes summing to T (GCPO: [2, 3, 4, 7])")
    return chunk_objective(inputs, settings, settings.chunks)


OBJECTIVES.add(chunk_grpo, "chunk_grpo", info=ObjectiveInfo(
    unit="chunk", needs_chunks=True, order=0, label="GCPO chunk ratio",
    formula=Formula(r"r_{i,c}", r"-\frac{A_i\,r_{i,c}}{B\,K_i\,|c|}", ("B", "K_i", "|c|"))))


def gspo(inputs: PolicyInputs, settings: ObjectiveSettings) -> ObjectiveOutput:
    """GSPO (arXiv 2507.18071): one sequence-level ratio, i.e. chunk_grpo with the single chunk [T]."""
    return chunk_objective(inputs, settings, [inputs.log_prob.shape[1]])


OBJECTIVES.add(gspo, "gspo", info=ObjectiveInfo(
    unit="sequence", order=2, label="one sequence ratio",
    formula=Formula(r"s_i", r"-\frac{A_i\,s_i}{B\,T_i}", ("B", "T_i")),
    preset={"clip_low": 3e-4, "clip_high": 4e-4}))


# ---------------------------------------------------------------- per-step advantages

def ppo(inputs: PolicyInputs, settings: ObjectiveSettings) -> ObjectiveOutput:
    """PPO (arXiv 1707.06347) on the denoising MDP (DPOK, arXiv 2305.16381): the clipped surrogate per step
    with A_{i,t} from GAE over a learned critic V_phi(x_t, t, prompt) (`step_advantages.gae`, `critic.py`)."""
    return _step_objective(inputs, settings, "trajectory")  # (B,) advantages: step_grpo


OBJECTIVES.add(ppo, "ppo", info=ObjectiveInfo(
    step_credit="critic", formula=PER_STEP_FORMULA, order=3, label="PPO: learned critic, GAE per step",
    preset={}))


def dense_grpo(inputs: PolicyInputs, settings: ObjectiveSettings) -> ObjectiveOutput:
    """Dense look-ahead GRPO (TP-GRPO arXiv 2602.06422; Stepwise-Flow-GRPO arXiv 2603.28718): the clipped
    surrogate per step with A_{i,t} = the group-normalised gain d_t = R_{t+1} - R_t of a look-ahead reward
    (`step_advantages.lookahead_advantages`)."""
    return _step_objective(inputs, settings, "trajectory")  # (B,) advantages: step_grpo


OBJECTIVES.add(dense_grpo, "dense_grpo", info=ObjectiveInfo(
    step_credit="lookahead", formula=PER_STEP_FORMULA, order=4, label="TP-GRPO look-ahead gains per step",
    preset={}))


# ---------------------------------------------------------------- KL, weights, windows

def gaussian_kl(mean: torch.Tensor, ref_mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Closed-form KL between N(mean, std^2) and N(ref_mean, std^2), mean over elements (Flow-GRPO).

    mean, ref_mean: (B, C, H, W); std: (B,). Returns (B,) = mean ||mean - ref_mean||^2 / (2 std^2).
    """
    sq = (mean.float() - ref_mean.float()).pow(2).flatten(1).mean(dim=1)  # (B,)
    return sq / (2 * std.float() ** 2)


KL_FORMS = ("flow_grpo", "exact")


def transition_kl(mean: torch.Tensor, ref_mean: torch.Tensor, std: torch.Tensor, noise_scale: torch.Tensor,
                  form: str = "flow_grpo") -> torch.Tensor:
    """Per-step KL term to the reference policy, (B,): mean over elements of ||mean - ref_mean||^2 / (2 s^2).

    The policy and the reference share the step's std, so only their means differ (Flow-GRPO, docs/methods.md
    "KL to the reference"). The two forms differ in s:
      "exact":     s = std = sigma_t sqrt(-dt), the exact KL between the two Gaussians of the transition
                   (what the Flow-GRPO paper, arXiv 2505.05470, writes).
      "flow_grpo": s = noise_scale = sigma_t, without sqrt(-dt), as in Flow-GRPO's released training code
                   (scripts/train_sd3.py divides by 2 std_dev_t^2); it is the exact KL times -dt, so 3.7-112x
                   smaller on a 10-step SD3 schedule, and its betas (0.01-0.04) are tuned for it. The default;
                   switching to "exact" at the same beta makes the penalty far stronger, not weaker.
    mean, ref_mean: (B, C, H, W); std, noise_scale: (B,) (`StepOutput.std`, `StepOutput.noise_scale`).
    """
    if form not in KL_FORMS:
        raise WorkbenchError(f"unknown KL form '{form}'; valid forms: {', '.join(KL_FORMS)}")
    return gaussian_kl(mean, ref_mean, noise_scale if form == "flow_grpo" else std)


def noise_aware_weights(stds: torch.Tensor) -> torch.Tensor:
    """TempFlow-GRPO (arXiv 2508.04324) step weights proportional to the step std sigma_t sqrt(-dt).

    stds: (T,) non-negative. Returns (T,) with mean 1 over the steps with std > 0; zero-std (ODE) steps get 0.
    """
    if bool((stds < 0).any()):
        raise WorkbenchError("step stds must be non-negative; pass sigma_t * sqrt(-dt) per step")
    noisy = stds > 0  # (T,)
    if not bool(noisy.any()):
        raise WorkbenchError("every step std is 0 (pure ODE); noise-aware weights need some SDE steps")
    return stds.float() / stds.float()[noisy].mean()

