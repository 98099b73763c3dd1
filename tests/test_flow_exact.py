"""Sampling loops, schedules and seeds on cases whose every number is known by hand.

A point mass at x0 has the exact velocity v = (x_t - x0) / t (docs/methods.md "SDE step"), so the Euler ODE
lands on x0 exactly whatever the grid, and guidance moves the target linearly.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from workbench.core.errors import WorkbenchError
from workbench.flow.policy import Conditioning, FlowPolicy
from workbench.flow.sampler import ode_sample, sample_group, sample_groups
from workbench.flow.schedule import linspace_sigmas, sd3_sigmas, shift_sigmas
from workbench.flow.sde import step_noise_scale
from workbench.flow.trajectory import SEED_RANGE, SamplingConfig, check_seed, offset_seed


class PointMass(FlowPolicy):
    """Exact velocity of a point mass: x0 = +1 for the prompt, -1 for the empty prompt; decode is the identity."""

    latent_shape = (1, 1, 2)

    def __init__(self):
        self.transformer = torch.nn.Linear(1, 1)

    def encode(self, prompts, cfg=False):
        ones = torch.ones(len(prompts), 1, 1)
        return Conditioning(ones, None, -ones if cfg else None, None)

    def denoise(self, x, sigma, embeds, pooled):
        x0 = embeds[:, :1, :1].view(-1, 1, 1, 1)  # (B, 1, 1, 1)
        return (x - x0) / sigma.view(-1, 1, 1, 1)

    def decode(self, latents):
        return latents


def test_the_euler_ode_lands_on_the_point_mass_and_guidance_moves_it_linearly():
    policy = PointMass()
    assert torch.allclose(ode_sample(policy, ["a"], steps=3), torch.ones(1, 1, 1, 2), atol=1e-5)  # default: no CFG
    # v = v_u + s (v_c - v_u) is the exact velocity of x0 = x0_u + s (x0_c - x0_u) = -1 + 3 x 2 = 5
    assert torch.allclose(ode_sample(policy, ["a"], steps=3, guidance_scale=3.0), torch.full((1, 1, 1, 2), 5.0),
                          atol=1e-4)
    assert torch.allclose(ode_sample(policy, ["a"], steps=3, guidance_scale=2.0), torch.full((1, 1, 1, 2), 3.0),
                          atol=1e-4)


@pytest.mark.parametrize("kind", ["flow_grpo", "dance_grpo"])
def test_the_first_sde_step_from_pure_noise_has_std_a(kind):
    """flow_grpo at t = 1 uses sigma_max = sigmas[1]: std = a sqrt(1 / (1 - s1)) sqrt(1 - s1) = a; dance_grpo:
    eta sqrt(1 - s1)."""
    config = SamplingConfig(group=2, steps=4, noise_level=0.5, sde=kind, shift=1.0, schedule="linspace")
    group = sample_group(PointMass(), "a", config)
    expected = 0.5 if kind == "flow_grpo" else 0.5 * math.sqrt(0.25)
    assert torch.allclose(group.stds[:, 0], torch.full((2,), expected))


def test_noise_scale_is_the_sdes_own_sigma_by_hand():
    t, t_next = torch.tensor([0.5]), torch.tensor([0.25])
    # flow_grpo: std = sigma_t sqrt(-dt) with sigma_t = a sqrt(t / (1 - t)) = 0.7 at t = 0.5
    assert torch.allclose(step_noise_scale(torch.tensor([0.7 * 0.5]), t, t_next, "flow_grpo"), torch.tensor([0.7]))
    assert torch.allclose(step_noise_scale(torch.tensor([0.3 * 0.5]), t, t_next, "dance_grpo"), torch.tensor([0.3]))
    assert torch.equal(step_noise_scale(torch.tensor([0.2]), t, t_next, "cps"), torch.tensor([0.2]))


def test_linspace_sigmas_by_hand():
    assert linspace_sigmas(1).tolist() == [1.0, 0.0] and sd3_sigmas(1).tolist() == [1.0, 0.0]  # one step: x_T to x_0
    assert torch.allclose(linspace_sigmas(2, 1.0), torch.tensor([1.0, 0.5, 0.0]))
    # shift 3 (GCPO's default): 3 s / (1 + 2 s) at s = 0.5 is 0.75
    assert torch.allclose(linspace_sigmas(2), torch.tensor([1.0, 0.75, 0.0]))
    # shift below 1 spends more steps at low noise: 0.5 s / (1 - 0.5 s) at s = 0.5 is 1 / 3
    assert torch.allclose(linspace_sigmas(2, 0.5), torch.tensor([1.0, 1 / 3, 0.0]))
    assert np.allclose(shift_sigmas(np.array([0.25]), 2.0), [0.4])  # 2 x 0.25 / 1.25
    with pytest.raises(WorkbenchError, match="shift must be positive"):
        linspace_sigmas(2, 0.0)
    for sigmas in (linspace_sigmas, sd3_sigmas):
        with pytest.raises(WorkbenchError, match="^steps must be a positive integer, got 0$"):
            sigmas(0)


def test_seeds_cover_exactly_what_torch_generators_take_and_wrap():
    assert SEED_RANGE == (0, 2**63 - 1)
    check_seed(2**63 - 1)
    torch.Generator().manual_seed(2**63 - 1)
    for bad in (2**63, -1, True, 1.0):
        with pytest.raises(WorkbenchError, match="seed must be an integer"):
            check_seed(bad)
    assert offset_seed(5, 3) == 8 and offset_seed(2**63 - 1, 1) == 0 and offset_seed(2**63 - 2, 3) == 1


def test_the_sde_window_and_noise_level_zero_in_the_mask():
    assert SamplingConfig(steps=4, window=(1, 3)).sde_mask().tolist() == [False, True, True, False]
    assert SamplingConfig(steps=3).sde_mask().tolist() == [True, True, True]
    assert SamplingConfig(steps=3, noise_level=0.0).sde_mask().tolist() == [False, False, False]
    assert SamplingConfig(steps=3, window=(0, 3)).sde_mask().tolist() == [True, True, True]
    assert SamplingConfig(sde="cps", noise_level=1.0).noise_level == 1.0  # an angle fraction may be 1
    assert SamplingConfig(sde="dance_grpo", noise_level=2.0).noise_level == 2.0  # eta is not an angle
    assert SamplingConfig().noise_level == 0.7  # Flow-GRPO's default


def test_each_group_of_a_batch_gets_its_own_rows():
    groups = sample_groups(PointMass(), ["a", "b", "c"], SamplingConfig(group=2, steps=3), seeds=[4, 5, 6])
    for seed, group in zip([4, 5, 6], groups):
        alone = sample_group(PointMass(), "a", SamplingConfig(group=2, steps=3, seed=seed))
        assert torch.equal(group.images, group.states[:, -1]) and group.images.shape == (2, 1, 1, 2)
        assert torch.allclose(group.states, alone.states) and torch.allclose(group.log_probs, alone.log_probs)


def test_the_samplers_defaults_are_the_trainers():
    """A group sampled in the app with the defaults is the group a default fine-tune trains on."""
    from workbench.train.config import TrainConfig

    sampling, training = SamplingConfig(), TrainConfig()
    for name in ("group", "steps", "noise_level", "sde", "shift", "window", "guidance_scale", "shared_noise",
                 "schedule", "seed"):
        assert getattr(sampling, name) == getattr(training, name), name


@pytest.mark.parametrize("field", ["group", "steps", "seed"])
@pytest.mark.parametrize("value", [2.0, True, "3"])
def test_counts_and_seeds_must_be_integers(field, value):
    with pytest.raises(WorkbenchError, match=f"{field} must be an integer"):
        SamplingConfig(**{field: value})
