"""What each objective does to each step: gradient weights on live numbers (docs/methods.md
"Gradient weights").

For a loss L over the per-step log-probs of a group, the effective weight of step t of trajectory i is

    w_{i,t} = dL / d log p_theta(x_{t+1}^i | x_t^i)

the coefficient of grad log p_t in the update (the loss is minimised, so w < 0 raises log p_t). `explain`
computes it by autograd through the REGISTERED objective functions (nothing is re-implemented here), and
collects what each objective does at every (i, t): the ratio it uses there (the step ratio, its chunk's
or its sequence's), whether clipping switches the step off, the advantage it uses and the step's share
of the push. At ratio 1 Chunk-GRPO gives w = -A_i / (B K |c|), so with chunks [2, 3, 4, 7] a step in the
first chunk is pushed 3.5x as hard as a step in the last, while step GRPO pushes every step by A_i / (B T).

To see clipping, the policy has to move away from the one that sampled: `moved_log_probs` runs a few
AdamW updates of an objective on a copy of the transformer (as the trainer's inner epochs do) and
re-scores the group.

    old = group.log_probs  # (G, T)
    adv = paired_advantages(rewards, ["step_grpo", "chunk_grpo"])
    new = moved_log_probs(policy, group, adv["step_grpo"])  # 3 AdamW updates of step GRPO on a copy
    ex = explain(new, old, adv, ObjectiveSettings(chunks=[2, 3, 4, 7]), ["step_grpo", "chunk_grpo"])
    ex.weight[ex.index("chunk_grpo")]  # (G, T)
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from workbench.core.errors import WorkbenchError
from workbench.flow.policy import FlowPolicy
from workbench.flow.trajectory import TrajectoryGroup
from workbench.rl.advantages import ADVANTAGES
from workbench.rl.objectives import OBJECTIVES, ObjectiveSettings, PolicyInputs

# Defaults of the Objectives view, from experiments/explain_defaults.py on the shipped embedded model (G=8, T=16):
# 3 updates at the trainer's lr 3e-5 with the library's clip 1e-4 clip 17 % of step units, 12 % of
# Chunk-GRPO [2,3,4,7] units and 50 % of GSPO's sequences: some units of every objective, not all.
INNER_UPDATES = 3  # inner AdamW updates that move the policy away from the sampling policy
INNER_LR = 3e-5  # their learning rate (TrainConfig's default lr)
CLIP = 1e-4  # clip range eps of the explained objectives (ObjectiveSettings' default, Flow-GRPO's)


def paired_estimator(objective: str) -> str:
    """The advantage estimator `objective` is trained with: its registration's (`ObjectiveInfo.advantage`), "grpo" for
    one registered without an ObjectiveInfo."""
    info = OBJECTIVES.info(objective)
    return info.advantage if info is not None else "grpo"


def paired_advantages(rewards: torch.Tensor, objectives: Sequence[str], metric: torch.Tensor | None = None
                      ) -> dict[str, torch.Tensor]:
    """{objective: (G,) advantages} of one group's rewards (G,), each from its paired estimator.

    metric (G,): GFPO's filtering score (higher is kept), needed only when "gfpo" is among the objectives.
    """
    out, cache = {}, {}
    for name in objectives:
        estimator = paired_estimator(name)
        if estimator not in cache:
            if estimator == "gfpo" and metric is None:
                raise WorkbenchError("gfpo filters the group by a second score: pass metric (G,), e.g. the "
                                     "sharpness reward its preset uses, or leave gfpo out of the objectives")
            options = {"metric": metric[None]} if estimator == "gfpo" else {}
            cache[estimator] = ADVANTAGES.get(estimator)(rewards.float()[None], **options).values[0]  # (G,)
        out[name] = cache[estimator]
    return out


@dataclass
class Explanation:
    """What O objectives do to the G x T steps of one group under one pair of policies.

    share_{o,i,t} = |w_{o,i,t}| / sum_{i,t} |w_{o,i,t}|: the fraction of objective o's total gradient
    weight on the group that lands on step (i, t) (all 0 when nothing is pushed, e.g. every unit clipped
    or every A = 0). It says where the update goes, not how large it is; compare sizes with `weight`.
    """

    names: list[str]  # O objectives, in the order asked for
    log_ratio: torch.Tensor  # (G, T) l = log p_theta - log p_old; 0 on untrained steps
    ratio: torch.Tensor  # (O, G, T) the ratio objective o uses at (i, t): step, chunk or sequence ratio (GPG: the
    # step ratio, which it does not use; NaN for an objective that reports no step_ratio)
    clipped: torch.Tensor  # (O, G, T) bool, the step's unit takes the clipped branch (no gradient)
    advantage: torch.Tensor  # (O, G) the advantage objective o uses for trajectory i (per-step ones: their mean)
    step_advantage: torch.Tensor  # (O, G, T) the advantage at (i, t): A_i copied to the steps, or A_{i,t}
    weight: torch.Tensor  # (O, G, T) w = dL / d log p_t of the objective's policy loss
    share: torch.Tensor  # (O, G, T) |w| normalised to sum 1 per objective (see the class doc)
    loss: torch.Tensor  # (O,) policy loss of each objective
    step_mask: torch.Tensor  # (G, T) bool, the trained steps
    settings: ObjectiveSettings  # clip range and chunks used

    def index(self, name: str) -> int:
        """Position of objective `name` in `names`."""
        if name not in self.names:
            raise WorkbenchError(f"objective '{name}' was not explained; explained: {', '.join(self.names)}")
        return self.names.index(name)

    def correlation(self, credit: torch.Tensor) -> torch.Tensor:
        """(O,) Pearson correlation over the trained cells between each push -w (G, T) and `credit` (G, T).

        Positive when an objective raises the log-prob of steps with positive credit. NaN where either map
        is constant (e.g. every unit clipped), as a correlation is undefined there.
        """
        cells = self.step_mask  # (G, T)
        push = -self.weight[:, cells].double()  # (O, N)
        c = credit.to(push)[cells]  # (N,)
        push, c = push - push.mean(1, keepdim=True), c - c.mean()
        denom = push.norm(dim=1) * c.norm()  # (O,)
        return torch.where(denom > 0, (push * c).sum(1) / denom.clamp_min(1e-300), torch.nan).float()


def explain(log_prob: torch.Tensor, old_log_prob: torch.Tensor,
            advantages: torch.Tensor | Mapping[str, torch.Tensor], settings: ObjectiveSettings,
            objectives: Sequence[str] | None = None, step_mask: torch.Tensor | None = None) -> Explanation:
    """Per-step weights, ratios, clip flags and shares of every objective for one group.

    log_prob, old_log_prob: (G, T) per-step log-probs under the current and the sampling policy;
    advantages: (G,) for every objective, or {objective: (G,) or (G, T)} (see `paired_advantages`; (G, T) are
    per-step advantages, e.g. ppo's GAE or dense_grpo's look-ahead gains, `step_advantages.py`);
    objectives: names in OBJECTIVES (default: all registered); step_mask: (G, T) bool trained steps.
    Only the policy term is explained: settings.kl_beta must be 0 (the KL term pulls towards the
    reference, not along the advantage).
    """
    if settings.kl_beta > 0:
        raise WorkbenchError("the explainer shows the policy term only: use settings with kl_beta=0")
    names = list(objectives) if objectives is not None else OBJECTIVES.names()
    parts = [_one(name, log_prob, old_log_prob, _advantage_of(advantages, name), settings, step_mask)
             for name in names]
    weight = torch.stack([p[3] for p in parts])  # (O, G, T)
    total = weight.abs().sum(dim=(1, 2), keepdim=True)  # (O, 1, 1)
    share = weight.abs() / total.clamp_min(1e-300)  # (O, G, T); 0 / 1e-300 = 0 where an objective moves nothing
    mask = step_mask if step_mask is not None else torch.ones_like(log_prob, dtype=torch.bool)
    log_ratio = torch.where(mask, log_prob.detach() - old_log_prob.detach(), torch.zeros_like(log_prob))
    return Explanation(names=names, log_ratio=log_ratio, ratio=torch.stack([p[0] for p in parts]),
                       clipped=torch.stack([p[1] for p in parts]), advantage=torch.stack([p[2] for p in parts]),
                       step_advantage=torch.stack([p[5] for p in parts]),
                       weight=weight, share=share, loss=torch.stack([p[4] for p in parts]),
                       step_mask=mask, settings=settings)


def _advantage_of(advantages, name: str) -> torch.Tensor:
    if isinstance(advantages, Mapping):
        if name not in advantages:
            raise WorkbenchError(f"no advantages for objective '{name}'; give one (G,) tensor per objective")
        return advantages[name]
    return advantages


def _one(name: str, log_prob, old_log_prob, advantage, settings, step_mask) -> tuple:
    """(ratio, clipped, advantage (G,), weight, loss (), step advantage (G, T)) of one registered objective."""
    leaf = log_prob.detach().clone().requires_grad_(True)  # (G, T) the log p_t the weights are taken against
    adv = advantage.detach().to(leaf)  # (G,) or (G, T)
    out = OBJECTIVES.get(name)(PolicyInputs(leaf, old_log_prob.detach().to(leaf), adv, step_mask=step_mask),
                               settings)
    (weight,) = torch.autograd.grad(out.loss, leaf, allow_unused=True)
    weight = torch.zeros_like(leaf) if weight is None else weight  # (G, T)
    ratio, clipped = out.step_ratio, out.step_clipped  # (G, T) each
    if ratio is None:  # an objective outside the shared code paths: its weights, but no ratio map
        ratio, clipped = torch.full_like(weight, math.nan), torch.zeros_like(weight, dtype=torch.bool)
    per_step = adv if adv.dim() == 2 else adv[:, None].expand_as(leaf)  # (G, T)
    return ratio, clipped, adv if adv.dim() == 1 else adv.mean(dim=1), weight, out.loss.detach(), per_step


def moved_log_probs(policy: FlowPolicy, group: TrajectoryGroup, advantages: torch.Tensor,
                    objective: str = "step_grpo", settings: ObjectiveSettings | None = None,
                    updates: int = INNER_UPDATES, lr: float = INNER_LR, progress=None) -> torch.Tensor:
    """Per-step log-probs (G, T) of the group's stored transitions after `updates` AdamW steps on it.

    The steps minimise `objective` over the whole group (advantages (G,)) on a deep copy of the policy's
    transformer, re-scoring the transitions with gradient through `sampler.transition` as the trainer's
    inner epochs do; the policy itself is untouched. updates = 0 returns the sampling log-probs (ratio 1).
    `progress(done, total)` is called after each update.
    """
    from workbench.flow.sampler import transition

    if updates < 0 or lr <= 0:
        raise WorkbenchError(f"need updates >= 0 and lr > 0, got updates={updates}, lr={lr}")
    if updates == 0:
        return group.log_probs.clone()
    settings = settings or ObjectiveSettings(clip_low=CLIP)
    moved = policy.with_transformer(copy.deepcopy(policy.transformer).requires_grad_(True))  # original untouched
    optimizer = torch.optim.AdamW(moved.transformer.parameters(), lr=lr, weight_decay=0.0)
    g, t, cfg = group.group_size, group.num_steps, group.config
    dev = policy.device
    x = group.states[:, :t].flatten(0, 1).to(dev)  # (G * T, C, H, W), row i * T + s is step s of trajectory i
    x_next = group.states[:, 1:].flatten(0, 1).to(dev)  # (G * T, C, H, W)
    step = torch.arange(t, device=dev).repeat(g)  # (G * T,)
    cond = moved.encode([group.prompt], cfg=cfg.guidance_scale != 1.0).repeat(g * t)
    sigmas, mask = group.sigmas.to(dev), cfg.sde_mask().to(dev).expand(g, t)  # (T + 1,), (G, T)
    inputs = dict(old_log_prob=group.log_probs.to(dev), advantages=advantages.to(dev).float(), step_mask=mask)
    moved.transformer.train()
    for done in range(1, updates + 1):
        log_prob = transition(moved, x, sigmas, step, cond, cfg, x_next=x_next).log_prob.view(g, t)  # (G, T)
        _check_finite(log_prob, done - 1, lr)
        OBJECTIVES.get(objective)(PolicyInputs(log_prob, **inputs), settings).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if progress is not None:
            progress(done, updates)
    moved.transformer.eval()
    with torch.no_grad():  # re-score all G * T transitions in one batch (what `sampler.rescore` does step by step)
        out = transition(moved, x, sigmas, step, cond, cfg, x_next=x_next).log_prob.view(g, t).cpu()  # (G, T)
    return _check_finite(out, updates, lr)


def _check_finite(log_prob: torch.Tensor, done: int, lr: float) -> torch.Tensor:
    """The log-probs, or a WorkbenchError when the updates diverged (a ratio of NaN or inf explains nothing)."""
    if not bool(torch.isfinite(log_prob).all()):
        raise WorkbenchError(f"the inner updates diverged: after {done} update(s) at learning rate {lr:g} the "
                             f"log-probs are NaN or inf; lower the learning rate (the trainer's default is "
                             f"{INNER_LR:g}) or the number of updates")
    return log_prob
