"""Credit of one prompt under two policies: same noise, same measurement; rate differences with their errors."""

from __future__ import annotations

import copy
import math
import re

import pytest
import torch

from workbench.core.errors import WorkbenchError
from workbench.flow.sampler import sample_group
from workbench.flow.trajectory import SamplingConfig
from workbench.models.embedded import EmbeddedPolicy
from workbench.rl.credit import measure_credit
from workbench.rl.credit_compare import compare_credit, rate_difference
from workbench.rl.credit_estimators import measured_precision
from workbench.rl.credit_stats import Rates

PROMPT = "a small blue ring in the center"
CONFIG = SamplingConfig(group=4, steps=4, seed=3)
SMALL = SamplingConfig(group=2, steps=3, seed=1)


def reward(images, prompts):
    return images.mean(dim=(1, 2, 3))  # (B,) brightness: cheap, and it varies with every step


def test_the_same_policy_on_both_sides_gives_identical_maps(random_policy):
    c = compare_credit((random_policy, random_policy), ("a", "b"), PROMPT, CONFIG, reward, continuations=2,
                       chunks="1,3")
    (ga, gb), (ca, cb) = c.groups, c.credits
    assert torch.equal(ga.images, gb.images) and torch.equal(ga.states, gb.states)
    assert torch.equal(ca.step_credit, cb.step_credit) and torch.equal(ca.step_classes(), cb.step_classes())
    assert all(d.diff == 0 or math.isnan(d.diff) for d in c.differences())
    assert c.rechunk("2,2").credits[0].sizes == [2, 2]


def test_another_policy_changes_the_group_from_the_same_noise(random_policy):
    moved = EmbeddedPolicy(copy.deepcopy(random_policy.model))
    with torch.no_grad():
        for p in moved.transformer.parameters():
            p.add_(0.02 * torch.randn_like(p))
    c = compare_credit((random_policy, moved), ("base", "moved"), PROMPT, CONFIG, reward, continuations=2, chunks="4")
    (ga, gb), (ca, cb) = c.groups, c.credits
    assert torch.equal(ga.states[:, 0], gb.states[:, 0])  # the same x_T
    assert not torch.equal(ga.images, gb.images) and not torch.equal(ca.step_credit, cb.step_credit)
    assert c.scale == max(float(ca.step_credit.abs().max()), float(cb.step_credit.abs().max()))
    assert [(d.unit, d.rate) for d in c.differences()][:3] == [("step", "misattributed"), ("step", "determined"),
                                                                ("step", "mass_against")]


def test_rate_difference_by_hand():
    before = Rates(misattributed=0.4, misattributed_se=0.03, determined=0.5, determined_se=0.1, mass_against=0.3,
                   mass_against_se=0.05, plain=0.45, plain_se=0.02, cells=32, determined_cells=16)
    after = Rates(misattributed=0.25, misattributed_se=0.04, determined=0.6, determined_se=0.1, mass_against=0.2,
                  mass_against_se=0.05, plain=0.4, plain_se=0.02, cells=32, determined_cells=19)
    d = rate_difference("step", "misattributed", before, after)
    assert (d.before, d.after) == (0.4, 0.25) and math.isclose(d.diff, -0.15) and math.isclose(d.se, 0.05)


