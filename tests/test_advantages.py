"""Advantage estimators (docs/methods.md "Advantages") on small hand-computed groups."""

from __future__ import annotations

import math
import re

import pytest
import torch

from workbench.core.errors import WorkbenchError
from workbench.rl.advantages import (
    ADVANTAGES,
    AdvantageSettings,
    dynamic_sampling_mask,
    gfpo_keep_mask,
    grpo,
    refill_batch,
)

EPS = 1e-4


def close(a: torch.Tensor, b, atol: float = 1e-6) -> bool:
    return torch.allclose(a.double(), torch.as_tensor(b, dtype=torch.float64), atol=atol)


def test_grpo_population_std_and_zero_variance_group():
    adv = ADVANTAGES.get("grpo")(torch.tensor([[1.0, 2.0, 3.0], [5.0, 5.0, 5.0]]))
    std = math.sqrt(2 / 3)  # population std of 1, 2, 3 (the unbiased one would be 1)
    assert close(adv.values[0], [-1 / (std + EPS), 0.0, 1 / (std + EPS)])
    assert adv.values[1].eq(0).all()
    assert close(adv.group_mean, [2.0, 5.0]) and close(adv.group_std, [std, 0.0])
    assert adv.zero_std.tolist() == [False, True]
    assert adv.kept.all() and adv.alpha == 1.0 and not adv.needs_resample
    assert adv.valid_fraction == pytest.approx(0.5)


def test_grpo_without_eps_gives_a_flat_group_zero_not_nan():
    for settings in (AdvantageSettings(eps=0.0), AdvantageSettings(eps=0.0, global_std=True)):
        adv = grpo(torch.tensor([[1.0, 3.0], [5.0, 5.0]]), settings)
        assert adv.values[1].eq(0).all() and torch.isfinite(adv.values).all()
    flat = grpo(torch.full((2, 3), 4.0), AdvantageSettings(eps=0.0, global_std=True))  # whole batch std 0
    assert flat.values.eq(0).all()
    for settings in (AdvantageSettings(eps=0.0, tol=0.0), AdvantageSettings(eps=0.0, tol=0.0, global_std=True)):
        adv = grpo(torch.tensor([[1.0, 3.0], [5.0, 5.0]]), settings)  # tol 0: the flat group is not flagged
        assert adv.values[1].eq(0).all() and torch.isfinite(adv.values).all(), settings


def test_grpo_clip_engages_at_five():
    rewards = torch.zeros(1, 30)
    rewards[0, 7] = 1.0  # mean 1/30, std sqrt(29)/30: the lone winner gets (29/30) / 0.1795 = 5.38
    adv = ADVANTAGES.get("grpo")(rewards)
    std = math.sqrt(29) / 30
    assert (29 / 30) / (std + EPS) > 5
    assert adv.values[0, 7].item() == pytest.approx(5.0)
    assert close(adv.values[0, :7], [-(1 / 30) / (std + EPS)] * 7)
    assert adv.clipped.sum().item() == 1
    assert adv.stats()["adv/clip_frac"] == pytest.approx(1 / 30)
    unclipped = ADVANTAGES.get("grpo")(rewards, AdvantageSettings(clip=None))
    assert unclipped.values[0, 7].item() == pytest.approx((29 / 30) / (std + EPS), rel=1e-5)


def test_grpo_global_std_uses_whole_batch():
    adv = ADVANTAGES.get("grpo")(torch.tensor([[0.0, 2.0], [0.0, 4.0]]), AdvantageSettings(global_std=True))
    std = math.sqrt(2.75)  # population std of 0, 2, 0, 4
    assert close(adv.values, [[-1 / (std + EPS), 1 / (std + EPS)], [-2 / (std + EPS), 2 / (std + EPS)]])
    per_group = ADVANTAGES.get("grpo")(torch.tensor([[0.0, 2.0], [0.0, 4.0]]))
    assert close(per_group.values, [[-1 / (1 + EPS), 1 / (1 + EPS)], [-2 / (2 + EPS), 2 / (2 + EPS)]])


def test_grpo_accepts_integer_rewards():
    adv = ADVANTAGES.get("grpo")(torch.tensor([[1, 0], [0, 0]]))
    assert adv.values.dtype == torch.float32
    assert close(adv.values, [[0.5 / (0.5 + EPS), -0.5 / (0.5 + EPS)], [0.0, 0.0]])


