"""Adapters on tiny random SD3 and FLUX pipelines built from configs (as diffusers' own tests do), saved to
a temporary folder and loaded back offline. Invariants: the sampler with noise level 0 reproduces the
diffusers pipeline step by step (scheduler.step on the same model output) and image for image; on-policy
re-scoring gives ratio 1; gradients reach the transformer only."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
import torch
from tiny_pipelines import clip_config, clip_tokenizer, t5_tokenizer, tiny_vae

from workbench.core.errors import WorkbenchError
from workbench.flow.sampler import initial_noise, rescore, sample_group, transition
from workbench.flow.trajectory import SamplingConfig
from workbench.models.adapters import FluxPolicy, SD3Policy, default_device, flux_pipeline_sigmas, load_model
from workbench.models.embedded import EmbeddedPolicy

PX = 16  # image side; the tiny VAE has one block, so latents are 16 x 16 too
SEQ = 8  # T5 tokens


@pytest.fixture(scope="module")
def offline():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        yield


@pytest.fixture(scope="module")
def sd3_folder(tmp_path_factory):
    from diffusers import FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel, StableDiffusion3Pipeline
    from transformers import CLIPTextModelWithProjection

    torch.manual_seed(0)
    # pooled_projection_dim 64 = the two CLIP projections (32 + 32) concatenated
    transformer = SD3Transformer2DModel(sample_size=32, patch_size=2, in_channels=4, num_layers=1,
                                        attention_head_dim=8, num_attention_heads=4, caption_projection_dim=32,
                                        joint_attention_dim=32, pooled_projection_dim=64, out_channels=4)
    pipe = StableDiffusion3Pipeline(transformer=transformer, vae=tiny_vae(),
                                    scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
                                    text_encoder=CLIPTextModelWithProjection(clip_config()), tokenizer=clip_tokenizer(),
                                    text_encoder_2=CLIPTextModelWithProjection(clip_config()),
                                    tokenizer_2=clip_tokenizer(), text_encoder_3=None, tokenizer_3=None)
    folder = tmp_path_factory.mktemp("tiny-sd3")
    pipe.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def flux_folder(tmp_path_factory):
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
    from transformers import CLIPTextModel, T5Config, T5EncoderModel

    torch.manual_seed(0)
    transformer = FluxTransformer2DModel(patch_size=1, in_channels=16, num_layers=1, num_single_layers=1,
                                         attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                                         pooled_projection_dim=32, axes_dims_rope=[4, 4, 8], guidance_embeds=True)
    t5 = T5EncoderModel(T5Config(vocab_size=1000, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4))
    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15)
    pipe = FluxPipeline(transformer=transformer, vae=tiny_vae(), scheduler=scheduler,
                        text_encoder=CLIPTextModel(clip_config()), tokenizer=clip_tokenizer(),
                        text_encoder_2=t5, tokenizer_2=t5_tokenizer())
    folder = tmp_path_factory.mktemp("tiny-flux")
    pipe.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def sd3(sd3_folder, offline):
    return load_model(sd3_folder, device="cpu", resolution=PX, max_sequence_length=SEQ)


@pytest.fixture(scope="module")
def flux(flux_folder, offline):
    return load_model(flux_folder, device="cpu", resolution=PX, max_sequence_length=SEQ)


def check_sampling_and_training(policy):
    """sample_group runs, images are in [0, 1], on-policy ratios are 1, gradients reach only the transformer."""
    config = SamplingConfig(group=2, steps=3)
    group = sample_group(policy, "a cat", config)
    assert group.images.shape == (2, 3, PX, PX)
    assert 0 <= group.images.min() and group.images.max() <= 1 and group.images.std() > 0
    assert group.log_probs.abs().min() > 0  # every step stochastic, so every step carries a log-prob
    torch.testing.assert_close(torch.exp(rescore(policy, group) - group.log_probs), torch.ones(2, 3),
                               atol=1e-5, rtol=0)
    cond = policy.encode(["a cat"]).repeat(2)
    lp = transition(policy, group.states[:, 1], group.sigmas, 1, cond, config, x_next=group.states[:, 2]).log_prob
    lp.sum().backward()
    grads = [p.grad for p in policy.transformer.parameters() if p.grad is not None]
    assert grads and any(g.abs().sum() > 0 for g in grads)
    frozen = [m for m in (policy.pipe.text_encoder, policy.pipe.text_encoder_2, policy.pipe.vae)]
    assert not any(p.requires_grad for m in frozen for p in m.parameters())
    policy.transformer.zero_grad(set_to_none=True)


def pipeline_latents(pipe, x_T, steps, **kwargs):
    """Run the diffusers pipeline from x_T; return every latent after scheduler.step and the images."""
    seen = []

    def record(pipe, i, t, tensors):
        seen.append(tensors["latents"].clone())
        return {}

    images = pipe(prompt="a cat", num_inference_steps=steps, height=PX, width=PX, latents=x_T, output_type="pt",
                  max_sequence_length=SEQ, callback_on_step_end=record, **kwargs).images
    return seen, images


def test_sd3_loads_offline_frozen_and_sized(sd3):
    assert isinstance(sd3, SD3Policy) and sd3.name.startswith("sd3:")
    assert sd3.latent_shape == (4, PX, PX) and sd3.default_shift == 3.0 and sd3.supports_cfg
    with pytest.raises(WorkbenchError, match="multiple of 2"):
        SD3Policy(sd3.pipe, resolution=PX + 1)


def test_sd3_samples_rescores_and_trains(sd3):
    check_sampling_and_training(sd3)


@pytest.mark.parametrize("guidance_scale", [1.0, 2.0])
def test_sd3_noise_level_0_equals_the_pipeline(sd3, guidance_scale):
    steps = 2
    group = sample_group(sd3, "a cat", SamplingConfig(group=1, steps=steps, noise_level=0,
                                                      guidance_scale=guidance_scale))
    seen, images = pipeline_latents(sd3.pipe, group.states[:, 0], steps, guidance_scale=guidance_scale)
    torch.testing.assert_close(sd3.pipe.scheduler.sigmas, group.sigmas)
    for t in range(steps):  # x_next of FlowMatchEulerDiscreteScheduler.step on the pipeline's model output
        torch.testing.assert_close(group.states[:, t + 1], seen[t], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(group.images, images, atol=1e-5, rtol=1e-5)


def test_sd3_cfg_uncond_is_the_empty_prompt(sd3):
    cond = sd3.encode(["a cat"], cfg=True)
    empty = sd3.encode([""])
    torch.testing.assert_close(cond.uncond_embeds, empty.embeds)
    torch.testing.assert_close(cond.uncond_pooled, empty.pooled)
    assert not torch.allclose(cond.embeds, empty.embeds)


def test_flux_loads_offline_frozen_and_sized(flux):
    assert isinstance(flux, FluxPolicy) and flux.name.startswith("flux:")
    assert flux.latent_shape == (4, PX, PX) and flux.image_seq_len == (PX // 2) ** 2 and not flux.supports_cfg
    with pytest.raises(WorkbenchError, match="multiple of 2"):
        FluxPolicy(flux.pipe, resolution=PX - 1)


def test_flux_samples_rescores_and_trains(flux):
    check_sampling_and_training(flux)


def test_flux_noise_level_0_equals_the_pipeline(flux):
    steps = 2
    group = sample_group(flux, "a cat", SamplingConfig(group=1, steps=steps, noise_level=0))
    x_T = flux.pipe._pack_latents(group.states[:, 0], 1, 4, PX, PX)  # (1, 64, 16)
    seen, images = pipeline_latents(flux.pipe, x_T, steps, guidance_scale=flux.guidance)
    assert torch.equal(flux.pipe.scheduler.sigmas, group.sigmas)
    for t in range(steps):
        torch.testing.assert_close(group.states[:, t + 1], flux.pipe._unpack_latents(seen[t], PX, PX, 1),
                                   atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(group.images, images, atol=1e-5, rtol=1e-5)


def test_flux_guidance_is_the_embedding_not_cfg(flux):
    cond = flux.encode(["a cat"], cfg=True)
    assert cond.uncond_embeds is None
    x, sigma = initial_noise((1, *flux.latent_shape), seed=1), torch.tensor([0.5])
    with torch.no_grad():
        v = flux.velocity(x, sigma, cond)
        torch.testing.assert_close(flux.velocity(x, sigma, cond, guidance_scale=5.0), v)
        flux.guidance = 7.0
        moved = flux.velocity(x, sigma, cond)
        flux.guidance = 3.5
    assert not torch.allclose(moved, v)


def test_flux_schedule_matches_the_scheduler(flux):
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline
    from diffusers.pipelines.flux.pipeline_flux import calculate_shift

    for steps, seq_len in [(3, 64), (17, 1024), (28, 4096)]:
        mu = calculate_shift(seq_len)
        scheduler = FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True)
        scheduler.set_timesteps(sigmas=np.linspace(1.0, 1 / steps, steps), mu=mu)
        assert torch.equal(flux_pipeline_sigmas(steps, mu=mu), scheduler.sigmas)
        torch.testing.assert_close(flux_pipeline_sigmas(steps, shift=math.exp(mu)), scheduler.sigmas, atol=3e-7,
                                   rtol=0)
    assert flux.default_shift == pytest.approx(math.exp(calculate_shift(flux.image_seq_len)))
    # a static scheduler (FLUX.1 [schnell]: shift 1) ignores mu, so the sigmas are the plain grid
    static = FlowMatchEulerDiscreteScheduler(shift=1.0)
    schnell = FluxPolicy(FluxPipeline(**{**flux.pipe.components, "scheduler": static}), resolution=PX)
    torch.testing.assert_close(schnell.schedule(4), torch.tensor([1.0, 0.75, 0.5, 0.25, 0.0]))


def test_load_model_embedded_folder_and_default(tmp_path, monkeypatch):
    import workbench.models.embedded as embedded

    folder = embedded.save_embedded(embedded.build_embedded(), tmp_path / "embedded")
    assert isinstance(load_model(folder, device="cpu"), EmbeddedPolicy)
    monkeypatch.setattr(embedded, "DEFAULT_WEIGHTS", folder)
    assert isinstance(load_model(None, device="cpu"), EmbeddedPolicy)
    with pytest.raises(WorkbenchError, match="resolution"):
        load_model(folder, device="cpu", resolution=64)


def test_load_model_errors(tmp_path):
    with pytest.raises(WorkbenchError, match="does not exist"):
        load_model(tmp_path / "nope")
    with pytest.raises(WorkbenchError, match="not a model folder"):
        load_model(tmp_path)
    with pytest.raises(WorkbenchError, match="valid dtypes: float32"):
        load_model(tmp_path, dtype="float8")
    index = {"_class_name": "StableDiffusion3Pipeline", "transformer": ["diffusers", "SD3Transformer2DModel"],
             "vae": ["diffusers", "AutoencoderKL"], "text_encoder_3": [None, None]}
    (tmp_path / "vae").mkdir()
    (tmp_path / "vae" / "config.json").write_text("{}")
    (tmp_path / "model_index.json").write_text(json.dumps(index))
    with pytest.raises(WorkbenchError, match=r"component folder\(s\) transformer named") as err:
        load_model(tmp_path)
    assert "vae" not in str(err.value) and "text_encoder_3" not in str(err.value)
    with pytest.raises(WorkbenchError, match="valid options: resolution, max_sequence_length"):
        load_model(tmp_path, size=3)
    (tmp_path / "model_index.json").write_text(json.dumps({**index, "_class_name": "StableDiffusionXLPipeline"}))
    with pytest.raises(WorkbenchError, match="supported pipelines: StableDiffusion3Pipeline, FluxPipeline"):
        load_model(tmp_path)


def test_load_model_incomplete_download(sd3_folder, tmp_path, offline):
    folder = shutil.copytree(sd3_folder, tmp_path / "sd3")
    for file in (folder / "tokenizer").iterdir():
        file.unlink()
    with pytest.raises(WorkbenchError, match=r"component folder\(s\) tokenizer named"):
        load_model(folder, device="cpu")
    shutil.copytree(sd3_folder / "tokenizer", folder / "tokenizer", dirs_exist_ok=True)
    for file in (folder / "transformer").glob("*.safetensors"):
        file.unlink()
    with pytest.raises(WorkbenchError, match="cannot load StableDiffusion3Pipeline .*transformer"):
        load_model(folder, device="cpu")


def test_default_device(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert default_device() == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert default_device() == "cpu"
