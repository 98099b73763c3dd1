"""Monte-Carlo credit (METHODS.md section 5)."""

import pytest
import torch

from workbench.core.errors import WorkbenchError
from workbench.flow.sampler import sample_group
from workbench.flow.trajectory import SamplingConfig
from workbench.rewards import build_reward
from workbench.rl.credit import Credit, continuation_rewards, measure_credit

PROMPT = "a large red circle in the top left on a white background"


def mean_red(images, prompts):
    """A cheap reward: mean of the red channel."""
    return images[:, 0].flatten(1).mean(1)


@pytest.fixture(scope="module")
def group(random_policy):
    return sample_group(random_policy, PROMPT, SamplingConfig(group=4, steps=5, seed=1))


def test_credits_telescope_to_the_raw_advantage(random_policy, group):
    credit = measure_credit(random_policy, group, mean_red, branches=3, chunks="2,3")
    assert credit.step_credit.shape == (4, 5) and credit.chunk_credit.shape == (4, 2)
    raw = credit.rewards - credit.rewards.mean()
    assert torch.allclose(credit.step_credit.sum(1), raw, atol=1e-6)
    assert torch.allclose(credit.chunk_credit.sum(1), raw, atol=1e-6)
    assert torch.allclose(credit.values[:, -1], mean_red(group.images, [PROMPT] * 4))


def test_continuations_restart_from_the_stored_state(random_policy, group):
    """With noise level 0 every continuation is the ODE from its state: K branches agree."""
    ode = SamplingConfig(group=2, steps=4, noise_level=0.0)
    g = sample_group(random_policy, PROMPT, ode)
    branch = continuation_rewards(random_policy, g, mean_red, branches=3)
    final = mean_red(g.images, [PROMPT] * 2)
    assert torch.allclose(branch, final[:, None, None].expand(2, 3, 3), atol=1e-5)


def test_branches_differ_under_the_sde(random_policy, group):
    branch = continuation_rewards(random_policy, group, mean_red, branches=3, seed=0)
    assert branch.shape == (4, 4, 3) and branch.std(-1).mean() > 0
    assert torch.equal(branch, continuation_rewards(random_policy, group, mean_red, branches=3, seed=0))


def test_misattribution_by_hand():
    rewards = torch.tensor([1.0, 0.0])  # mean 0.5, A = [+, -]
    # values: [0.5, v1, v2, r]; trajectory 0: 0.5 -> 0.2 -> 0.9 -> 1.0 (first step misattributed)
    branch = torch.tensor([[[0.2, 0.2], [0.9, 0.9]], [[0.3, 0.3], [0.6, 0.6]]])  # (G=2, T-1=2, K=2)
    c = Credit("p", rewards, torch.tensor([1.0, -1.0]), branch, [1, 2])
    assert torch.allclose(c.step_credit, torch.tensor([[-0.3, 0.7, 0.1], [-0.2, 0.3, -0.6]]))
    assert c.misattributed_steps().tolist() == [[True, False, False], [False, True, False]]
    m = c.misattribution()
    assert m["step_misattribution"] == pytest.approx(2 / 6)
    # chunks [1, 2]: traj 0: -0.3 | 0.8 ; traj 1: -0.2 | -0.3  -> one misattributed chunk of four
    assert m["chunk_misattribution"] == pytest.approx(1 / 4)
    assert m["step_misattribution_se"] == pytest.approx(0.0, abs=1e-6)  # identical branches: no MC noise


def test_rechunk_reuses_the_samples(random_policy, group):
    credit = measure_credit(random_policy, group, mean_red, branches=2, chunks="5")
    other = credit.rechunk("1,1,1,1,1")
    assert torch.equal(other.branch_rewards, credit.branch_rewards)
    m1, m5 = other.misattribution(), credit.misattribution()
    assert m1["chunk_misattribution"] == pytest.approx(m1["step_misattribution"])  # chunk size 1 == steps
    assert m5["step_misattribution"] == m1["step_misattribution"]
    with pytest.raises(WorkbenchError, match="sum"):
        credit.rechunk("2,2")


def test_standard_error_shrinks_with_more_branches():
    gen = torch.Generator().manual_seed(0)
    rewards = torch.tensor([1.0, 0.0, 0.6, 0.2])
    a = torch.tensor([1.0, -1.0, 1.0, -1.0])
    trend = torch.stack([torch.linspace(0.45, 0.95, 6), torch.linspace(0.35, 0.05, 6),
                         torch.linspace(0.45, 0.55, 6), torch.linspace(0.4, 0.25, 6)])  # (G, T - 1) true values
    se = []
    for k in (4, 400):
        branch = trend[..., None] + 0.2 * torch.randn(4, 6, k, generator=gen)
        se.append(Credit("p", rewards, a, branch, [7]).misattribution()["step_misattribution_se"])
    assert se[1] < se[0]


def test_measure_credit_with_a_registered_reward(random_policy, group):
    credit = measure_credit(random_policy, group, build_reward("adherence"), branches=2, chunks="2,3")
    s = credit.summary()
    assert len(s["credit"]) == 4 and len(s["credit"][0]) == 5 and len(s["chunk_credit"][0]) == 2
    assert 0 <= s["step_misattribution"] <= 1 and s["step_misattribution_se"] >= 0


def test_bad_inputs(random_policy, group):
    with pytest.raises(WorkbenchError, match="branches"):
        measure_credit(random_policy, group, mean_red, branches=0)
    with pytest.raises(WorkbenchError, match="sum"):
        measure_credit(random_policy, group, mean_red, chunks="2,2")
