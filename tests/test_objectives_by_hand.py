"""Objectives on batches small enough to compute by hand, and the edges of their settings' ranges
(docs/methods.md "Objectives")."""

from __future__ import annotations

import pytest
import torch

from workbench.core.errors import WorkbenchError
from workbench.rl.objectives import OBJECTIVES, ObjectiveSettings, PolicyInputs


def test_clip_ranges_include_zero_and_exclude_one():
    assert ObjectiveSettings(clip_low=0.0).eps_high == 0.0  # 0: every moved ratio is clipped
    assert ObjectiveSettings(clip_low=0.2, clip_high=0.0).eps_high == 0.0
    assert ObjectiveSettings(clip_low=0.2).eps_high == 0.2  # no clip_high: symmetric
    for bad in (1.0, -1e-9):
        with pytest.raises(WorkbenchError, match="clip_low must be in"):
            ObjectiveSettings(clip_low=bad)
    with pytest.raises(WorkbenchError, match="clip_high must be >= 0"):
        ObjectiveSettings(clip_high=-0.1)
    assert ObjectiveSettings(kl_beta=0.0).kl_beta == 0.0
    with pytest.raises(WorkbenchError, match="kl_beta must be >= 0"):
        ObjectiveSettings(kl_beta=-0.01)
    for bad in ([], [2, 0], [1.5, 2]):
        with pytest.raises(WorkbenchError, match="chunks must be a non-empty list"):
            ObjectiveSettings(chunks=bad)


def test_gpg_loss_with_step_weights_by_hand():
    # weights [1, 3] over 4 trained cells sum to 8: normalised to mean 1 they are [0.5, 1.5]
    # per step -log p A w: trajectory 0 (A = 1): 1 x 0.5, 2 x 1.5 -> mean 1.75; trajectory 1 (A = -1):
    # -3 x 0.5, -4 x 1.5 -> mean -3.75; the loss is their mean, -1
    log_prob = torch.tensor([[-1.0, -2.0], [-3.0, -4.0]], requires_grad=True)
    inputs = PolicyInputs(log_prob, log_prob.detach(), torch.tensor([1.0, -1.0]), step_weights=torch.tensor([1.0, 3.0]))
    out = OBJECTIVES.get("gpg")(inputs, ObjectiveSettings())
    assert out.loss.item() == pytest.approx(-1.0)
    out.loss.backward()  # d loss / d log p = -A w / (T B)
    assert torch.allclose(log_prob.grad, torch.tensor([[-0.125, -0.375], [0.125, 0.375]]))


def test_mixgrpo_window_slides_and_wraps_by_hand():
    from workbench.flow.schedule import mixgrpo_window

    # T = 6, size 4: start = (iteration // shift_every) % (6 - 4 + 1)
    assert [mixgrpo_window(i, 6, 4, 2)[0] for i in range(8)] == [0, 0, 1, 1, 2, 2, 0, 0]
    assert mixgrpo_window(0, 4, size=1, shift_every=1) == (0, 1) and mixgrpo_window(3, 4, 1, 1) == (3, 1)
    assert mixgrpo_window(7, 4, size=4) == (0, 4)  # the window is every step: it cannot move
    for bad in ({"size": 0}, {"size": 5}, {"shift_every": 0}, {"iteration": -1}):
        args = {"iteration": 0, "num_steps": 4, "size": 2, "shift_every": 1, **bad}
        with pytest.raises(WorkbenchError, match="need 1 <= size <= num_steps"):
            mixgrpo_window(**args)


def test_explained_shares_are_each_cells_part_of_the_objectives_push():
    from workbench.rl.explain import explain

    old = torch.tensor([[-1.0, -2.0], [-3.0, -4.0]])
    ex = explain(old.clone(), old, torch.tensor([1.0, -0.5]), ObjectiveSettings(), objectives=["step_grpo", "gpg"])
    for o in range(2):
        weight = ex.weight[o].abs()
        assert torch.allclose(ex.share[o], weight / weight.sum()) and ex.share[o].sum().item() == pytest.approx(1.0)


