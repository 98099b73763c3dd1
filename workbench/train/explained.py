"""What every registered objective pushes on one group, computed one way for the Objectives tab and notebook 01.

The app's tab and the notebook call the same functions, so a group gives the same maps and numbers in both:
`objective_advantages` gives each objective the advantages it is trained with (paired (G,) advantages of the
rewards, GFPO's sharpness score, and per-step (G, T) ones for ppo's fitted critic and dense_grpo's look-ahead);
`explain_rows` explains the group at ratio 1 and after the inner updates on the trained steps; `objective_numbers`
gives each objective's clipped share and correlations with a measured credit (docs/methods.md "Gradient weights").

    advantages = objective_advantages(policy, group, rewards, ordered_objectives(), build_reward("adherence"))
    moved = moved_log_probs(policy, group, advantages["chunk_grpo"], "chunk_grpo", settings)
    rows = explain_rows(group, advantages, moved, sizes, clip=1e-4, updates=3)
    objective_numbers(rows, credit.step_credit)[0]   # ObjectiveNumbers(name="chunk_grpo", clipped=0.12, ...)
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import torch

from workbench.flow.policy import FlowPolicy
from workbench.flow.trajectory import TrajectoryGroup
from workbench.rl.explain import Explanation, explain, paired_advantages
from workbench.rl.objectives import OBJECTIVES, ObjectiveSettings
from workbench.train.presets import gfpo_scores
from workbench.train.step_compare import per_step_advantages

ROWS = (("ratio1", "at ratio 1"), ("moved", "after the inner updates"))  # (key, label) of the two rows of maps


def ordered_objectives() -> list[str]:
    """Registered objectives in the order their registrations give (`ObjectiveInfo.order`), then by name."""
    def order(name: str) -> int:
        info = OBJECTIVES.info(name)
        return info.order if info is not None else 1_000

    return sorted(OBJECTIVES.names(), key=lambda n: (order(n), n))


def objective_advantages(policy: FlowPolicy, group: TrajectoryGroup, rewards: torch.Tensor, names: list[str],
                         reward_fn, batched=nullcontext) -> dict[str, torch.Tensor]:
    """{objective: advantages}: paired (G,) advantages of `rewards` (G,), GFPO's filtered by its preset's second
    score, and (G, T) per-step ones for the objectives registered with a `step_credit` (ppo, dense_grpo), which
    `reward_fn` scores. `batched()`: the context the look-ahead's batched passes run in."""
    advantages = paired_advantages(rewards, names, metric=gfpo_scores(group))
    return advantages | per_step_advantages(policy, group, rewards, names, reward_fn, batched=batched)


def explain_rows(group: TrajectoryGroup, advantages: dict[str, torch.Tensor], moved: torch.Tensor, sizes: list[int],
                 clip: float, updates: int, names: list[str] | None = None) -> list[tuple[str, str, Explanation]]:
    """[(row key, row title, Explanation)] of the group at ratio 1 and after `updates` inner updates (whose
    log-probs are `moved` (G, T)), under chunks `sizes` and clip range `clip`, on the group's trained steps."""
    settings = ObjectiveSettings(clip_low=clip, chunks=list(sizes))
    old = group.log_probs  # (G, T)
    mask = group.config.sde_mask().expand_as(old)  # (G, T) trained steps
    names = names or ordered_objectives()
    return [(key, title if key == "ratio1" else f"after {updates} update{'' if updates == 1 else 's'}",
             explain(new, old, advantages, settings, names, mask))
            for (key, title), new in zip(ROWS, (old, moved))]


@dataclass
class ObjectiveNumbers:
    """One objective's summary on an explained group."""

    name: str
    clipped: float  # share of the trained steps whose unit is clipped after the inner updates
    corr_at_one: float | None  # Pearson correlation of its push with the credit at ratio 1 (NaN: a constant map)
    corr_moved: float | None  # the same after the inner updates; None without a credit


def correlation_text(value: float | None) -> str:
    """A correlation as the tab's table and the notebook print it: "+0.22", or "n/a" for none or NaN (a constant
    map, e.g. every unit clipped)."""
    return f"{value:+.2f}" if value is not None and value == value else "n/a"


def objective_numbers(rows: list[tuple[str, str, Explanation]], credit: torch.Tensor | None) -> list[ObjectiveNumbers]:
    """Per objective of `explain_rows`' rows: clipped share after the updates and correlations with `credit`
    (G, T) at ratio 1 and after them (None without a credit)."""
    (_, _, first), (_, _, moved) = rows
    corr = [ex.correlation(credit).tolist() if credit is not None else None for ex in (first, moved)]
    return [ObjectiveNumbers(name, float(moved.clipped[o][moved.step_mask].float().mean()),
                             *(c[o] if c is not None else None for c in corr))
            for o, name in enumerate(moved.names)]
