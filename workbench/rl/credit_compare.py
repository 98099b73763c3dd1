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

from workbench.core.errors import WorkbenchError
from workbench.flow.policy import FlowPolicy
from workbench.flow.sampler import sample_group
from workbench.flow.trajectory import SamplingConfig, TrajectoryGroup
from workbench.rl.credit import Credit, Z, measure_credit
from workbench.rl.credit_estimators import ESTIMATORS, measured_precision
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


def same_measurement(credit: Credit, group: TrajectoryGroup, continuations: int, seed: int, estimator: str,
                     crn: bool, precision: str) -> bool:
    """Whether `credit` is what `measure_credit` of `group` with these settings gives, up to the chunks, which
    `Credit.rechunk` sets without sampling: the same group, estimator, continuation seed, CRN and numerics
    (`precision` resolved, as `credit_estimators.measured_precision` gives it), M continuations at every state (not
    refined since; M only counts for a Monte-Carlo estimator) and no re-scoring. The reward is not recorded in a
    Credit: the caller knows which reward measured it."""
    return (credit.prompt == group.prompt and credit.num_steps == group.num_steps
            and credit.rewards.shape[0] == group.group_size and credit.estimator == estimator and credit.seed == seed
            and credit.crn == crn and credit.precision == precision and credit.looks is None
            and credit.final_scores is None
            and (not ESTIMATORS.info(estimator).continuations or bool(credit.counts.eq(continuations).all())))


def compare_credit(policies: tuple[FlowPolicy, FlowPolicy], labels: tuple[str, str], prompt: str,
                   config: SamplingConfig, reward_fn, continuations: int = 4, chunks="2,3,4,7", seed: int = 0,
                   estimator: str = "mc", crn: bool = True, progress=None, precision: str = "auto",
                   sampled: tuple[TrajectoryGroup | None, TrajectoryGroup | None] = (None, None),
                   measured: tuple[Credit | None, Credit | None] = (None, None)) -> CreditComparison:
    """Sample `prompt` with `config` under both policies and measure each group's credit the same way
    (`precision`: the continuations' numerics, core/precision.py).

    sampled: a group already sampled under that side's policy from `prompt` with `config` (e.g. the app session's
    own), used instead of sampling it again: sampling is deterministic given the config's seed, so the numbers are
    the same. measured: that group's credit already measured with `reward_fn`, used (re-chunked) instead of
    measuring again; it must be `same_measurement` as the one asked for.
    progress(done, total) counts continuation batches over the measurements made."""
    for label, group in zip(labels, sampled):  # checked before any work
        if group is not None and (group.prompt != prompt or group.config != config):
            raise WorkbenchError(f"the {label} group was sampled from another prompt or config than the one "
                                 "compared: pass the group sampled with them, or none")
    made, todo = 0, sum(1 for credit in measured if credit is None)  # progress runs over the measurements made
    groups, credits = [], []
    for n, policy in enumerate(policies):
        group = sampled[n] if sampled[n] is not None else sample_group(policy, prompt, config)
        credit = measured[n]
        if credit is None:
            credit = measure_credit(policy, group, reward_fn, continuations=continuations, chunks=chunks, seed=seed,
                                    progress=_within(progress, made, todo), estimator=estimator, crn=crn,
                                    precision=precision)
            made += 1
        elif not same_measurement(credit, group, continuations, seed, estimator, crn,
                                  measured_precision(policy, estimator, precision)):
            raise WorkbenchError(f"the {labels[n]} group's credit was measured with other settings than the "
                                 "comparison's: pass none to measure it again")
        else:
            credit = credit.rechunk(chunks)
        groups.append(group)
        credits.append(credit)
    return CreditComparison(tuple(labels), tuple(groups), tuple(credits))


def _within(progress, made: int, todo: int):
    """progress(done, total) of one measurement as part of `todo` measurements, `made` of them already made."""
    if progress is None:
        return None
    return lambda done, total: progress(made * total + done, todo * total)
