"""Credit of one prompt under two policies, before and after a fine-tune (docs/methods.md "Before and after").

Both groups are sampled with the same SamplingConfig (the same x_T and the same SDE noise draws), scored by
the same reward, and measured with the same estimator, M and continuation seed, so what differs between
the two credit maps is the policy. Each group gets its own GRPO advantages from its own rewards.

    comparison = compare_credit((base, tuned), ("base", "tuned"), prompt, config, reward_fn, continuations=4)
    comparison.differences(z=2)   # per rate: before, after, after - before and its standard error
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from workbench.flow.policy import FlowPolicy
from workbench.flow.sampler import sample_group
from workbench.flow.trajectory import SamplingConfig, TrajectoryGroup
from workbench.rl.credit import Credit, Z, measure_credit
from workbench.rl.credit_stats import Rates

RATES = ("misattributed", "determined", "mass_against")  # Rates fields compared, each with its `_se`


@dataclass
class RateDifference:
    """One rate under both policies: after - before, with the standard error of that difference."""

    unit: str  # "step" or "chunk"
    rate: str  # a RATES name
    before: float
    after: float
    diff: float  # after - before
    se: float  # sqrt(se_before^2 + se_after^2): the two groups' cells are treated as independent


def rate_difference(unit: str, rate: str, before: Rates, after: Rates) -> RateDifference:
    """after - before of one rate, with se = sqrt(se_b^2 + se_a^2) (NaN where either is undefined).

    The two groups share x_T and noise, so their rates are positively correlated and this error is an upper
    bound on the true one (docs/methods.md "Before and after")."""
    b, a = getattr(before, rate), getattr(after, rate)
    sb, sa = getattr(before, f"{rate}_se"), getattr(after, f"{rate}_se")
    return RateDifference(unit, rate, b, a, a - b, math.sqrt(sb * sb + sa * sa))


@dataclass
class CreditComparison:
    """Two policies' groups of one prompt (same noise) and their credit; index 0 is 'before', 1 'after'."""

    labels: tuple[str, str]
    groups: tuple[TrajectoryGroup, TrajectoryGroup]
    credits: tuple[Credit, Credit]

    @property
    def scale(self) -> float:
        """The largest |step credit| of both maps: one colour scale for the two."""
        return max(float(c.step_credit.abs().max()) for c in self.credits) or 1e-6

    def rechunk(self, sizes) -> CreditComparison:
        """The same measurements under another chunk schedule (no sampling)."""
        return replace(self, credits=tuple(c.rechunk(sizes) for c in self.credits))

    def differences(self, z: float = Z) -> list[RateDifference]:
        """Every compared rate of steps and chunks, after - before."""
        before, after = (c.rates(z) for c in self.credits)
        return [rate_difference(unit, rate, getattr(before, unit), getattr(after, unit))
                for unit in ("step", "chunk") for rate in RATES]


def compare_credit(policies: tuple[FlowPolicy, FlowPolicy], labels: tuple[str, str], prompt: str,
                   config: SamplingConfig, reward_fn, continuations: int = 4, chunks="2,3,4,7", seed: int = 0,
                   estimator: str = "mc", crn: bool = True, progress=None, precision: str = "auto"
                   ) -> CreditComparison:
    """Sample `prompt` with `config` under both policies and measure each group's credit the same way
    (`precision`: the continuations' numerics, core/precision.py).

    progress(done, total) counts continuation batches over both measurements."""
    groups, credits = [], []
    for n, policy in enumerate(policies):
        def within(done: int, total: int, n: int = n) -> None:
            if progress is not None:
                progress(n * total + done, 2 * total)
        group = sample_group(policy, prompt, config)
        credit = measure_credit(policy, group, reward_fn, continuations=continuations, chunks=chunks, seed=seed,
                                progress=within, estimator=estimator, crn=crn, precision=precision)
        groups.append(group)
        credits.append(credit)
    return CreditComparison(tuple(labels), tuple(groups), tuple(credits))
