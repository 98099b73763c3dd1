"""Compare reuses the session's group, and its credit when it was measured the same way: the numbers of sampling and
measuring both groups again, for one sampling and one or two measurements, and a time said beforehand to match."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from support import make_run

from workbench.core.errors import WorkbenchError
from workbench.rewards import build_reward
from workbench.rl import credit_compare
from workbench.rl.credit import refine
from workbench.rl.credit_compare import compare_credit
from workbench.rl.credit_estimators import continuation_cost, grid_rows
from workbench.ui import handlers as h
from workbench.ui import policies as pol
from workbench.ui import waits
from workbench.ui.state import Session
from workbench.ui.workbench import Workbench

PROMPT = "a small blue ring in the center"
GROUP_TENSORS = ("sigmas", "states", "x0_preds", "means", "stds", "log_probs", "images")


@pytest.fixture(scope="module")
def wb(model_dir, tmp_path_factory):
    """The app on the tiny model, with a run whose checkpoint moved every weight (another policy to compare)."""
    wb = Workbench(model=str(model_dir), device="cpu", runs_root=str(tmp_path_factory.mktemp("runs")), curve_prompts=2)
    make_run(wb.jobs.root, model_dir, iterations=(10,), name="tuned")
    return wb


@pytest.fixture(scope="module")
def tuned(wb):
    """A session under the run's checkpoint holding a G=3, T=4 group (seed 2); its credit is not measured."""
    session = Session().with_source(str(wb.jobs.root / "tuned" / "checkpoints" / "iter_0010"))
    return h.generate(wb, PROMPT, 3, 4, 0.7, 2, "adherence", session)[-2]


def measured(wb, session: Session, m: int) -> Session:
    return h.attribute(wb, m, session)[-2]


def _same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """Equal to the last bit, NaN where the other has NaN (a state past its M)."""
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.nan_to_num(-7.0), b.nan_to_num(-7.0))


def assert_same_numbers(new, old) -> None:
    """Every number of two CreditComparisons is the same: groups, credits, errors, classes, rates, differences."""
    for g, f in zip(new.groups, old.groups, strict=True):
        assert all(_same(getattr(g, name), getattr(f, name)) for name in GROUP_TENSORS)
    for c, d in zip(new.credits, old.credits, strict=True):
        for name in ("rewards", "advantages", "continuation_rewards", "start", "start_continuations", "trained"):
            assert _same(getattr(c, name), getattr(d, name)), name
        for name in ("step_credit", "step_se", "chunk_credit", "chunk_se", "step_classes", "chunk_classes"):
            assert _same(getattr(c, name) if "classes" not in name else getattr(c, name)(),
                         getattr(d, name) if "classes" not in name else getattr(d, name)()), name
        assert (c.sizes, c.seed, c.crn, c.estimator, c.precision) == (d.sizes, d.seed, d.crn, d.estimator, d.precision)
        assert repr(c.rates()) == repr(d.rates())  # floats in full, NaN as 'nan'
    assert repr(new.differences()) == repr(old.differences())


def sampled_and_measured_again(wb, session: Session, other: str, m: int):
    """The comparison as Compare made it before it reused anything: both groups sampled and measured afresh."""
    group = session.group
    with wb.batched_threads():
        return compare_credit((wb.policy(other), wb.policy(session.source)), ("before", "after"), group.prompt,
                              group.config, build_reward(session.reward_spec), continuations=m, chunks=session.sizes,
                              seed=group.config.seed)


@pytest.mark.parametrize("credit_m", [None, 2, 3], ids=["no credit yet", "credit reused", "credit of another M"])
def test_compare_gives_the_numbers_of_sampling_and_measuring_both_groups_again(wb, tuned, credit_m):
    session = tuned if credit_m is None else measured(wb, tuned, credit_m)
    session = h.chunks_from_spec(wb, "1,3", session)[-2]  # an edited schedule (the session re-chunks its credit)
    other = wb.base_key(session.source)
    figure, images, text, compared, status = pol.compare(wb, pol.RUN_BASE, 2, session)
    assert status.startswith("✓") and ("already measured" in status) == (credit_m == 2), status
    new = compared.comparison
    assert new.groups[1] is session.group  # the session's own group, not sampled again
    old = sampled_and_measured_again(wb, session, other, 2)
    assert not torch.equal(new.groups[0].images, new.groups[1].images)  # two policies: a comparison worth making
    assert_same_numbers(new, old)


