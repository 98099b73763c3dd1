"""Invariants of the policy objectives (docs/methods.md "Objectives"): equivalences, clipping, masks, weights, KL."""

from __future__ import annotations

import math
import re

import pytest
import torch

from workbench.core.errors import WorkbenchError
from workbench.flow.schedule import mixgrpo_window
from workbench.flow.sde import sde_step_with_logprob
from workbench.rl.objectives import (
    OBJECTIVES,
    ObjectiveSettings,
    PolicyInputs,
    gaussian_kl,
    noise_aware_weights,
    transition_kl,
)

B, T = 3, 6


def _batch(seed: int = 0, scale: float = 1e-3):
    """Small off-policy batch: (B, T) log-probs near the old ones, (B,) advantages of both signs."""
    g = torch.Generator().manual_seed(seed)
    old = torch.randn(B, T, generator=g, dtype=torch.float64)
    new = old + scale * torch.randn(B, T, generator=g, dtype=torch.float64)
    adv = torch.tensor([1.5, -0.7, 0.3], dtype=torch.float64)
    return new, old, adv


def _run(name: str, new: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, settings: ObjectiveSettings,
         **extra):
    """Loss output and the gradient of the loss w.r.t. the current log-probs."""
    lp = new.clone().requires_grad_(True)
    out = OBJECTIVES.get(name)(PolicyInputs(lp, old, adv, **extra), settings)
    out.loss.backward()
    return out, lp.grad


def test_chunk_size_one_equals_step_grpo():
    new, old, adv = _batch()
    mask = torch.rand(B, T, generator=torch.Generator().manual_seed(1)) > 0.3
    for extra in ({}, {"step_mask": mask}):
        s = ObjectiveSettings(clip_low=5e-4, chunks=[1] * T)
        step, g_step = _run("step_grpo", new, old, adv, s, **extra)
        chunk, g_chunk = _run("chunk_grpo", new, old, adv, s, **extra)
        assert step.clip_frac > 0  # the comparison covers clipped steps too
        assert torch.allclose(step.loss, chunk.loss, rtol=0, atol=1e-12)
        assert torch.allclose(g_step, g_chunk, rtol=0, atol=1e-12)
        assert step.clip_frac == chunk.clip_frac


def test_one_chunk_equals_gspo():
    new, old, adv = _batch()
    mask = torch.rand(B, T, generator=torch.Generator().manual_seed(2)) > 0.3
    s = ObjectiveSettings(clip_low=3e-4, clip_high=4e-4, chunks=[T])
    a, ga = _run("chunk_grpo", new, old, adv, s, step_mask=mask)
    b, gb = _run("gspo", new, old, adv, s, step_mask=mask)
    assert torch.allclose(a.loss, b.loss, rtol=0, atol=1e-12) and torch.allclose(ga, gb, rtol=0, atol=1e-12)


def test_chunk_ratio_is_geometric_mean_of_trained_steps():
    new, old, adv = _batch()
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[0, 1] = False
    out, _ = _run("chunk_grpo", new, old, adv, ObjectiveSettings(chunks=[2, 4]), step_mask=mask)
    l = new - old
    expected = torch.stack([l[:, :2].mean(1), l[:, 2:].mean(1)], dim=1).exp()  # (B, K)
    expected[0, 0] = l[0, 0].exp()  # step 1 is not trained in trajectory 0
    assert out.chunk_ratio_mean == pytest.approx(expected.mean(0).tolist(), abs=1e-12)
    assert out.chunk_ratio_std == pytest.approx(expected.std(0, unbiased=False).tolist(), abs=1e-12)


@pytest.mark.parametrize("name", ["step_grpo", "chunk_grpo", "gspo", "dapo", "gfpo", "dr_grpo"])
def test_on_policy_ratio_one(name):
    _, old, adv = _batch()
    out, grad = _run(name, old.clone(), old, adv, ObjectiveSettings(chunks=[2, 4]))
    assert out.clip_frac == 0 and out.approx_kl == 0 and out.ratio_mean == 1 and out.ratio_std == 0
    assert out.loss.item() == pytest.approx(-adv.mean().item(), abs=1e-12)
    assert grad.abs().sum() > 0
    assert set(out.stats()) >= {"loss/policy", "loss/kl", "loss/total", "policy/clip_frac", "policy/approx_kl",
                                "policy/ratio_mean", "chunk/ratio_std"}


def _single(log_ratio: float, adv: float, name: str = "step_grpo", **settings):
    """One trajectory, one step: the output and d loss / d log_prob."""
    new = torch.tensor([[log_ratio]], dtype=torch.float64)
    old = torch.zeros(1, 1, dtype=torch.float64)
    return _run(name, new, old, torch.tensor([adv], dtype=torch.float64), ObjectiveSettings(**settings))


