"""The memory switches of a fine-tune on tiny components: each gives the same numbers as without it (within float
tolerance; that micro-batches and checkpointing lower the measured peak is checked in test_memory.py, which measures
every peak in one probe process);
dtype and resolution where a model loads; full fine-tuning in bfloat16 saves float32 weights."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest
import torch
from support import TINY, fresh_policy

from workbench.train import TrainConfig, Trainer
from workbench.train.store import RunStore


def minibatch_gradients(config: TrainConfig) -> dict[str, torch.Tensor]:
    """The gradient of iteration 1's first minibatch (same rollout for every config: same seed)."""
    trainer = Trainer(config, None, fresh_policy())
    scfg = config.sampling_config(1)
    batch = trainer._collect(1, scfg)
    adv = trainer.estimator(batch.rewards, trainer.advantage_settings, batch.metric)
    stored = trainer._store(1, batch.groups, scfg, adv.values, torch.ones(len(batch.flat), dtype=torch.bool))
    trainer.policy.transformer.train()
    out = trainer.updater.minibatch(stored, torch.arange(config.group))
    assert out is not None and torch.isfinite(out.loss)
    return {k: p.grad.clone() for k, p in trainer.params.items() if p.grad is not None}


@pytest.mark.parametrize("extra", [dict(), dict(kl_beta=0.5, objective="step_grpo")])
def test_micro_batches_and_checkpointing_give_the_same_gradient(extra):
    base = replace(TINY, iterations=1, eval_prompts=0, group=4, steps=4, chunks="1,3", **extra)
    reference = minibatch_gradients(base)
    assert reference and any(g.abs().sum() > 0 for g in reference.values())
    for switch in (dict(micro_batch=5), dict(micro_batch=1), dict(gradient_checkpointing=True)):
        grads = minibatch_gradients(replace(base, **switch))
        assert grads.keys() == reference.keys()
        for name, g in grads.items():
            torch.testing.assert_close(g, reference[name], rtol=1e-4, atol=1e-6, msg=f"{switch} {name}")


def test_switch_fields_are_checked_and_defaulted(tmp_path):
    with pytest.raises(Exception, match="micro_batch must be a positive integer, 'auto' or None"):
        TrainConfig(micro_batch=0)
    with pytest.raises(Exception, match="micro_batch must be 'auto' or a positive integer or None, got 'all'"):
        TrainConfig(micro_batch="all")
    assert not TrainConfig().checkpointing and not TrainConfig(lora_rank=8).checkpointing  # embedded: off
    (tmp_path / "model_index.json").write_text("{}")
    assert TrainConfig(lora_rank=8, model=str(tmp_path)).checkpointing  # a real model: on
    assert TrainConfig(lora_rank=0, model=str(tmp_path)).checkpointing
    assert not TrainConfig(lora_rank=8, model=str(tmp_path), gradient_checkpointing=False).checkpointing


def test_bfloat16_full_fine_tuning_saves_float32_weights(tmp_path):
    from tiny_pipelines import save_tiny_sd3

    folder = save_tiny_sd3(tmp_path / "sd3")
    config = TrainConfig(model=str(folder), dtype="bfloat16", resolution=16, iterations=1, eval_prompts=0, group=2,
                         steps=2, chunks="2", prompts_per_iteration=1, report_to="none", device="cpu")
    trainer = Trainer(config, tmp_path / "run")
    assert trainer.policy.pipe.vae.dtype == torch.bfloat16  # what is not trained stays in the load dtype
    trainer.run()
    weights = RunStore(tmp_path / "run").latest_checkpoint().weights
    assert weights and all(w.dtype == torch.float32 for w in weights.values())


def test_dtype_and_resolution_where_a_model_loads(tmp_path):
    from tiny_pipelines import save_tiny_flux

    from workbench.flow.sampler import sample_group
    from workbench.flow.trajectory import SamplingConfig
    from workbench.train.sources import load_policy

    policy = load_policy(save_tiny_flux(tmp_path / "flux"), device="cpu", dtype="bfloat16", resolution=32)
    assert policy.transformer.dtype == torch.bfloat16 and policy.image_size == 32
    group = sample_group(policy, "a cat", SamplingConfig(group=2, steps=2))
    assert group.log_probs.dtype == torch.float32 and group.states.dtype == torch.float32  # the maths: float32
    assert group.images.shape[-1] == 32 and torch.isfinite(group.log_probs).all()


