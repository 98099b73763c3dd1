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
    branches = torch.tensor([[[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]],
                             [[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0]]])  # (G, T - 1, K)
    return Credit("p", torch.tensor([1.0, 0.0]), torch.tensor([1.0, -1.0]), branches, [1, 2], **kwargs)


def test_values_and_credit_by_hand():
    credit = _credit()
    # V(x_T) = group mean 0.5; then the continuation means; then the rewards
    assert torch.allclose(credit.values, torch.tensor([[0.5, 0.5, 0.75, 1.0], [0.5, 0.5, 0.25, 0.0]]))
    assert torch.allclose(credit.step_credit, torch.tensor([[0.0, 0.25, 0.25], [0.0, -0.25, -0.25]]))
    assert torch.allclose(credit.chunk_credit, torch.tensor([[0.0, 0.5], [0.0, -0.5]]))
    assert credit.num_steps == 3 and credit.counts.tolist() == [[4, 4], [4, 4]]
    own = _credit(start_branches=torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]]))
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
    own = _credit(start_branches=torch.ones(2, 4)).rechunk([3])
    assert own.chunk_fixed.tolist() == [[False], [False]]  # its own x_T: not the group mean


def test_looks_count_the_rounds_that_grew_either_end():
    credit = _credit(looks=torch.tensor([[1.0, 0.0], [0.0, 2.0]]))
    # grown per state 0..3: [0, 1, 0, 0] and [0, 0, 2, 0]; a step j is looked at 1 + grown[j] + grown[j + 1]
    assert credit._looks(credit._step_edges).tolist() == [[2.0, 2.0, 1.0], [1.0, 3.0, 3.0]]
    assert credit._looks(credit._chunk_edges).tolist() == [[2.0, 2.0], [1.0, 1.0]]  # edges 0, 1, 3: both share 1
    assert _credit()._looks([0, 1, 3]).tolist() == [[1.0, 1.0], [1.0, 1.0]]


def test_halves_split_the_continuations_in_two():
    first, second = _credit(start_branches=torch.tensor([[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0]])).halves()
    assert first.branch_rewards[0, 0].tolist() == [1.0, 1.0] and second.branch_rewards[0, 0].tolist() == [0.0, 0.0]
    assert first.start_branches.tolist() == [[1.0, 0.0], [0.0, 0.0]]
    assert second.start_branches.tolist() == [[1.0, 1.0], [0.0, 1.0]]
    assert first.looks is None and second.looks is None
    assert _credit(deterministic=True).halves() is None
    three = _credit()
    three.branch_rewards = three.branch_rewards[..., :3]
    assert three.halves() is None  # K = 3 < 4
    uneven = _credit()
    uneven.branch_rewards = uneven.branch_rewards.clone()
    uneven.branch_rewards[1, 1, 3] = NAN  # one state has K = 3 after refinement
    assert uneven.halves() is None
    five = _credit()
    five.branch_rewards = torch.cat([five.branch_rewards, torch.ones(2, 2, 1)], dim=2)
    assert [h.branch_rewards.shape[-1] for h in five.halves()] == [2, 2]  # K = 5: 2 and 2, one left over


def _brightness(images, prompts):
    return images.float().mean(dim=(1, 2, 3))


def test_one_continuation_per_state_is_allowed_and_four_is_the_default(random_policy):
    from workbench.flow.sampler import sample_group
    from workbench.flow.trajectory import SamplingConfig
    from workbench.rl.credit import continuation_rewards, measure_credit

    group = sample_group(random_policy, "a red circle", SamplingConfig(group=2, steps=3))
    one = measure_credit(random_policy, group, _brightness, branches=1, chunks="1,2")
    assert one.counts.tolist() == [[1, 1], [1, 1]] and torch.isnan(one.step_se[:, 1:]).all()  # K = 1: no error
    assert continuation_rewards(random_policy, group, _brightness).shape == (2, 2, 4)
    two = sample_group(random_policy, "a red circle", SamplingConfig(group=2, steps=2))  # one state between
    assert measure_credit(random_policy, two, _brightness, branches=2, chunks="1,1").step_credit.shape == (2, 2)
    with pytest.raises(WorkbenchError, match="at least 2 steps"):
        measure_credit(random_policy, sample_group(random_policy, "a red circle", SamplingConfig(group=2, steps=1)),
                       _brightness, chunks="1")