def test_progress_runs_over_both_measurements_and_k_defaults_to_4(random_policy):
    calls = []
    c = compare_credit((random_policy, random_policy), ("a", "b"), PROMPT, SamplingConfig(group=2, steps=3, seed=1),
                       reward, chunks="1,2", progress=lambda *call: calls.append(call))
    assert all(credit.counts.eq(4).all() for credit in c.credits)
    total = calls[0][1]
    assert all(t == total for _, t in calls) and calls[-1][0] == total  # one total for both measurements
    half = [done for done, _ in calls if done <= total // 2]
    assert half and [done for done, _ in calls] == sorted(done for done, _ in calls)  # the first, then the second


def test_the_table_counts_the_determined_cells_and_says_when_a_difference_has_no_error():
    """A rate over one trajectory's determined cells has no error over trajectories: the table says so and gives the
    count, where it printed "+87.5 points" alone (12.5 % of 8 cells against 100 % of 1, read as an effect)."""
    from workbench.rl.credit import Credit
    from workbench.rl.credit_compare import CreditComparison
    from workbench.viz.credit_view import NO_ERROR, comparison_text

    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0])

    def credit(noisy_from: int) -> Credit:  # trajectories from noisy_from on: continuations too noisy to determine
        # a small spread, no two rewards equal (tied rewards would go to the exact test, which 4 values cannot pass)
        continuations = 0.5 + torch.tensor([0.001, -0.001, 0.002, -0.002]).expand(4, 1, 4).clone()
        continuations[noisy_from:, 0] += torch.tensor([-3.0, 3.0, -3.0, 3.0])
        return Credit("p", rewards, rewards - rewards.mean(), continuations, [1, 1])

    both = CreditComparison(("base", "run"), (None, None), (credit(4), credit(1)))
    assert both.credits[1].rates().step.determined_cells == 1
    rows = {line.split("|")[1].strip(): line for line in comparison_text(both, 2.0).splitlines() if "|" in line}
    misattributed = rows["step: misattributed among determined"]
    assert "| 0.0 % of 4 cells | 0.0 % of 1 cell |" in misattributed and NO_ERROR in misattributed
    assert NO_ERROR not in rows["step: determined share"] and "±" in rows["step: determined share"]


def other_numerics(policy) -> str:
    """The numerics "auto" does not resolve to on this machine (so that giving them is seen)."""
    return "float32" if measured_precision(policy, "mc", "auto") == "bfloat16" else "bfloat16"


def test_both_credits_are_measured_with_the_settings_given(random_policy):
    numerics = other_numerics(random_policy)
    c = compare_credit((random_policy, random_policy), ("a", "b"), PROMPT, SMALL, reward, continuations=1,
                       chunks="1,2", seed=5, crn=False, precision=numerics)
    assert [(x.estimator, x.seed, x.crn, x.precision, x.sizes) for x in c.credits] == [("mc", 5, False, numerics,
                                                                                         [1, 2])] * 2
    c = compare_credit((random_policy, random_policy), ("a", "b"), PROMPT, SMALL, reward, chunks="1,2", estimator="x0")
    assert [x.estimator for x in c.credits] == ["x0", "x0"]


def test_by_default_the_chunks_are_gcpo_s_and_the_continuation_seed_is_0(random_policy):
    c = compare_credit((random_policy, random_policy), ("a", "b"), PROMPT, SamplingConfig(group=2, steps=16, seed=1),
                       reward, estimator="x0")  # x0: one look-ahead per state, the cheapest of 16 steps
    assert [(x.sizes, x.seed) for x in c.credits] == [([2, 3, 4, 7], 0)] * 2


def test_a_measured_credit_is_reused_only_when_measured_the_same_way(random_policy):
    """A credit measured with the comparison's numerics is re-chunked, not measured again; one measured with
    another seed is refused, naming its side; a group of another prompt is refused before any work."""
    numerics = other_numerics(random_policy)
    group = sample_group(random_policy, PROMPT, SMALL)
    credit = measure_credit(random_policy, group, reward, continuations=1, chunks="3", precision=numerics)
    c = compare_credit((random_policy, random_policy), ("base", "tuned"), PROMPT, SMALL, reward, continuations=1,
                       chunks="1,2", precision=numerics, sampled=(group, group), measured=(credit, credit))
    assert c.groups == (group, group) and all(torch.equal(x.step_credit, credit.step_credit) for x in c.credits)
    assert [x.sizes for x in c.credits] == [[1, 2], [1, 2]]
    with pytest.raises(WorkbenchError, match="^" + re.escape("the base group's credit was measured with other "
                                                             "settings than the comparison's: pass none to measure it "
                                                             "again") + "$"):
        compare_credit((random_policy, random_policy), ("base", "tuned"), PROMPT, SMALL, reward, continuations=1,
                       chunks="1,2", seed=1, precision=numerics, sampled=(group, group), measured=(credit, credit))
    refused = "the tuned group was sampled from another prompt or config than the one compared: pass the group " \
              "sampled with them, or none"
    with pytest.raises(WorkbenchError, match="^" + re.escape(refused) + "$"):
        compare_credit((random_policy, random_policy), ("base", "tuned"), "a large red circle", SMALL, reward,
                       sampled=(None, group))
