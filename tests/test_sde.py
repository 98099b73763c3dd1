"""Invariants of the SDE step (docs/methods.md "SDE step")."""

import math

import pytest
import torch
from diffusers import FlowMatchEulerDiscreteScheduler

from workbench.core.errors import WorkbenchError
from workbench.flow.sampler import schedule_coefficients, step_from_velocity
from workbench.flow.schedule import sd3_sigmas
from workbench.flow.sde import SDE_KINDS, gaussian_log_prob, sde_step, sde_step_with_logprob, step_coefficients
from workbench.flow.trajectory import SamplingConfig


def _inputs(b=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, 3, 4, 4, generator=g), torch.randn(b, 3, 4, 4, generator=g)


@pytest.mark.parametrize("steps,shift", [(16, 3.0), (17, 3.0), (10, 1.0), (25, 5.0), (50, 7.0)])
def test_sigmas_match_diffusers(steps, shift):
    sched = FlowMatchEulerDiscreteScheduler(shift=shift)
    sched.set_timesteps(steps)
    assert torch.equal(sched.sigmas, sd3_sigmas(steps, shift))


@pytest.mark.parametrize("kind", SDE_KINDS)
def test_noise_level_zero_is_the_diffusers_euler_step(kind):
    x, v = _inputs()
    sched = FlowMatchEulerDiscreteScheduler(shift=3.0)
    sched.set_timesteps(8)
    sigmas = sd3_sigmas(8, 3.0)
    for i in range(8):
        sched._step_index = i
        expected = sched.step(v, sched.timesteps[i], x).prev_sample
        out = sde_step_with_logprob(x, v, sigmas[i].expand(3), sigmas[i + 1].expand(3), 0.0, kind,
                                    sigma_max=sigmas[1].expand(3))
        if kind == "cps":  # the same step, written as an interpolation: equal up to rounding
            assert torch.allclose(out.x_next, expected, atol=1e-6), (kind, i)
        else:
            assert torch.equal(out.x_next, expected), (kind, i)
        assert torch.equal(out.log_prob, torch.zeros(3))


@pytest.mark.parametrize("kind", SDE_KINDS)
def test_log_prob_matches_torch_normal(kind):
    x, v = _inputs()
    sigmas = sd3_sigmas(8, 3.0)
    for i in range(7):  # the last cps step is deterministic
        s, s_next = sigmas[i].expand(3), sigmas[i + 1].expand(3)
        out = sde_step_with_logprob(x, v, s, s_next, 0.7, kind, sigma_max=sigmas[1].expand(3))
        ref = torch.distributions.Normal(out.mean, out.std.view(-1, 1, 1, 1)).log_prob(out.x_next).flatten(1).mean(1)
        assert torch.allclose(out.log_prob, ref, atol=1e-5), (kind, i)
        assert (out.std > 0).all()


def test_flow_grpo_formula_by_hand():
    x, v = _inputs(1)
    t, t_next, a = 0.6, 0.45, 0.7
    dt = t_next - t
    sig = a * math.sqrt(t / (1 - t))
    mean = x * (1 + sig**2 * dt / (2 * t)) + v * (1 + sig**2 * (1 - t) / (2 * t)) * dt
    out = sde_step_with_logprob(x, v, torch.tensor([t]), torch.tensor([t_next]), a)
    assert torch.allclose(out.mean, mean, atol=1e-6)
    assert torch.allclose(out.std, torch.tensor([sig * math.sqrt(-dt)]))


def test_default_noise_level_is_flow_grpos_a_0_7():
    """Flow-GRPO's config/base.py sets noise_level = 0.7 (docs/methods.md); the step uses it when none is given.

    t = 0.5, t_next = 0.25: sigma_t = 0.7 sqrt(0.5 / 0.5) = 0.7 and std = sigma_t sqrt(-dt) = 0.7 x 0.5 = 0.35."""
    x, v = _inputs(1)
    out = sde_step_with_logprob(x, v, torch.tensor([0.5]), torch.tensor([0.25]))
    assert out.std.item() == pytest.approx(0.35) and out.noise_scale.item() == pytest.approx(0.7)


def test_step_coefficients_default_to_flow_grpos_sde():
    """t = 0.8, t_next = 0.6, a = 0.7: flow_grpo's sigma_t = 0.7 sqrt(0.8 / 0.2) = 1.4 (DanceGRPO's would be 0.7),
    std = 1.4 sqrt(0.2)."""
    c = step_coefficients(torch.tensor([0.8]), torch.tensor([0.6]), 0.7)
    assert c.noise_scale.item() == pytest.approx(1.4) and c.std.item() == pytest.approx(1.4 * math.sqrt(0.2))


def test_step_coefficients_are_float32_for_a_float64_noise_level():
    """The step is computed in float32 (module doc) even when the noise levels come as a float64 tensor."""
    levels = torch.tensor([0.7, 0.3], dtype=torch.float64)
    c = step_coefficients(torch.tensor([0.8, 0.5]), torch.tensor([0.6, 0.25]), levels)
    assert {f.dtype for f in (c.x_coef, c.v_coef, c.std, c.noise_scale, c.sigma)} == {torch.float32}


@pytest.mark.parametrize("kind", SDE_KINDS)
def test_step_coefficients_stay_on_the_sigmas_device(kind):
    """A float noise level joins the sigmas' device: torch's meta device stands in for a GPU here (a tensor left on
    the CPU cannot meet a meta tensor, as it cannot meet a CUDA one)."""
    sigma, sigma_next = torch.tensor([0.8, 0.5], device="meta"), torch.tensor([0.6, 0.25], device="meta")
    c = step_coefficients(sigma, sigma_next, 0.7, kind)
    assert {f.device.type for f in (c.x_coef, c.v_coef, c.std, c.noise_scale, c.sigma)} == {"meta"}