def test_clipping_cases():
    eps = 0.1
    up, down = math.log(1.2), math.log(0.8)
    out, g = _single(up, 1.0, clip_low=eps)  # A > 0 and ratio > 1 + eps: clipped
    assert out.clip_frac == 1 and g.item() == 0 and out.loss.item() == pytest.approx(-1.1)
    out, g = _single(down, -1.0, clip_low=eps)  # A < 0 and ratio < 1 - eps: clipped
    assert out.clip_frac == 1 and g.item() == 0 and out.loss.item() == pytest.approx(0.9)
    out, g = _single(up, -1.0, clip_low=eps)  # the other side stays unclipped
    assert out.clip_frac == 0 and g.item() == pytest.approx(1.2)
    out, g = _single(down, 1.0, clip_low=eps)
    assert out.clip_frac == 0 and g.item() == pytest.approx(-0.8)


def test_dapo_clip_higher_engages_at_clip_high():
    up = math.log(1.2)
    out, g = _single(up, 1.0, "dapo", clip_low=0.1, clip_high=0.28)  # 1.2 < 1.28: not clipped
    assert out.clip_frac == 0 and g.item() == pytest.approx(-1.2)
    out, g = _single(math.log(1.3), 1.0, "dapo", clip_low=0.1, clip_high=0.28)
    assert out.clip_frac == 1 and g.item() == 0
    out, g = _single(math.log(0.8), -1.0, "dapo", clip_low=0.1, clip_high=0.28)  # low side stays at 1 - 0.1
    assert out.clip_frac == 1 and g.item() == 0
    out, g = _single(math.log(0.95), -1.0, "dapo", clip_low=0.1, clip_high=0.28)
    assert out.clip_frac == 0 and g.item() == pytest.approx(0.95)
    assert _single(up, 1.0, "dapo", clip_low=0.1)[0].clip_frac == 1  # clip_high None = clip_low


def test_clip_frac_counts_units():
    old = torch.zeros(2, 2, dtype=torch.float64)
    new = torch.tensor([[math.log(1.5), 0.0], [math.log(0.5), math.log(1.5)]], dtype=torch.float64)
    out, _ = _run("step_grpo", new, old, torch.tensor([1.0, -1.0], dtype=torch.float64),
                  ObjectiveSettings(clip_low=0.2))
    assert out.clip_frac == pytest.approx(2 / 4)  # (0, 0) high side A > 0, (1, 0) low side A < 0


def test_dapo_token_mean_differs_from_trajectory_mean():
    new, old, adv = _batch()
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[0, :4] = False
    s = ObjectiveSettings()
    step, _ = _run("step_grpo", old.clone(), old, adv, s, step_mask=mask)
    dapo, _ = _run("dapo", old.clone(), old, adv, s, step_mask=mask)
    n = mask.sum(1).double()  # on-policy per-step loss is -A_i
    assert dapo.loss.item() == pytest.approx(-(adv * n).sum().item() / n.sum().item(), abs=1e-12)
    assert step.loss.item() == pytest.approx(-adv.mean().item(), abs=1e-12)


def test_gpg_gradient_is_minus_advantage_over_steps():
    new, old, adv = _batch()
    out, grad = _run("gpg", new, old, adv, ObjectiveSettings())
    assert torch.allclose(grad, (-adv / (T * B)).unsqueeze(1).expand(B, T), atol=1e-12)
    assert out.clip_frac == 0 and out.ratio_mean != 1
    assert out.loss.item() == pytest.approx(-(new * adv[:, None]).mean().item(), abs=1e-12)


def test_dr_grpo_differs_only_by_normalisation():
    new, old, adv = _batch(scale=1e-5)
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[1, 2:] = False
    mask[2, :1] = False
    for i in range(B):  # one trajectory at a time: dr_grpo = step_grpo * n_i / T
        sl = slice(i, i + 1)
        step, g_step = _run("step_grpo", new[sl], old[sl], adv[sl], ObjectiveSettings(), step_mask=mask[sl])
        dr, g_dr = _run("dr_grpo", new[sl], old[sl], adv[sl], ObjectiveSettings(), step_mask=mask[sl])
        n = int(mask[i].sum())
        assert dr.loss.item() == pytest.approx(step.loss.item() * n / T, rel=1e-12)
        assert torch.allclose(g_dr, g_step * n / T, atol=1e-12)
    full_step, _ = _run("step_grpo", new, old, adv, ObjectiveSettings())
    full_dr, _ = _run("dr_grpo", new, old, adv, ObjectiveSettings())
    assert full_dr.loss.item() == pytest.approx(full_step.loss.item(), rel=1e-12)


