"""A Credit built by hand (G = 2 trajectories, T = 3 steps, K = 4 continuations): values, credit, validity,
look counts and halves computed in the comments (docs/methods.md "Credit")."""

from __future__ import annotations

import math

import pytest
import torch

from workbench.core.errors import WorkbenchError
from workbench.rl.credit import Credit

NAN = math.nan


def _credit(**kwargs) -> Credit:
    # continuation rewards from states 1 and 2 of each trajectory; means 0.5, 0.75 and 0.5, 0.25
    continuations = torch.tensor([[[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]],
                             [[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0]]])  # (G, T - 1, K)
    return Credit("p", torch.tensor([1.0, 0.0]), torch.tensor([1.0, -1.0]), continuations, [1, 2], **kwargs)


def test_values_and_credit_by_hand():
    credit = _credit()
    # V(x_T) = group mean 0.5; then the continuation means; then the rewards
    assert torch.allclose(credit.values, torch.tensor([[0.5, 0.5, 0.75, 1.0], [0.5, 0.5, 0.25, 0.0]]))
    assert torch.allclose(credit.step_credit, torch.tensor([[0.0, 0.25, 0.25], [0.0, -0.25, -0.25]]))
    assert torch.allclose(credit.chunk_credit, torch.tensor([[0.0, 0.5], [0.0, -0.5]]))
    assert credit.num_steps == 3 and credit.counts.tolist() == [[4, 4], [4, 4]]
    own = _credit(start_continuations=torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]]))
    assert torch.allclose(own.values[:, 0], torch.tensor([0.5, 0.0]))  # each trajectory's own x_T
    look_ahead = _credit(start=torch.tensor([0.25, 0.75]))
    assert torch.allclose(look_ahead.values[:, 0], torch.tensor([0.25, 0.75]))


def test_start_variance_is_the_group_means():
    var, dof = _credit()._start_var()
    # rewards 1, 0: unbiased variance 0.5, over G = 2 rewards: 0.25 with G - 1 = 1 degree of freedom
    assert torch.allclose(var, torch.tensor([0.25, 0.25])) and dof == 1.0
    var, dof = _credit(start=torch.tensor([0.25, 0.75]))._start_var()
    assert var.tolist() == [0.0, 0.0] and dof == math.inf


def test_valid_cells_follow_training_and_the_advantage():
    credit = _credit(trained=torch.tensor([True, True, False]))
    credit.advantages = torch.tensor([1.0, 0.0])  # A = 0 trains nothing
    assert credit.step_valid.tolist() == [[True, True, False], [False, False, False]]
    assert credit.chunk_valid.tolist() == [[True, True], [False, False]]  # chunk [1, 2] keeps one trained step


def test_only_a_chunk_from_the_shared_start_to_the_image_is_fixed():
    assert _credit().chunk_fixed.tolist() == [[False, False], [False, False]]
    whole = _credit().rechunk([3])
    assert whole.chunk_fixed.tolist() == [[True], [True]]
    assert torch.allclose(whole.chunk_credit[:, 0], torch.tensor([0.5, -0.5]))  # r_i - mean r
    own = _credit(start_continuations=torch.ones(2, 4)).rechunk([3])
    assert own.chunk_fixed.tolist() == [[False], [False]]  # its own x_T: not the group mean


def test_looks_count_the_rounds_that_grew_either_end():
    credit = _credit(looks=torch.tensor([[1.0, 0.0], [0.0, 2.0]]))
    # grown per state 0..3: [0, 1, 0, 0] and [0, 0, 2, 0]; a step j is looked at 1 + grown[j] + grown[j + 1]
    assert credit._looks(credit._step_edges).tolist() == [[2.0, 2.0, 1.0], [1.0, 3.0, 3.0]]
    assert credit._looks(credit._chunk_edges).tolist() == [[2.0, 2.0], [1.0, 1.0]]  # edges 0, 1, 3: both share 1
    assert _credit()._looks([0, 1, 3]).tolist() == [[1.0, 1.0], [1.0, 1.0]]


def test_halves_split_the_continuations_in_two():
    first, second = _credit(start_continuations=torch.tensor([[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0]])).halves()
    assert first.continuation_rewards[0, 0].tolist() == [1.0, 1.0]
    assert second.continuation_rewards[0, 0].tolist() == [0.0, 0.0]
    assert first.start_continuations.tolist() == [[1.0, 0.0], [0.0, 0.0]]
    assert second.start_continuations.tolist() == [[1.0, 1.0], [0.0, 1.0]]
    assert first.looks is None and second.looks is None
    assert _credit(deterministic=True).halves() is None
    three = _credit()
    three.continuation_rewards = three.continuation_rewards[..., :3]
    assert three.halves() is None  # K = 3 < 4
    uneven = _credit()
    uneven.continuation_rewards = uneven.continuation_rewards.clone()
    uneven.continuation_rewards[1, 1, 3] = NAN  # one state has M = 3 after refinement
    assert uneven.halves() is None
    five = _credit()
    five.continuation_rewards = torch.cat([five.continuation_rewards, torch.ones(2, 2, 1)], dim=2)
    assert [h.continuation_rewards.shape[-1] for h in five.halves()] == [2, 2]  # M = 5: 2 and 2, one left over