def test_dr_grpo_is_centered_reward():
    adv = ADVANTAGES.get("dr_grpo")(torch.tensor([[1.0, 2.0, 6.0], [3.0, 3.0, 3.0]]))
    assert close(adv.values, [[-2.0, -1.0, 3.0], [0.0, 0.0, 0.0]])
    assert adv.zero_std.tolist() == [False, True]
    assert not adv.clipped.any()


def test_gpg_alpha_rescales_by_valid_fraction():
    rewards = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0], [2.0, 0.0]])  # B = 8, M = 4
    adv = ADVANTAGES.get("gpg")(rewards)
    assert adv.alpha == pytest.approx(2.0)
    assert close(adv.values, [[1.0, -1.0], [0.0, 0.0], [0.0, 0.0], [2.0, -2.0]])
    assert adv.valid_fraction == pytest.approx(0.5)
    assert not adv.needs_resample  # 0.5 is not below the default threshold 0.5
    assert ADVANTAGES.get("gpg")(rewards, AdvantageSettings(gpg_threshold=0.6)).needs_resample


def test_gpg_without_flat_groups_has_alpha_one():
    adv = ADVANTAGES.get("gpg")(torch.tensor([[1.0, 3.0], [0.0, 1.0]]))
    assert adv.alpha == 1.0 and adv.valid_fraction == 1.0
    assert close(adv.values, [[-1.0, 1.0], [-0.5, 0.5]])


def test_gpg_all_flat_groups_do_not_divide_by_zero():
    adv = ADVANTAGES.get("gpg")(torch.ones(3, 4), AdvantageSettings(gpg_threshold=0.0))
    assert torch.isfinite(adv.values).all() and adv.values.eq(0).all()
    assert adv.needs_resample and adv.valid_fraction == 0.0 and math.isfinite(adv.alpha)


def test_gfpo_keeps_top_k_and_normalises_over_kept():
    rewards = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    adv = ADVANTAGES.get("gfpo")(rewards, AdvantageSettings(gfpo_keep=2), metric=torch.tensor([[4.0, 3.0, 2.0, 1.0]]))
    assert adv.kept.tolist() == [[True, True, False, False]]
    assert close(adv.group_mean, [1.5]) and close(adv.group_std, [0.5])
    assert close(adv.values, [[-0.5 / (0.5 + EPS), 0.5 / (0.5 + EPS), 0.0, 0.0]])
    stats = adv.stats()  # over the kept samples only
    assert stats["adv/mean"] == pytest.approx(0.0, abs=1e-6)
    assert stats["adv/abs_max"] == pytest.approx(0.5 / (0.5 + EPS))


def test_gfpo_default_keep_is_half_and_ties_go_to_lower_index():
    rewards = torch.tensor([[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]])
    adv = ADVANTAGES.get("gfpo")(rewards, metric=torch.zeros(1, 6))
    assert adv.kept.tolist() == [[True, True, True, False, False, False]]
    assert gfpo_keep_mask(torch.tensor([[1.0, 2.0, 2.0, 0.0]]), 2).tolist() == [[False, True, True, False]]


def test_gfpo_keeps_the_first_samples_of_a_long_tie():
    """The sort is stable: 40 equal metrics keep samples 0..4 (an unstable sort of 40 returns them out of order)."""
    assert gfpo_keep_mask(torch.zeros(2, 40), 5).nonzero()[:, 1].tolist() == [0, 1, 2, 3, 4] * 2


def test_gfpo_single_kept_sample_is_zero_variance():
    adv = ADVANTAGES.get("gfpo")(torch.tensor([[1.0, 9.0]]), AdvantageSettings(gfpo_keep=1),
                                 metric=torch.tensor([[0.0, 1.0]]))
    assert adv.zero_std.tolist() == [True] and adv.values.eq(0).all()


def test_gfpo_bad_options():
    rewards = torch.rand(2, 4)
    with pytest.raises(WorkbenchError, match="metric"):
        ADVANTAGES.get("gfpo")(rewards)
    for keep in (0, 5):
        with pytest.raises(WorkbenchError, match="keep must be an integer in 1..G=4"):
            ADVANTAGES.get("gfpo")(rewards, AdvantageSettings(gfpo_keep=keep), metric=torch.rand(2, 4))
    with pytest.raises(WorkbenchError, match=r"shape \(2, 4\)"):
        ADVANTAGES.get("gfpo")(rewards, metric=torch.rand(2, 3))


