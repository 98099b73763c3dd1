"""The state-value estimators against what they must give by construction: an ODE group continued by the ODE
is its own trajectory, costs by hand, and progress over steps and slices (docs/methods.md "Credit")."""

from __future__ import annotations

import time

import pytest
import torch

from workbench.flow.sampler import sample_group
from workbench.flow.trajectory import SamplingConfig
from workbench.rl.credit_estimators import (
    ESTIMATORS,
    continuation_cost,
    distinct_states,
    grid_rows,
    run_continuations,
)

PROMPT = "a red circle"


def brightness(images, prompts):
    return images.float().mean(dim=(1, 2, 3))


def test_the_ode_continued_by_the_ode_is_its_own_trajectory(random_policy):
    """With noise level 0 every state of a group lies on one deterministic path: its value is the final reward."""
    for guidance in (1.0, 2.0):
        config = SamplingConfig(group=2, steps=3, noise_level=0.0, guidance_scale=guidance)
        group = sample_group(random_policy, PROMPT, config)
        final = brightness(group.images, None)  # (G,)
        for name in ("ode", "mc"):
            before = time.perf_counter()
            est = ESTIMATORS.get(name)(random_policy, group, brightness, continuations=2)
            assert 0 < est.seconds <= time.perf_counter() - before
            got = est.continuation_rewards
            assert torch.allclose(got, final[:, None, None].expand_as(got), atol=1e-5)
        before = time.perf_counter()
        ode = ESTIMATORS.get("ode")(random_policy, group, brightness)
        assert torch.allclose(ode.start, final, atol=1e-5) and ode.deterministic
        assert 0 < ode.seconds <= time.perf_counter() - before  # the wall time it took, not a target


def test_the_ode_estimator_reports_its_steps_and_evaluates_in_the_precision_asked(random_policy):
    group = sample_group(random_policy, PROMPT, SamplingConfig(group=2, steps=3, noise_level=0.0))
    calls = []
    ode = ESTIMATORS.get("ode")(random_policy, group, brightness, progress=lambda *c: calls.append(c))
    assert calls == [(1, 3), (2, 3), (3, 3)]
    rounded = ESTIMATORS.get("ode")(random_policy, group, brightness, precision="bfloat16").continuation_rewards
    assert not torch.equal(rounded, ode.continuation_rewards)  # bfloat16 weights and activations round differently
    assert torch.allclose(rounded, ode.continuation_rewards, atol=1e-3)


def test_continuation_cost_by_hand():
    rows = grid_rows(2, range(1, 4), range(2))  # G = 2, states 1..3, K = 2: 12 rows
    assert rows.shape == (12, 3) and rows[:3].tolist() == [[0, 1, 0], [0, 1, 1], [0, 2, 0]]
    # a row from state s runs T - s steps, the K rows of one state share the steps up to their first noisy one
    assert continuation_cost(rows, 4) == 2 * ((1 + 2 * 2) + (1 + 2 * 1) + 1)  # every step noisy: the first shared
    assert continuation_cost(rows, 4, torch.tensor([False, False, True, False])) == 2 * ((2 + 2) + (1 + 2) + 1)
    assert continuation_cost(rows, 4, torch.zeros(4, dtype=torch.bool)) == 2 * (3 + 2 + 1)  # the ODE: all shared
    assert continuation_cost(rows[::2], 4) == 2 * (3 + 2 + 1)  # K = 1: nothing to share
    group = sample_group_stub()
    assert ESTIMATORS.get("x0")(Identity(), group, brightness_of_latents).nfe == 0  # reuses the sampler's passes


def test_progress_counts_steps_and_slices(random_policy):
    group = sample_group(random_policy, PROMPT, SamplingConfig(group=2, steps=3))
    rows = grid_rows(2, range(1, 3), range(2))  # 8 rows from states 1 and 2
    whole, calls = [], []
    out = run_continuations(random_policy, group, brightness, rows, progress=lambda *c: whole.append(c))
    assert whole == [(1, 2), (2, 2)]  # one call per step from state 1 on
    sliced = run_continuations(random_policy, group, brightness, rows, progress=lambda *c: calls.append(c), max_rows=3)
    # step 1 evaluates the 2 states the 4 rows from state 1 hold (one slice of 3); step 2 the 4 rows from state 1,
    # which the noise of step 1 told apart, and the 2 states of the rows from state 2: 6 in 2 slices
    assert calls == [(1, 2), (1, 2), (2, 2)]
    assert torch.allclose(out, sliced, atol=1e-5)
    assert torch.allclose(run_continuations(random_policy, group, brightness, rows, max_rows=3), out, atol=1e-5)