def test_t_equal_one_uses_sigma_max_and_is_finite():
    x, v = _inputs(1)
    out = sde_step_with_logprob(x, v, torch.tensor([1.0]), torch.tensor([0.9]), 0.7, sigma_max=torch.tensor([0.95]))
    assert torch.isfinite(out.log_prob).all() and torch.isfinite(out.x_next).all()
    assert torch.allclose(out.std, torch.tensor([0.7 * math.sqrt(1 / 0.05) * math.sqrt(0.1)]))


def test_rescoring_a_sampled_transition_gives_the_same_log_prob():
    x, v = _inputs()
    out = sde_step_with_logprob(x, v, torch.full((3,), 0.8), torch.full((3,), 0.7), 0.7)
    again = sde_step_with_logprob(x, v, torch.full((3,), 0.8), torch.full((3,), 0.7), 0.7, x_next=out.x_next)
    assert torch.equal(out.log_prob, again.log_prob)


def test_gaussian_log_prob_is_mean_over_elements():
    mean, x = torch.zeros(2, 1, 2, 2), torch.ones(2, 1, 2, 2)
    lp = gaussian_log_prob(x, mean, torch.tensor([1.0, 2.0]))
    expected = torch.tensor([-0.5 - math.log(math.sqrt(2 * math.pi)),
                             -1 / 8 - math.log(2.0) - math.log(math.sqrt(2 * math.pi))])
    assert torch.allclose(lp, expected)


def test_unknown_kind_lists_valid_kinds():
    with pytest.raises(WorkbenchError, match="flow_grpo, dance_grpo, cps"):
        step_coefficients(torch.tensor([0.5]), torch.tensor([0.4]), 0.7, "ddim")


@pytest.mark.parametrize("kind", SDE_KINDS)
def test_a_schedules_coefficients_give_each_steps_own_transition(kind):
    """The table a sampling loop computes once (`schedule_coefficients`) gives, for one step (an int) or for rows
    at different steps ((B,) indices), exactly the transition computed from that step's own noise levels."""
    x, v = _inputs()
    cfg = SamplingConfig(group=3, steps=8, sde=kind, window=(1, 6))
    sigmas = sd3_sigmas(8, 3.0)
    table, z = schedule_coefficients(sigmas, cfg), torch.randn(x.shape, generator=torch.Generator().manual_seed(3))
    level = cfg.noise_level * cfg.sde_mask().float()  # (T,): 0 outside the window
    for i in range(8):
        own = sde_step_with_logprob(x, v, sigmas[i].expand(3), sigmas[i + 1].expand(3), level[i].expand(3), kind,
                                    noise=z, sigma_max=sigmas[1].expand(3))
        for rows in (i, torch.full((3,), i)):
            out = sde_step(x, v, table.at(rows), noise=z)
            for name in ("x_next", "mean", "std", "log_prob", "x0_pred", "noise_scale"):
                assert torch.equal(getattr(out, name), getattr(own, name)), (kind, i, name)
    steps = torch.tensor([0, 3, 7])  # one row per step: each row as its own step gives it
    mixed = step_from_velocity(x, v, sigmas, steps, cfg, noise=z, coefficients=table)
    for row, i in enumerate(steps.tolist()):
        alone = step_from_velocity(x[row:row + 1], v[row:row + 1], sigmas, i, cfg, noise=z[row:row + 1])
        assert torch.equal(mixed.x_next[row], alone.x_next[0]) and torch.equal(mixed.log_prob[row], alone.log_prob[0])



def test_flow_grpo_steps_are_bit_equal_to_the_per_row_form_before_the_coefficients():
    """The flow_grpo step as the workbench computed it before `step_coefficients` (9dab0bd: the released
    expressions on (B, 1, 1, 1) sigmas, per call): samples, log-probs and x0 predictions stay bit for bit."""
    x, v = _inputs()
    sigmas, a = sd3_sigmas(8, 3.0), 0.7
    z = torch.randn(x.shape, generator=torch.Generator().manual_seed(5))
    for i in range(8):
        t, t_next = sigmas[i].expand(3).view(-1, 1, 1, 1), sigmas[i + 1].expand(3).view(-1, 1, 1, 1)
        dt = t_next - t
        t_safe = torch.where(t >= 1, sigmas[1].expand(3).view(-1, 1, 1, 1), t)
        std_t = a * torch.sqrt(t / (1 - t_safe))
        mean = x * (1 + std_t**2 / (2 * t) * dt) + v * ((1 + std_t**2 * (1 - t) / (2 * t)) * dt)
        std = (std_t * torch.sqrt(-dt)).reshape(-1)
        x_next = torch.addcmul(mean, std.view(-1, 1, 1, 1), z)
        out = sde_step_with_logprob(x, v, sigmas[i].expand(3), sigmas[i + 1].expand(3), a, noise=z,
                                    sigma_max=sigmas[1].expand(3))
        assert torch.equal(out.mean, mean) and torch.equal(out.std, std) and torch.equal(out.x_next, x_next), i
        assert torch.equal(out.x0_pred, torch.addcmul(x, t, v, value=-1)), i
        assert torch.equal(out.log_prob, gaussian_log_prob(x_next, mean, std)), i