def test_moved_log_probs_name_the_update_after_which_they_diverged(random_policy):
    from workbench.flow.sampler import sample_group
    from workbench.flow.trajectory import SamplingConfig
    from workbench.rl.explain import moved_log_probs

    group = sample_group(random_policy, "a red circle", SamplingConfig(group=2, steps=2))
    group.states[:, 1] = float("nan")  # no update can score these transitions
    with pytest.raises(WorkbenchError, match=r"after 0 update\(s\) at learning rate 0.001"):
        moved_log_probs(random_policy, group, torch.tensor([1.0, -1.0]), updates=2, lr=1e-3)
    with pytest.raises(WorkbenchError, match="lr > 0"):  # a learning rate of 0 moves nothing: it is refused
        moved_log_probs(random_policy, group, torch.tensor([1.0, -1.0]), updates=1, lr=0.0)


def test_push_credit_correlation_by_hand():
    """Pearson's r from Python's statistics module over the trained cells, not the code's own centring."""
    import statistics

    from workbench.rl.explain import explain

    old = torch.tensor([[-1.0, -2.0, -1.5], [-3.0, -4.0, -0.5]])
    mask = torch.tensor([[True, True, False], [True, True, True]])
    ex = explain(old.clone(), old, torch.tensor([1.0, -0.5]), ObjectiveSettings(), ["gpg"], step_mask=mask)
    credit = torch.tensor([[0.3, 0.1, 9.0], [-0.2, 0.4, 0.0]])  # the untrained cell's 9.0 must not count
    push = (-ex.weight[0][mask]).tolist()
    expected = statistics.correlation(push, credit[mask].tolist())
    assert ex.correlation(credit)[0].item() == pytest.approx(expected, abs=1e-6)
    assert torch.isnan(ex.correlation(torch.ones(2, 3)))[0]  # a constant credit map: undefined


def test_gspo_sequence_ratio_is_the_geometric_mean_over_the_trained_steps():
    """GSPO (arXiv 2507.18071, eq. 7): s_i = (pi_theta / pi_old)^(1 / |y_i|), the log-ratio averaged over the
    trajectory's trained steps, not summed. Trajectory 0: log-ratios 0.1, 0.2, 0.3 -> s = exp(0.2); trajectory
    1 trains steps 0 and 2 only (l = 0.1, 0.3; step 1's 5.0 is not trained) -> s = exp(0.2) as well, where a
    sum would give exp(0.6) and exp(0.4). Clip range 0.5: nothing clipped. Loss -mean_i A_i s_i with A = (1, 2);
    d loss / d log p_t = -A_i s_i / (B T_i) on trained steps (the registry's formula), 0 elsewhere."""
    old = torch.zeros(2, 3)
    log_prob = torch.tensor([[0.1, 0.2, 0.3], [0.1, 5.0, 0.3]], requires_grad=True)
    mask = torch.tensor([[True, True, True], [True, False, True]])
    inputs = PolicyInputs(log_prob, old, torch.tensor([1.0, 2.0]), step_mask=mask)
    out = OBJECTIVES.get("gspo")(inputs, ObjectiveSettings(clip_low=0.5))
    s = torch.exp(torch.tensor(0.2))
    assert torch.allclose(out.step_ratio, torch.tensor([[s, s, s], [s, 1.0, s]]))
    assert out.loss.item() == pytest.approx(float(-(1 * s + 2 * s) / 2), rel=1e-6)
    out.loss.backward()
    expected = torch.tensor([[-1 * s / (2 * 3)] * 3, [-2 * s / (2 * 2), 0.0, -2 * s / (2 * 2)]])
    assert torch.allclose(log_prob.grad, expected, atol=1e-7)