def test_distinct_states_by_hand():
    reps, inverse = distinct_states(torch.tensor([5, 7, 5, -1, 7]))
    assert reps.tolist() == [3, 0, 1] and inverse.tolist() == [1, 2, 1, 0, 2]  # labels -1, 5, 7: first rows 3, 0, 1


@pytest.mark.parametrize("window", [None, (2, 3)])
def test_rows_from_one_state_share_evaluations_until_noise_tells_them_apart(random_policy, monkeypatch, window):
    """The continuations of one state run together give what each gives alone, for the evaluations counted."""
    config = SamplingConfig(group=2, steps=4, window=window)
    group = sample_group(random_policy, PROMPT, config)
    rows = grid_rows(2, range(1, 4), range(3))  # G = 2, states 1..3, K = 3: 18 rows
    together = run_continuations(random_policy, group, brightness, rows, seed=3)
    alone = torch.cat([run_continuations(random_policy, group, brightness, row[None], seed=3) for row in rows])
    assert torch.allclose(together, alone, atol=1e-5)
    # every step noisy: each continuation its own; only step 2 noisy: from state 1 the ODE step 1 reaches the group's
    # state 2, so continuation k from state 1 is continuation k from state 2 (CRN), and from state 3 all are one
    assert together.unique().numel() == {None: 18, (2, 3): 2 * (3 + 1)}[window]
    evaluated = []
    denoise = random_policy.denoise
    monkeypatch.setattr(random_policy, "denoise", lambda x, *rest: evaluated.append(len(x)) or denoise(x, *rest))
    run_continuations(random_policy, group, brightness, rows, seed=3)
    shared = {None: 2 * ((1 + 3 * 2) + (1 + 3 * 1) + 1), (2, 3): 2 * ((2 + 3 * 1) + (1 + 3 * 1) + 1)}[window]
    assert sum(evaluated) == continuation_cost(rows, 4, config.sde_mask()) == shared
    assert shared < 2 * 3 * (3 + 2 + 1)  # what the rows would cost one by one


def sample_group_stub():
    """A group whose x0 predictions are known: trajectory i, state s holds the value 10 i + s."""
    from workbench.flow.trajectory import TrajectoryGroup

    x0 = torch.tensor([[10.0 * i + s for s in range(3)] for i in range(2)]).view(2, 3, 1, 1, 1)
    zeros = torch.zeros(2, 3)
    return TrajectoryGroup("p", SamplingConfig(group=2, steps=3), torch.linspace(1, 0, 4), torch.zeros(2, 4, 1, 1, 1),
                           x0, x0, zeros, zeros, torch.zeros(2, 3, 1, 1))


def brightness_of_latents(images, prompts):
    return images.flatten(1).mean(dim=1)


class Identity:
    """decode = identity, so the x0 estimator rewards the stored x0 predictions themselves."""

    device = "cpu"

    @staticmethod
    def decode(latents):
        return latents


def test_x0_values_are_the_rewards_of_the_stored_predictions():
    calls = []
    est = ESTIMATORS.get("x0")(Identity(), sample_group_stub(), brightness_of_latents,
                               progress=lambda *c: calls.append(c))
    assert est.start.tolist() == [0.0, 10.0]  # state 0 of each trajectory
    assert est.continuation_rewards[..., 0].tolist() == [[1.0, 2.0], [11.0, 12.0]] and est.deterministic
    assert calls == [(1, 1)]


def test_every_continuation_and_step_draws_its_own_noise_seed():
    from workbench.rl.credit_estimators import noise_seed

    crn = {noise_seed(7, i, k, u, None) for i in range(4) for k in range(16) for u in range(16)}
    independent = {noise_seed(7, i, k, u, s) for i in range(4) for k in range(8) for u in range(8)
                   for s in range(u + 1)}  # s: the state the continuation starts from
    assert len(crn) == 4 * 16 * 16 and len(independent) == 4 * 8 * 36
    assert all(0 <= seed < 2**63 for seed in crn | independent)  # what torch.Generator.manual_seed takes