def _brightness(images, prompts):
    return images.float().mean(dim=(1, 2, 3))


def test_one_continuation_per_state_is_allowed_and_four_is_the_default(random_policy):
    from workbench.flow.sampler import sample_group
    from workbench.flow.trajectory import SamplingConfig
    from workbench.rl.credit import measure_credit

    group = sample_group(random_policy, "a red circle", SamplingConfig(group=2, steps=3))
    one = measure_credit(random_policy, group, _brightness, continuations=1, chunks="1,2")
    assert one.counts.tolist() == [[1, 1], [1, 1]] and torch.isnan(one.step_se[:, 1:]).all()  # K = 1: no error
    assert measure_credit(random_policy, group, _brightness, chunks="1,2").continuation_rewards.shape == (2, 2, 4)
    two = sample_group(random_policy, "a red circle", SamplingConfig(group=2, steps=2))  # one state between
    assert measure_credit(random_policy, two, _brightness, continuations=2, chunks="1,1").step_credit.shape == (2, 2)
    with pytest.raises(WorkbenchError, match="at least 2 steps"):
        measure_credit(random_policy, sample_group(random_policy, "a red circle", SamplingConfig(group=2, steps=1)),
                       _brightness, chunks="1")


def test_allocation_doubles_k_over_the_span_most_needed_first():
    from workbench.rl.credit import _allocate

    counts = torch.full((2, 2), 4)
    # trajectory 0 has 3 undetermined neighbours (state 2 first), trajectory 1 none: states 1, 2 go to K = 8
    rows = _allocate(torch.tensor([[1.0, 2.0], [0.0, 0.0]]), counts, 100)
    assert rows.tolist() == [[0, 2, k] for k in range(4, 8)] + [[0, 1, k] for k in range(4, 8)]
    rows = _allocate(torch.tensor([[1.0, 2.0], [0.0, 0.0]]), counts, 5)  # the budget runs out in state 1
    assert rows.tolist() == [[0, 2, 4], [0, 2, 5], [0, 2, 6], [0, 2, 7], [0, 1, 4]]
    rows = _allocate(torch.tensor([[1.0, 1.0], [0.0, 0.0]]), counts, 5)  # a tie: the earlier state first
    assert rows.tolist() == [[0, 1, 4], [0, 1, 5], [0, 1, 6], [0, 1, 7], [0, 2, 4]]
    rows = _allocate(torch.tensor([[0.0, 1.0], [1.0, 0.0]]), counts, 5)  # tied trajectories: the earlier first
    assert rows.tolist() == [[0, 2, k] for k in range(4, 8)] + [[1, 1, 4]]
    rows = _allocate(torch.tensor([[1.0, 0.0], [0.0, 3.0]]), torch.tensor([[4, 4], [2, 4]]), 100)
    assert rows.tolist() == [[1, 2, k] for k in range(4, 8)] + [[0, 1, k] for k in range(4, 8)]


def test_new_rows_grow_k_count_one_look_per_state_and_their_cost():
    from workbench.rl.credit import _with_rows

    credit = _credit()
    credit.cost = {"nfe": 10}
    rows = torch.tensor([[0, 2, 4], [0, 2, 5], [1, 1, 4]])
    grown = _with_rows(credit, rows, torch.tensor([0.5, 0.25, 1.0]))
    assert grown.counts.tolist() == [[4, 6], [5, 4]]
    assert grown.continuation_rewards[0, 1, 4:].tolist() == [0.5, 0.25]
    assert grown.continuation_rewards[1, 0, 4].item() == 1.0
    assert torch.isnan(grown.continuation_rewards[1, 1, 4:]).all()
    assert grown.looks.tolist() == [[0.0, 1.0], [1.0, 0.0]]  # two rows in one state and round: one look
    assert grown.cost["nfe"] == 10 + 1 + (3 - 1)  # from state s: T - s steps, the first shared by its rows


def test_refining_spends_exactly_the_budget_and_refuses_another_group():
    from workbench.rl.credit import refine_with

    credit = _credit()
    credit.continuation_rewards = torch.tensor([[[1.0, 0.0], [1.0, 0.0]], [[0.0, 1.0], [1.0, 0.0]]])  # M = 2: noisy
    draws = []

    def draw(rows, spent):
        draws.append((len(rows), spent))
        return torch.full((len(rows),), 0.5)
    rounds = list(refine_with(credit, draw, budget=1))
    assert draws == [(1, 0)] and len(rounds) == 1
    assert int((rounds[0].counts - credit.counts).sum()) == 1
    with pytest.raises(WorkbenchError, match="budget must be a positive number"):
        list(refine_with_group(credit, budget=0))
    with pytest.raises(WorkbenchError, match="the group the credit was measured on"):
        list(refine_with_group(credit, budget=4, group_size=3))