@pytest.mark.parametrize("name", sorted(OBJECTIVES.names()))
def test_rows_left_out_by_dynamic_sampling_change_nothing(name):
    """A batch whose last two rows are masked out entirely (flat groups of DAPO's dynamic sampling) gives the
    loss and gradients of the batch without those rows, for every objective (Dr. GRPO used to divide by them)."""
    new, old, adv = _batch(scale=1e-5)
    settings = ObjectiveSettings(chunks=[2, 4])
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[-2:] = False
    out, grad = _run(name, new, old, adv, settings, step_mask=mask)
    kept, kept_grad = _run(name, new[:-2], old[:-2], adv[:-2], settings)
    assert out.loss.item() == pytest.approx(kept.loss.item(), rel=1e-9, abs=1e-12)
    assert torch.allclose(grad[:-2], kept_grad, atol=1e-12) and grad[-2:].eq(0).all()


@pytest.mark.parametrize("name", sorted(OBJECTIVES.names()))
def test_masked_steps_change_nothing(name):
    new, old, adv = _batch()
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[:, 0] = False
    mask[1, 4] = False
    s = ObjectiveSettings(chunks=[2, 4])
    a, ga = _run(name, new, old, adv, s, step_mask=mask)
    changed = new.clone()
    changed[~mask] += 5.0
    b, gb = _run(name, changed, old, adv, s, step_mask=mask)
    assert a.loss.item() == b.loss.item() and torch.equal(ga, gb)
    assert (ga[~mask] == 0).all() and (ga[mask] != 0).any()


def test_step_weights_normalised_and_applied():
    _, old, adv = _batch()
    w = torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0, 5.0], dtype=torch.float64)
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[:, 0] = False  # trained weights 1..5 have mean 3 -> normalised w / 3
    out, g = _run("step_grpo", old.clone(), old, adv, ObjectiveSettings(), step_mask=mask, step_weights=w)
    assert out.loss.item() == pytest.approx(-adv.mean().item(), abs=1e-12)  # mean weight 1 keeps the scale
    expected = -(adv[:, None] * (w / 3)[None, :]) / (5 * B)
    assert torch.allclose(g, expected, atol=1e-12)
    scaled, g_scaled = _run("step_grpo", old.clone(), old, adv, ObjectiveSettings(), step_mask=mask,
                            step_weights=10 * w)
    assert torch.allclose(g, g_scaled, atol=1e-12)
    _, g_chunk = _run("chunk_grpo", old.clone(), old, adv, ObjectiveSettings(chunks=[1] * T), step_mask=mask,
                      step_weights=w)
    assert torch.allclose(g, g_chunk, atol=1e-12)  # on-policy, chunk size 1 matches weighted step GRPO


def test_kl_term_added_over_trained_steps():
    new, old, adv = _batch()
    kl = torch.arange(B * T, dtype=torch.float64).reshape(B, T) / 10
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[:, -1] = False
    base, _ = _run("step_grpo", new, old, adv, ObjectiveSettings(), step_mask=mask)
    out, _ = _run("step_grpo", new, old, adv, ObjectiveSettings(kl_beta=0.04), step_mask=mask, kl=kl)
    assert out.kl_loss == pytest.approx(kl[mask].mean().item())
    assert out.loss.item() == pytest.approx(base.loss.item() + 0.04 * out.kl_loss, abs=1e-12)
    assert out.stats()["loss/total"] == pytest.approx(out.policy_loss + 0.04 * out.kl_loss)
    with pytest.raises(WorkbenchError, match="inputs.kl"):
        _run("step_grpo", new, old, adv, ObjectiveSettings(kl_beta=0.04))


def test_bad_names_settings_and_inputs():
    with pytest.raises(WorkbenchError, match="chunk_grpo.*gspo.*step_grpo"):
        OBJECTIVES.get("trpo")
    for bad in ({"clip_low": -1e-4}, {"clip_low": 1.0}, {"clip_high": -0.1}, {"chunks": [2, 0]},
                {"chunks": []}, {"kl_beta": -1.0}):
        with pytest.raises(WorkbenchError):
            ObjectiveSettings(**bad)
    new, old, adv = _batch()
    with pytest.raises(WorkbenchError, match="needs settings.chunks"):
        _run("chunk_grpo", new, old, adv, ObjectiveSettings())
    with pytest.raises(WorkbenchError, match="sum to 5"):
        _run("chunk_grpo", new, old, adv, ObjectiveSettings(chunks=[2, 3]))
    with pytest.raises(WorkbenchError, match="advantages"):
        PolicyInputs(new, old, adv[:2])
    with pytest.raises(WorkbenchError, match="trains no step"):
        _run("step_grpo", new, old, adv, ObjectiveSettings(), step_mask=torch.zeros(B, T, dtype=torch.bool))


