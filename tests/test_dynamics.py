"""Relative-change curves (GCPO's L1_rel) against values computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from workbench.core.errors import WorkbenchError
from workbench.flow.dynamics import DynamicsCurve, dynamics_curve, relative_change
from workbench.flow.sampler import sample_group
from workbench.flow.trajectory import SamplingConfig


def test_l1_and_l2_relative_change_differ_as_the_norms_do():
    # x_t = (3, 4), x_next = (3, 0): the step is (0, 4).
    # l1: |0| + |4| over |3| + |4| = 4 / 7; l2: 4 over sqrt(9 + 16) = 4 / 5; cosine: 1 - 9 / (5 * 3) = 0.4.
    states = torch.tensor([[[3.0, 4.0], [3.0, 0.0]]])  # (G=1, T+1=2, D=2)
    assert torch.allclose(relative_change(states, "l1"), torch.tensor([[4 / 7]]))
    assert torch.allclose(relative_change(states, "l2"), torch.tensor([[0.8]]))
    assert torch.allclose(relative_change(states, "cosine"), torch.tensor([[0.4]]))
    with pytest.raises(WorkbenchError, match="^unknown dynamics metric 'l3'; valid metrics: l1, l2, cosine$"):
        relative_change(states, "l3")


def test_a_zero_state_is_divided_by_a_tiny_floor_not_by_zero():
    states = torch.tensor([[[0.0, 0.0], [1e-13, 0.0]]])  # ||x_t|| = 0: the floor 1e-12 stands in
    out = relative_change(states, "l1")
    assert torch.isfinite(out).all() and math.isclose(out.item(), 0.1, rel_tol=1e-5)


def test_curve_statistics_over_trajectories_by_hand():
    rows = torch.tensor([[1.0, 0.0], [3.0, 4.0]])  # (N=2, T=2)
    curve = DynamicsCurve("l1", rows, torch.linspace(1, 0, 3))
    assert torch.allclose(curve.mean, torch.tensor([2.0, 2.0]))
    assert torch.allclose(curve.std, torch.tensor([1.0, 2.0]))  # population std: divide by N
    # linear interpolation between the two rows: 10th percentile = low + 0.1 (high - low)
    assert torch.allclose(curve.quantiles, torch.tensor([[1.2, 0.4], [2.8, 3.6]]))


def test_batching_prompts_changes_nothing_and_progress_counts_prompts(random_policy):
    prompts, config, calls = ["a red circle", "a blue ring", "a green circle"], SamplingConfig(group=2, steps=3), []
    whole = dynamics_curve(random_policy, prompts, config)
    split = dynamics_curve(random_policy, prompts, config, batch=2, progress=lambda *done: calls.append(done))
    assert calls == [(2, 3), (3, 3)]
    assert torch.allclose(whole.per_trajectory, split.per_trajectory, atol=1e-5)
    assert whole.per_trajectory.shape == (6, 3) and torch.equal(whole.sigmas, split.sigmas)


def test_one_prompt_gives_its_group_and_the_schedule(random_policy):
    config = SamplingConfig(group=2, steps=3)
    curve = dynamics_curve(random_policy, ["a red circle"], config)
    assert curve.per_trajectory.shape == (2, 3) and curve.sigmas.shape == (4,)
    assert curve.sigmas[0] == 1 and curve.sigmas[-1] == 0


def test_the_curve_is_of_the_metric_asked_for(random_policy):
    """The first prompt's trajectories are sample_group's (group seed config.seed): its rows are their cosine change."""
    config = SamplingConfig(group=2, steps=3, seed=4)
    curve = dynamics_curve(random_policy, ["a red circle", "a blue ring"], config, metric="cosine")
    group = sample_group(random_policy, "a red circle", config)
    assert curve.metric == "cosine"
    assert torch.allclose(curve.per_trajectory[:2], relative_change(group.states, "cosine"), atol=1e-6)
    assert not torch.allclose(curve.per_trajectory[:2], relative_change(group.states, "l1"), atol=1e-3)


def test_prompts_are_sampled_16_at_a_time_by_default(random_policy):
    calls = []
    dynamics_curve(random_policy, ["a red circle"] * 17, SamplingConfig(group=1, steps=2),
                   progress=lambda *done: calls.append(done))
    assert calls == [(16, 17), (17, 17)]


def test_no_prompt_is_refused():
    with pytest.raises(WorkbenchError, match="^dynamics_curve needs at least one prompt$"):
        dynamics_curve(None, [], SamplingConfig(group=2, steps=3))