def test_gpu_smoke_without_a_gpu_says_so_and_exits_0(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the smoke test would run")
    done = subprocess.run([sys.executable, "scripts/gpu_smoke.py", "--model", str(tmp_path), "--out",
                           str(tmp_path / "smoke")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "no CUDA GPU is visible" in done.stdout
    assert not (tmp_path / "smoke").exists()


def test_a_run_saved_before_the_t5_setting_keeps_the_pipelines_256_tokens(tmp_path):
    """SD3 runs written before `max_sequence_length` existed sampled with the pipeline's 256 T5 tokens: resumed or
    loaded they keep them; a new run's saved None is the policy's default (128, Flow-GRPO's)."""
    from tiny_pipelines import save_tiny_flux, save_tiny_sd3

    sd3, flux = save_tiny_sd3(tmp_path / "sd3"), save_tiny_flux(tmp_path / "flux")
    run = tmp_path / "run"
    run.mkdir()
    for model, old_value in ((str(sd3), 256), (str(flux), None), (None, None)):
        saved = TrainConfig(model=model).to_dict()
        assert saved["max_sequence_length"] is None
        (run / "config.json").write_text(json.dumps(saved))
        assert RunStore(run).config()["max_sequence_length"] is None
        del saved["max_sequence_length"]  # as a run saved before the setting
        (run / "config.json").write_text(json.dumps(saved))
        assert RunStore(run).config().get("max_sequence_length") == old_value, model
        TrainConfig.from_dict(RunStore(run).config())  # and it reads back as a valid config


def test_offloaded_text_encoders_encode_each_prompt_once(tmp_path, monkeypatch):
    from tiny_pipelines import save_tiny_sd3

    from workbench.models.adapters import load_model
    from workbench.models.offload import offload_text_encoders, slice_vae

    folder = save_tiny_sd3(tmp_path / "sd3")
    policy = load_model(folder, device="cpu", resolution=16, max_sequence_length=8)
    plain = policy.encode(["a cat", "a dog"], cfg=True)
    calls = []
    encode_prompt = policy.pipe.encode_prompt
    monkeypatch.setattr(policy.pipe, "encode_prompt", lambda **kw: calls.append(kw["prompt"]) or encode_prompt(**kw))
    offload_text_encoders(policy)
    assert policy.pipe.text_encoder.device.type == "cpu"
    for _ in range(3):
        cached = policy.encode(["a dog", "a cat", "a dog"], cfg=True)
    assert calls == [["a dog", "a cat"]]  # each prompt encoded once, on the text encoders' device
    torch.testing.assert_close(cached.embeds, plain.embeds[[1, 0, 1]])
    torch.testing.assert_close(cached.uncond_pooled, plain.uncond_pooled[[1, 0, 1]])
    latents = torch.randn(3, *policy.latent_shape, generator=torch.Generator().manual_seed(0))
    whole = policy.decode(latents)
    slice_vae(policy)
    torch.testing.assert_close(policy.decode(latents), whole, atol=1e-5, rtol=1e-5)
    config = TrainConfig(model=str(folder), resolution=16, lora_rank=2, offload_text_encoders=True, vae_tiling=True,
                         max_sequence_length=8, iterations=1, eval_prompts=1, group=2, steps=2, chunks="2",
                         prompts_per_iteration=1, report_to="none", device="cpu")
    trainer = Trainer(config, None)
    assert trainer.policy.max_sequence_length == 8  # the run's T5 tokens reach the policy (default 128, Flow-GRPO's)
    assert trainer.policy.encode(["a cat"]).embeds.shape[1] == 77 + 8
    assert trainer.run().state == "finished"
    with pytest.raises(Exception, match="apply to SD3 / FLUX models"):
        TrainConfig(offload_text_encoders=True)
    with pytest.raises(Exception, match="the embedded model has no T5"):
        TrainConfig(max_sequence_length=8)