def test_gaussian_kl_by_hand():
    mean = torch.zeros(2, 1, 2, 2)
    ref = torch.zeros(2, 1, 2, 2)
    ref[0, 0, 0, 0] = 2.0  # squared diffs 4, 0, 0, 0 -> mean 1
    ref[1] = 2.0  # mean squared diff 4: each row its own mean, not the batch's (2.5)
    std = torch.tensor([0.5, 2.0])
    assert torch.allclose(gaussian_kl(mean, ref, std), torch.tensor([1 / (2 * 0.25), 4 / (2 * 4.0)]))
    p, q = torch.distributions.Normal(0.3, 0.5), torch.distributions.Normal(-0.2, 0.5)
    one = gaussian_kl(torch.full((1, 1, 1, 1), 0.3), torch.full((1, 1, 1, 1), -0.2), torch.tensor([0.5]))
    assert one.item() == pytest.approx(torch.distributions.kl_divergence(p, q).item(), rel=1e-6)


def test_transition_kl_forms_on_a_fixed_case():
    """One flow_grpo step at t = 0.5 -> 0.4, a = 0.7: sigma_t = 0.7, std = 0.7 sqrt(0.1). The released code's
    form divides the squared mean difference by 2 sigma_t^2, the exact KL by 2 std^2 = 2 sigma_t^2 (-dt)."""
    x, v = torch.zeros(1, 1, 2, 2), torch.ones(1, 1, 2, 2)
    out = sde_step_with_logprob(x, v, torch.tensor([0.5]), torch.tensor([0.4]), 0.7, noise=torch.zeros_like(x))
    assert out.noise_scale.item() == pytest.approx(0.7, rel=1e-6)
    assert out.std.item() == pytest.approx(0.7 * math.sqrt(0.1), rel=1e-6)
    ref_mean = out.mean + 0.01  # squared mean difference 1e-4 on every element
    released = transition_kl(out.mean, ref_mean, out.std, out.noise_scale, "flow_grpo")
    exact = transition_kl(out.mean, ref_mean, out.std, out.noise_scale, "exact")
    assert released.item() == pytest.approx(1e-4 / (2 * 0.49), rel=1e-4)
    assert exact.item() == pytest.approx(1e-4 / (2 * 0.49 * 0.1), rel=1e-4)
    assert exact.item() == pytest.approx(released.item() / 0.1, rel=1e-4)  # the exact KL is larger by 1 / -dt
    assert torch.equal(transition_kl(out.mean, ref_mean, out.std, out.noise_scale), released)  # the default form
    with pytest.raises(WorkbenchError, match=r"^unknown KL form 'k3'; valid forms: flow_grpo, exact$"):
        transition_kl(out.mean, ref_mean, out.std, out.noise_scale, "k3")


def test_noise_aware_weights():
    stds = torch.tensor([0.0, 0.5, 1.0, 1.5])
    w = noise_aware_weights(stds)
    assert w[0] == 0 and w[1:].mean().item() == pytest.approx(1.0)
    assert torch.allclose(w[1:], stds[1:] / 1.0)  # proportional: mean of nonzero stds is 1.0
    with pytest.raises(WorkbenchError):
        noise_aware_weights(torch.zeros(3))


def test_noise_aware_weights_divide_by_the_mean_noisy_std():
    # stds 0, 1, 3: the noisy steps' mean std is (1 + 3) / 2 = 2, so the weights are 0, 1 / 2, 3 / 2
    assert noise_aware_weights(torch.tensor([0.0, 1.0, 3.0])).tolist() == [0.0, 0.5, 1.5]


def test_noise_aware_weights_refuse_negative_stds_and_say_what_to_pass():
    message = "step stds must be non-negative; pass sigma_t * sqrt(-dt) per step"
    with pytest.raises(WorkbenchError, match=f"^{re.escape(message)}$"):
        noise_aware_weights(torch.tensor([0.5, -0.1]))


def test_noise_aware_weights_refuse_a_pure_ode_schedule():
    message = "every step std is 0 (pure ODE); noise-aware weights need some SDE steps"
    with pytest.raises(WorkbenchError, match=f"^{re.escape(message)}$"):
        noise_aware_weights(torch.zeros(3))


def test_mixgrpo_window_slides_and_wraps():
    assert mixgrpo_window(0, 8) == (0, 4) and mixgrpo_window(24, 8) == (0, 4)
    assert mixgrpo_window(25, 8) == (1, 4) and mixgrpo_window(4 * 25, 8) == (4, 4)
    assert mixgrpo_window(5 * 25, 8) == (0, 4)  # wraps after the last position 8 - 4
    assert mixgrpo_window(7, 6, size=2, shift_every=3) == (2, 2)