def test_stats_are_namespaced_and_correct():
    stats = ADVANTAGES.get("grpo")(torch.tensor([[1.0, 2.0, 3.0], [5.0, 5.0, 5.0]])).stats()
    assert {"adv/mean", "adv/std", "adv/abs_max", "adv/zero_std_frac", "adv/clip_frac"} <= set(stats)
    a = 1 / (math.sqrt(2 / 3) + EPS)
    assert stats["adv/mean"] == pytest.approx(0.0, abs=1e-6)
    assert stats["adv/std"] == pytest.approx(math.sqrt(2 * a * a / 6), rel=1e-5)
    assert stats["adv/abs_max"] == pytest.approx(a, rel=1e-5)
    assert stats["adv/zero_std_frac"] == pytest.approx(0.5)
    assert stats["adv/clip_frac"] == 0.0


def test_dynamic_sampling_mask_drops_flat_groups():
    rewards = torch.tensor([[1.0, 1.0], [0.0, 1.0], [2.0, 2.0 + 1e-9]])
    assert dynamic_sampling_mask(rewards).tolist() == [False, True, False]
    assert dynamic_sampling_mask(rewards, tol=0.0).tolist() == [True, True, True]


def test_dynamic_sampling_compares_the_population_std_with_tol():
    """Rewards (0, 1) have population std 0.5 and (0, 0.5) 0.25 (sample stds 0.71 and 0.35): tol 0.3 keeps the first."""
    assert dynamic_sampling_mask(torch.tensor([[0.0, 1.0], [0.0, 0.5]]), tol=0.3).tolist() == [True, False]
    with pytest.raises(WorkbenchError, match="^tol must be >= 0, got -0.1$"):
        dynamic_sampling_mask(torch.tensor([[0.0, 1.0]]), tol=-0.1)


def test_rewards_that_advantages_cannot_use_are_refused_with_what_to_change():
    cases = [([[1.0, 2.0]], "rewards must be a torch.Tensor of shape (N, G), got list"),
             (torch.rand(4), "rewards must be 2-D (N groups, G samples), got shape (4,); "
                             "reshape them to (num_prompts, group_size)"),
             (torch.tensor([[1.0, math.nan]]), "rewards contain NaN or inf; check the reward function's output")]
    for shape in ((0, 4), (3, 1)):  # no group, or groups of one sample
        cases.append((torch.zeros(shape), f"rewards of shape {shape} need at least 1 group of G >= 2 samples; "
                                          "group-relative advantages compare samples of the same prompt"))
    for rewards, message in cases:
        with pytest.raises(WorkbenchError, match=f"^{re.escape(message)}$"):
            ADVANTAGES.get("grpo")(rewards)


def test_advantages_keep_float64_rewards_in_float64():
    """Rewards are only converted when they are integers (to float32); float64 rewards are not rounded."""
    assert grpo(torch.tensor([[0.0, 1.0]], dtype=torch.float64)).values.dtype == torch.float64
    assert grpo(torch.tensor([[0, 1]])).values.dtype == torch.float32


def test_clipping_bounds_both_signs_and_leaves_a_value_at_the_bound():
    """dr_grpo's A = r - mean: rewards (0, 10) centre to (-5, 5), clipped to (-2, 2), both marked clipped;
    rewards (0, 4) centre to (-2, 2), exactly at the bound: kept and not marked."""
    dr_grpo = ADVANTAGES.get("dr_grpo")
    clip2 = AdvantageSettings(clip=2.0)
    wide = dr_grpo(torch.tensor([[0.0, 10.0]]), clip2)
    assert wide.values.tolist() == [[-2.0, 2.0]] and wide.clipped.tolist() == [[True, True]]
    at_bound = dr_grpo(torch.tensor([[0.0, 4.0]]), clip2)
    assert at_bound.values.tolist() == [[-2.0, 2.0]] and at_bound.clipped.tolist() == [[False, False]]
    unclipped = dr_grpo(torch.tensor([[0.0, 10.0]]), AdvantageSettings(clip=None))
    assert unclipped.values.tolist() == [[-5.0, 5.0]] and unclipped.values[unclipped.clipped].numel() == 0  # a mask


def test_refill_batch_dapo_fills_the_batch_with_groups_that_have_variance():
    # n = 3, round 0 = groups 0-2 (1 flat), round 1 = groups 3-5: DAPO needs all 3 with variance
    picks, done = refill_batch([False, True, False, True, False, False], n=3, need=3)
    assert picks == [0, 2, 4] and done  # the flat group 1 is replaced by round 1's first group with variance
    # not yet full after one round: the flat slot stays (it will not train) and the caller samples again
    assert refill_batch([False, True, False], n=3, need=3) == ([0, 1, 2], False)
    # round 1 all flat too: still not full, still round 0's groups
    assert refill_batch([False, True, False, True, True, True], n=3, need=3) == ([0, 1, 2], False)


