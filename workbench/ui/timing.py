"""How long a button's work will take on this machine, said before it is pressed, from this machine's own timings.

The unit is one transformer evaluation of one image (what `credit.cost["nfe"]` counts). Its time is measured here:
once as the model loads (a short timed sampling, `probe`), then again from every credit measurement made in this
app (`record`: the seconds and evaluations the measurement itself reported), so the estimates follow the machine's
load. Nothing is assumed about the machine.
"""

from __future__ import annotations

import time

PROBE = {"group": 8, "steps": 4}  # a short sampling: 32 image evaluations, a fraction of a second on a laptop


def evaluations(group: int, steps: int, continuations: int) -> int:
    """Image evaluations of sampling a group and measuring its Monte-Carlo credit (every step noisy)."""
    from workbench.rl.credit_estimators import continuation_cost, grid_rows

    return group * steps + continuation_cost(grid_rows(group, range(1, steps), range(continuations)), steps)


def probe(wb) -> None:
    """Time a short sampling with the app's model and keep its seconds per image evaluation."""
    from workbench.flow.sampler import sample_group
    from workbench.flow.trajectory import SamplingConfig

    policy = wb.policy()
    if not policy.toy_world:  # a real model's prompts differ; its first credit measurement sets the rate
        return
    start = time.perf_counter()
    sample_group(policy, "a large red circle", SamplingConfig(**PROBE, seed=0))
    _keep(wb, (time.perf_counter() - start) / (PROBE["group"] * PROBE["steps"]), "timed as the model loaded")


OBJECTIVES_PROBE = {"group": 4, "steps": 4}  # the Objectives tab's work timed on 16 image-steps as the model loads


def probe_objectives(wb) -> None:
    """Time the Objectives tab's two parts on a small group: its per-step advantages (ppo's critic fit, dense_grpo's
    look-ahead) and one inner update; each Compute times them again (`record_objectives`)."""
    import torch

    from workbench.flow.sampler import sample_group
    from workbench.flow.trajectory import SamplingConfig
    from workbench.rewards import build_reward
    from workbench.rl.explain import moved_log_probs
    from workbench.rl.objectives import OBJECTIVES
    from workbench.train.explained import objective_advantages

    policy = wb.policy()
    if not policy.toy_world:
        return
    group = sample_group(policy, "a large red circle", SamplingConfig(**OBJECTIVES_PROBE, seed=0))
    reward_fn = build_reward("adherence")
    rewards = torch.as_tensor(reward_fn(group.images, [group.prompt] * group.group_size), dtype=torch.float32)
    start = time.perf_counter()
    advantages = objective_advantages(policy, group, rewards, OBJECTIVES.names(), reward_fn, wb.batched_threads)
    middle = time.perf_counter()
    moved_log_probs(policy, group, advantages["step_grpo"], "step_grpo", updates=1)
    record_objectives(wb, group.group_size * group.num_steps, middle - start, time.perf_counter() - middle,
                      "timed as the model loaded")


def record_objectives(wb, cells: int, advantages_s: float | None, update_s: float | None,
                      how: str = "from the last Compute here") -> None:
    """Keep the seconds per image-step (`cells` = G T) of the per-step advantages and of one inner update."""
    rates = dict(getattr(wb, "objectives_timing", None) or {})
    if advantages_s:
        rates["advantages"] = (advantages_s / cells, how)
    if update_s:
        rates["update"] = (update_s / cells, how)
    wb.objectives_timing = rates


def record(wb, credit) -> None:
    """Keep the seconds per image evaluation a credit measurement reported."""
    nfe, seconds = credit.cost.get("nfe", 0), credit.cost.get("seconds", 0.0)
    if nfe and seconds:
        _keep(wb, seconds / nfe, "from the last credit measurement here")


def _keep(wb, per_eval: float, how: str) -> None:
    wb.timing = (per_eval, how)


def estimate(wb, evals: int) -> str:
    """'about N s on this machine (...)', or that the machine is not timed yet (read after 'Time: ')."""
    timing = getattr(wb, "timing", None)
    if timing is None:
        return "not measured on this machine yet (the app times the model as it loads: reload the page)"
    per_eval, how = timing
    return (f"about {shown(evals * per_eval)} on this machine ({evals} image evaluations at {1000 * per_eval:.1f} "
            f"ms each, {how}; a busier machine takes longer)")


def shown(seconds: float) -> str:
    """'12 s' under a minute and a half, else '2.5 minutes'."""
    return f"{max(1, round(seconds))} s" if seconds < 90 else f"{seconds / 60:.1f} minutes"


def seconds(wb, evals: int) -> float | None:
    """Seconds of `evals` image evaluations at this machine's measured rate; None before it is measured."""
    timing = getattr(wb, "timing", None)
    return None if timing is None else evals * timing[0]
