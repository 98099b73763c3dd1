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
    seconds = evals * per_eval
    shown = f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} minutes"
    return (f"about {shown} on this machine ({evals} image evaluations at {1000 * per_eval:.1f} ms each, {how}; "
            "a busier machine takes longer)")