def refine_with_group(credit: Credit, budget: int, group_size: int = 2):
    """refine_rounds on a stand-in group of the given size (T = 3): only its checks run before a draw."""
    from workbench.rl.credit import refine_rounds

    group = type("Group", (), {"group_size": group_size, "num_steps": 3})()
    return refine_rounds(credit, None, group, None, budget)


def test_refinement_progress_counts_continuations_up_to_those_spent(random_policy):
    from workbench.flow.sampler import sample_group
    from workbench.flow.trajectory import SamplingConfig
    from workbench.rl.credit import measure_credit, refine_rounds

    group = sample_group(random_policy, "a red circle", SamplingConfig(group=2, steps=3))
    credit = measure_credit(random_policy, group, _brightness, continuations=2, chunks="1,2")
    calls = []
    one = list(refine_rounds(credit, random_policy, group, _brightness, 1))  # a budget of 1 is a budget
    assert len(one) == 1 and int((one[0].counts - credit.counts).sum()) == 1
    rounds = list(refine_rounds(credit, random_policy, group, _brightness, 6, progress=lambda *c: calls.append(c)))
    spent = int((rounds[-1].counts - credit.counts).sum())
    assert 0 < spent <= 6 and calls[-1] == (spent, 6)
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)  # never goes back


def test_a_look_ahead_credit_is_exact_so_every_nonzero_cell_is_determined():
    credit = _credit(start=torch.tensor([0.5, 0.5]), deterministic=True)
    # step credit [[0, .25, .25], [0, -.25, -.25]] with error 0 and infinite degrees of freedom
    assert credit.step_se.eq(0).all() and torch.isinf(credit._dof(credit._step_edges)).all()
    assert credit.step_classes().tolist() == [[0, 1, 1], [0, 1, 1]]  # d = 0 never; else d sign(A) > 0: aligned
    assert credit.chunk_classes().tolist() == [[0, 1], [0, 1]]


def test_misattributed_steps_by_hand():
    """A valid cell is misattributed when its credit's sign is opposite to its advantage's; a credit of exactly 0
    (tied continuations, step 0 here) is against nothing."""
    credit = _credit()  # credits [[0, .25, .25], [0, -.25, -.25]] with advantages +1, -1: all with A
    assert credit.step_valid.all() and not credit.misattributed_steps().any()
    flipped = Credit("p", torch.tensor([1.0, 0.0]), torch.tensor([-1.0, 1.0]), _credit().continuation_rewards,
                     [1, 2])
    assert flipped.misattributed_steps().tolist() == [[False, True, True], [False, True, True]]


def test_summary_names_every_figure_and_writes_missing_errors_as_null():
    """The summary is `workbench credit --json`'s output. Trajectory 0's state 2 has one continuation (the rest NaN),
    so its value 1.0 has no error: the credit of steps 1 and 2 has none either (null in JSON)."""
    nan = math.nan
    continuations = torch.tensor([[[1.0, 1.0, 0.0, 0.0], [1.0, nan, nan, nan]],
                                  [[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0]]])
    s = Credit("p", torch.tensor([1.0, 0.0]), torch.tensor([1.0, -1.0]), continuations, [1, 2]).summary()
    rates = [f"{unit}_{rate}{se}" for unit in ("step", "chunk") for rate in ("misattribution", "misattributed",
                                                                             "determined", "mass_against")
             for se in ("", "_se")]
    assert set(s) == {"prompt", "chunks", "estimator", "crn", "z", "precision", "false_call_rate",
                      "chunk_fixed_by_construction", "continuations_min", "continuations_max", "cost", "rewards",
                      "advantage", "values", "credit", "credit_se", "step_classes", "chunk_credit", "chunk_se",
                      "chunk_classes", *rates}
    assert (s["prompt"], s["chunks"], s["estimator"], s["crn"], s["z"], s["cost"]) == ("p", [1, 2], "mc", True, 2.0, {})
    assert (s["continuations_min"], s["continuations_max"]) == (1, 4)
    assert s["rewards"] == [1.0, 0.0] and s["advantage"] == [1.0, -1.0]
    # V(x_T) = mean reward 0.5, then the continuation means (0.5, 1.0 | 0.5, 0.25), then the rewards
    assert s["values"] == [[0.5, 0.5, 1.0, 1.0], [0.5, 0.5, 0.25, 0.0]]
    assert s["credit_se"][0][1:] == [None, None] and all(isinstance(v, float) for v in s["credit_se"][1])
    assert all(isinstance(v, float) for row in s["chunk_se"] for v in row)