class Counted:
    """A function that counts its calls (the sampler, the credit measurement)."""

    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.fn(*args, **kwargs)


@pytest.fixture
def counted(monkeypatch):
    sampler, measure = Counted(credit_compare.sample_group), Counted(credit_compare.measure_credit)
    monkeypatch.setattr(credit_compare, "sample_group", sampler)
    monkeypatch.setattr(credit_compare, "measure_credit", measure)
    return sampler, measure


@pytest.mark.parametrize("credit_m, measurements", [(None, 2), (2, 1), (3, 2)],
                         ids=["no credit yet", "credit reused", "credit of another M"])
def test_compare_samples_one_group_and_measures_one_or_two(wb, tuned, counted, credit_m, measurements):
    session = tuned if credit_m is None else measured(wb, tuned, credit_m)
    sampler, measure = counted
    pol.compare(wb, pol.RUN_BASE, 2, session)
    assert (sampler.calls, measure.calls) == (1, measurements)


def test_the_time_said_before_compare_counts_one_sampling_and_the_measurements_it_makes(wb, tuned):
    wb.timing = (0.01, "timed as the model loaded")
    group = tuned.group
    g, t = group.group_size, group.num_steps
    one = continuation_cost(grid_rows(g, range(1, t), range(2)), t, group.config.sde_mask())  # M=2, shared x_T
    fresh = waits.compare_wait(wb, 2, "mc", True, "auto", tuned)
    assert f"({g * t + 2 * one} image evaluations at 10.0 ms each" in fresh and "measured too" in fresh, fresh
    session = measured(wb, tuned, 2)
    kept = waits.compare_wait(wb, 2, "mc", True, "auto", session)
    assert f"({g * t + one} image evaluations" in kept and "is reused" in kept, kept
    numerics = session.credit.precision  # what "auto" resolved to here: the same numerics, named
    assert "is reused" in waits.compare_wait(wb, 2, "mc", True, numerics, session)
    elsewise = "float32" if numerics == "bfloat16" else "bfloat16"
    for other in ((3, "mc", True, "auto"), (2, "mc", False, "auto"), (2, "mc", True, elsewise),
                  (2, "ode", True, "auto")):
        assert "measured too" in waits.compare_wait(wb, *other, session), other  # another M, CRN, numerics, estimator
    assert "generate one first" in waits.compare_wait(wb, 2, "mc", True, "auto", Session())


def test_only_a_credit_measured_the_same_way_is_reused(wb, tuned):
    session = measured(wb, tuned, 2)
    policy, reward = wb.policy(session.source), build_reward(session.reward_spec)
    assert pol.session_credit(wb, session, 2, "mc", True, "auto") is session.credit
    rechunked = replace(session, credit=session.credit.rechunk("4"))  # the chunks are no part of the measurement
    assert pol.session_credit(wb, rechunked, 2, "mc", True, "auto") is rechunked.credit
    assert pol.session_credit(wb, session, 4, "mc", True, "auto") is None
    refined = refine(session.credit, policy, session.group, reward, budget=8)
    later = replace(session, credit=refined, reference=refined)
    assert pol.session_credit(wb, later, 2, "mc", True, "auto") is None  # refined: M is no longer 2 everywhere
    group = session.group
    with pytest.raises(WorkbenchError, match="measured with other settings"):
        compare_credit((policy, policy), ("a", "b"), group.prompt, group.config, reward, continuations=2,
                       chunks=session.sizes, seed=group.config.seed, sampled=(None, group), measured=(None, refined))
    with pytest.raises(WorkbenchError, match="another prompt or config"):
        compare_credit((policy, policy), ("a", "b"), "a large red circle", group.config, reward, continuations=2,
                       sampled=(None, group))