def test_refill_batch_gpg_keeps_every_valid_group_and_fills_with_flat_ones():
    flat = [True, True, True, True, False, False, False, True]  # n = 4: round 0 all flat, round 1 three valid
    assert refill_batch(flat, n=4, need=2) == ([0, 4, 5, 6], True)  # all 3 valid groups, one flat filler
    assert refill_batch(flat, n=4, need=4) == ([0, 4, 5, 6], False)  # 3 found, one flat slot left
    # round 0 already meets the threshold: it is the batch, surplus groups with variance included
    assert refill_batch([False, False, True, False], n=2, need=1) == ([0, 1], True)


def test_refill_batch_gpg_the_issues_example():
    # n=4, need=2; round 0 [valid, flat, flat, flat], round 1 [valid x4]: four valid groups, alpha 1
    picks, done = refill_batch([False, True, True, True, False, False, False, False], n=4, need=2)
    assert picks == [0, 4, 5, 6] and done
    flat_in_batch = torch.tensor([[0.0, 1.0]] * 4)  # every picked group has variance
    assert ADVANTAGES.get("gpg")(flat_in_batch).alpha == 1.0


def test_estimators_share_one_signature_and_refuse_settings_they_do_not_use():
    rewards, metric = torch.tensor([[0.0, 1.0, 2.0, 4.0]]), torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    for name in ADVANTAGES.names():
        assert ADVANTAGES.get(name)(rewards, AdvantageSettings(), metric).values.shape == (1, 4)
    with pytest.raises(WorkbenchError, match="'dr_grpo' does not use global_std"):
        ADVANTAGES.get("dr_grpo")(rewards, AdvantageSettings(global_std=True))
    with pytest.raises(WorkbenchError, match="'grpo' does not use gpg_threshold"):
        ADVANTAGES.get("grpo")(rewards, AdvantageSettings(gpg_threshold=0.8))
    with pytest.raises(WorkbenchError, match="clip must be > 0"):
        AdvantageSettings(clip=0.0)


@pytest.mark.parametrize("flat, n, need", [([False], 2, 1), ([False, True], 2, 0), ([False, True], 2, 3)])
def test_refill_batch_rejects_impossible_requests(flat, n, need):
    with pytest.raises(WorkbenchError, match="refill_batch needs"):
        refill_batch(flat, n=n, need=need)


def test_tolerance_option_marks_near_flat_groups():
    rewards = torch.tensor([[1.0, 1.001], [0.0, 1.0]])
    assert ADVANTAGES.get("grpo")(rewards, AdvantageSettings(tol=0.01)).zero_std.tolist() == [True, False]
    assert ADVANTAGES.get("grpo")(rewards).zero_std.tolist() == [False, False]
    # "below tol" is strict: [0, 1] has population std 0.5 exactly, so tol = 0.5 leaves it varied
    assert ADVANTAGES.get("grpo")(rewards, AdvantageSettings(tol=0.5)).zero_std.tolist() == [True, False]


def test_grpo_unbiased_std_of_two_samples():
    # GCPO's torch std() on G = 2: [0, 1] has sample std sqrt(1 / 2); A = -+0.5 / (0.7071 + 1e-4)
    adv = grpo(torch.tensor([[0.0, 1.0]]), AdvantageSettings(unbiased_std=True))
    half = 0.5 / (math.sqrt(0.5) + EPS)
    assert close(adv.values, [[-half, half]]) and close(adv.group_std, [math.sqrt(0.5)])


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "gpg"])
@pytest.mark.parametrize("rewards, message", [
    (torch.tensor([1.0, 2.0]), "2-D"),
    (torch.tensor([[1.0], [2.0]]), "G >= 2"),
    (torch.tensor([[1.0, float("nan")]]), "NaN or inf"),
    (torch.tensor([[1.0, float("inf")]]), "NaN or inf"),
])
def test_bad_rewards_raise_clear_errors(name, rewards, message):
    with pytest.raises(WorkbenchError, match=message):
        ADVANTAGES.get(name)(rewards)


def test_unknown_estimator_lists_valid_names():
    with pytest.raises(WorkbenchError) as info:
        ADVANTAGES.get("ppo")
    for name in ("dr_grpo", "gfpo", "gpg", "grpo"):
        assert name in str(info.value)
    assert ADVANTAGES.names() == ["dr_grpo", "gfpo", "gpg", "grpo"]
