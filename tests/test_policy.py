"""The FlowPolicy base class and Conditioning, with a denoiser whose output is known by hand."""

from __future__ import annotations

import torch

from workbench.flow.policy import Conditioning, FlowPolicy
from workbench.flow.schedule import sd3_sigmas


class Affine(FlowPolicy):
    """v = x + sigma + embeds.sum(): every input visibly changes the velocity."""

    latent_shape = (1, 1, 2)

    def __init__(self):
        self.transformer = torch.nn.Linear(1, 1)

    def denoise(self, x, sigma, embeds, pooled):
        assert sigma.shape == (x.shape[0],), "denoise takes one sigma per row (its docstring)"
        return x + sigma.view(-1, 1, 1, 1) + embeds.sum(dim=(1, 2)).view(-1, 1, 1, 1)


def test_the_base_schedule_is_sd3s_shift_3_and_guidance_is_off():
    policy = Affine()
    assert torch.allclose(policy.schedule(4), sd3_sigmas(4, 3.0))  # SD3's default shift
    assert torch.allclose(policy.schedule(4, shift=1.0), sd3_sigmas(4, 1.0))
    assert policy.default_guidance == 1.0 and policy.supports_cfg  # CFG is there, off until asked for


def test_guided_velocity_is_uncond_plus_scale_times_the_difference():
    policy, x = Affine(), torch.zeros(1, 1, 1, 2)
    cond = Conditioning(torch.full((1, 1, 1), 2.0), None, torch.zeros(1, 1, 1), None)
    sigma = torch.tensor(0.5)
    assert torch.allclose(policy.velocity(x, sigma, cond), torch.full((1, 1, 1, 2), 2.5))  # scale 1: cond only
    # v_cond = 2.5, v_uncond = 0.5: 0.5 + 4 (2.5 - 0.5) = 8.5
    assert torch.allclose(policy.velocity(x, sigma, cond, guidance_scale=4.0), torch.full((1, 1, 1, 2), 8.5))


def test_one_sigma_is_spread_over_the_batch():
    policy, x = Affine(), torch.zeros(2, 1, 1, 2)
    cond = Conditioning(torch.zeros(2, 1, 1), None)
    for sigma in (torch.tensor(0.25), torch.tensor([0.25]), torch.tensor([0.25, 0.25])):
        assert torch.allclose(policy.velocity(x, sigma, cond), torch.full((2, 1, 1, 2), 0.25))


def test_repeat_and_index_keep_missing_parts_missing():
    cond = Conditioning(torch.arange(2.0).view(2, 1, 1), None, torch.arange(2.0, 4.0).view(2, 1, 1), None)
    rep = cond.repeat(2)
    assert rep.embeds.flatten().tolist() == [0.0, 0.0, 1.0, 1.0] and rep.pooled is None
    picked = rep.index(torch.tensor([3, 0]))
    assert picked.embeds.flatten().tolist() == [1.0, 0.0] and picked.uncond_embeds.flatten().tolist() == [3.0, 2.0]
    assert picked.pooled is None and picked.uncond_pooled is None


def test_with_transformer_replaces_it_in_its_holders_and_shares_everything_else():
    policy, other = Affine(), torch.nn.Linear(1, 1)
    policy.model = type("Holder", (), {})()  # e.g. the embedded model, which holds the transformer too
    policy.model.transformer = policy.transformer
    policy.vae = torch.nn.Linear(2, 2)  # a part that does not hold it
    moved = policy.with_transformer(other)
    assert moved.transformer is other and moved.model.transformer is other
    assert policy.transformer is not other and policy.model.transformer is policy.transformer  # original intact
    assert moved.vae is policy.vae and not hasattr(moved.vae, "transformer")
