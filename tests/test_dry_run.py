"""The dry run's plan (train/dry_run.py) without the memory probe: the fixes it tries for a run that does not fit,
in the order that keeps the run's maths first, the smallest that fits, and the device and processes it plans for.
The measured-memory tests are in test_memory.py (an integration file: it measures peaks in other processes)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from workbench.cli.main import build_parser
from workbench.cli.train import config_overrides
from workbench.core.errors import WorkbenchError
from workbench.train import TrainConfig
from workbench.train.dry_run import _candidate_fixes, estimate_run, plan_run


def candidate_flags(config: TrainConfig, device: str, world: int, free: int) -> list[str]:
    """The single changes the plan of `config` would try, in order; each flag sets exactly its overrides."""
    parser = build_parser()
    resolved = plan_run(config, device, world, free).config
    fixes = list(_candidate_fixes(config, resolved, world, device, free))
    for flag, overrides in fixes:  # what the learner types is what the plan tried
        assert config_overrides(parser.parse_args(["train", *flag.split()])) == overrides, flag
    return [flag for flag, _ in fixes]


def test_the_fixes_tried_keep_the_maths_first_and_each_is_a_working_flag():
    bare = TrainConfig(model="meta:sd3.5-medium", offload_text_encoders=False, micro_batch=4, vae_tiling=False,
                       gradient_checkpointing=False, dtype="float32", lora_rank=0, prompts_per_iteration=8,
                       resolution=1024)
    # on 2 GPUs: every memory setting that changes no result, then fewer prompts (8 // 2 = 4, 2: each divisible by
    # the 2 processes; 1 is not), then every smaller resolution of the list below 1024
    assert candidate_flags(bare, "cuda", 2, 10**9) == [
        "--offload-text-encoders", "--micro-batch auto", "--vae-tiling", "--gradient-checkpointing", "--fsdp",
        "--dtype bfloat16", "--lora-rank 32", "--prompts-per-iteration 4", "--prompts-per-iteration 2",
        "--resolution 768", "--resolution 512", "--resolution 384", "--resolution 256"]
    # each setting already taken is not offered again; 6 // 2 = 3 divides among 3 processes, 3 // 2 = 1 does not;
    # the resolutions strictly below 512; LoRA needs no FSDP
    ready = replace(bare, offload_text_encoders=True, micro_batch=1, vae_tiling=True, gradient_checkpointing=True,
                    dtype="bfloat16", lora_rank=32, prompts_per_iteration=6, resolution=512)
    assert candidate_flags(ready, "cuda", 3, 10**9) == ["--prompts-per-iteration 3", "--resolution 384",
                                                        "--resolution 256"]
    one_gpu = candidate_flags(replace(bare, lora_rank=0), "cuda", 1, 10**9)
    assert "--fsdp" not in one_gpu and "--lora-rank 32" in one_gpu  # FSDP shards over several processes only


def test_the_embedded_model_is_offered_a_micro_batch_that_fits_and_no_real_model_switch():
    # with 1 byte free not even one transition fits: micro-batch 1; the default 4 prompts halve to 2 and 1
    assert candidate_flags(TrainConfig(), "cpu", 1, 1) == [
        "--micro-batch 1", "--gradient-checkpointing", "--prompts-per-iteration 2", "--prompts-per-iteration 1"]
    # with room for the whole minibatch in one pass there is no smaller micro-batch to offer
    assert candidate_flags(TrainConfig(), "cpu", 1, 10**15) == [
        "--gradient-checkpointing", "--prompts-per-iteration 2", "--prompts-per-iteration 1"]


def test_the_smallest_fix_adds_changes_in_order_until_they_fit_together():
    config, gb = TrainConfig(model="meta:sd3.5-medium"), 10**9
    # at 8 GB no single change fits; the changes, in order, fit together once the resolution is down to 384 (a later
    # value of a setting replaces the earlier one: prompts 2 then 1, resolution 768, 512 then 384)
    together = replace(config, vae_tiling=True, prompts_per_iteration=1)
    assert plan_run(replace(together, resolution=384), "cuda", 1, 8 * gb).fits
    assert not plan_run(replace(together, resolution=512), "cuda", 1, 8 * gb).fits
    assert plan_run(config, "cuda", 1, 8 * gb).fix == \
        "--vae-tiling and --prompts-per-iteration 1 and --resolution 384 together"
    # a minibatch of all 512 transitions divides no smaller iteration: fewer prompts are skipped, not the end
    whole = replace(config, minibatch=512)
    with pytest.raises(WorkbenchError, match="minibatch"):
        plan_run(replace(whole, prompts_per_iteration=2), "cuda", 1, 9 * gb)
    assert plan_run(whole, "cuda", 1, 9 * gb).fix == "--resolution 384"


@pytest.mark.parametrize("env, world", [("4", 4), ("", 1), (None, 1)])
def test_the_plan_counts_the_processes_the_launcher_started(monkeypatch, env, world):
    if env is None:
        monkeypatch.delenv("WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("WORLD_SIZE", env)  # torchrun sets it; empty or unset: one process
    assert plan_run(TrainConfig(), "cpu", None, 10**12).world == world


def test_estimate_run_plans_for_the_device_it_is_given():
    verdict = estimate_run(TrainConfig(device="cuda"), "cpu")[1]  # not the config's device
    assert verdict.startswith("fits: needs about") and verdict.endswith("free on the cpu")


def test_decode_channels_by_hand():
    """The VAE decoder's peak channels at full resolution: the second-smallest width plus two of the smallest."""
    from workbench.train.model_sizes import decode_channels

    assert decode_channels({"block_out_channels": [128, 256, 512, 512]}) == 256 + 2 * 128  # SD3 / FLUX: 512
    assert decode_channels({"block_out_channels": [64, 96]}) == 96 + 2 * 64
    assert decode_channels({"block_out_channels": [32]}) == 3 * 32  # one block: its own width, three times


def test_architecture_sizes_by_hand():
    """A published architecture's sizes at 512 px: (512 / 8 / 2)^2 = 1024 image tokens beside the text's, SD3's 77
    CLIP tokens before the T5 ones, the latent's 16 channels (FLUX packs them in fours: 64 / 4), and the pipeline
    around the transformer from the architecture's record."""
    from workbench.models.architectures import ARCHITECTURES
    from workbench.train.model_sizes import architecture_sizes

    for name, tokens in (("sd3.5-medium", 1024 + 77 + 256), ("flux.1-dev", 1024 + 256)):
        arch, sizes = ARCHITECTURES[name], architecture_sizes(name, 512, max_sequence_length=256)
        assert (sizes.tokens, sizes.latent_elements) == (tokens, 16 * 64 * 64)
        assert (sizes.text_encoder_bytes, sizes.vae_params) == (arch.text_encoder_bytes, arch.vae_params)
        assert sizes.text_encoder_bytes > 0 and sizes.vae_decode_channels == 512


def test_safetensors_params_count_every_tensor_of_every_file(tmp_path):
    from safetensors.torch import save_file

    from workbench.train.model_sizes import _safetensors_params

    save_file({"a": torch.zeros(2, 3), "b": torch.zeros(4)}, str(tmp_path / "one.safetensors"))
    save_file({"c": torch.zeros(5, 1, 2)}, str(tmp_path / "two.safetensors"))
    assert _safetensors_params(tmp_path) == 6 + 4 + 10
    assert _safetensors_params(tmp_path / "empty") == 0


def write_folder(folder, transformer: dict, text_encoders: dict[str, int]):
    """A pipeline folder as folder_sizes reads it: model_index.json, the transformer's and a two-block VAE's
    configs (factor 2), each text encoder's weights (its parameter count, [null, null] for none) and 7 VAE ones."""
    import json

    from safetensors.torch import save_file

    index = {"_class_name": "Pipeline", "_diffusers_version": "0.37.0", "vae": ["diffusers", "AutoencoderKL"],
             "transformer": ["diffusers", transformer["_class_name"]]}
    for name, params in {**text_encoders, "vae": 7}.items():
        index.setdefault(name, ["transformers", "TextModel"] if params else [None, None])
        (folder / name).mkdir(parents=True)
        save_file({"weight": torch.zeros(params, 1)}, str(folder / name / "model.safetensors"))
    (folder / "transformer").mkdir()
    (folder / "transformer" / "config.json").write_text(json.dumps(transformer))
    (folder / "vae" / "config.json").write_text(json.dumps({"block_out_channels": [4, 8]}))
    (folder / "model_index.json").write_text(json.dumps(index))
    return folder


def test_folder_sizes_by_hand(tmp_path):
    """SD3 at its native 16 x 2 = 32 px: (32 / 2 / 2)^2 = 64 image tokens, 77 CLIP + 128 T5 text tokens (77 + 256
    asked for 256), 4 x 16 x 16 latent values. FLUX at 64 px asked: (64 / 2 / 2)^2 = 256 image tokens + 256 T5, its
    16 packed channels 4 latent ones. Text encoders at 2 bytes a parameter (the one written [null, null] not
    counted), the VAE's parameters and its decoder's peak channels, 8 + 2 x 4."""
    from workbench.train.model_sizes import folder_sizes

    sd3 = write_folder(tmp_path / "sd3", {"_class_name": "SD3Transformer2DModel", "sample_size": 16, "patch_size": 2,
                                          "in_channels": 4, "out_channels": 4, "num_layers": 1, "attention_head_dim": 8,
                                          "num_attention_heads": 4, "caption_projection_dim": 32,
                                          "joint_attention_dim": 32, "pooled_projection_dim": 64},
                       {"text_encoder": 10, "text_encoder_2": 20, "text_encoder_3": 0})
    flux = write_folder(tmp_path / "flux", {"_class_name": "FluxTransformer2DModel", "patch_size": 1,
                                            "in_channels": 16, "num_layers": 1, "num_single_layers": 1,
                                            "attention_head_dim": 16, "num_attention_heads": 2,
                                            "joint_attention_dim": 32, "pooled_projection_dim": 32,
                                            "axes_dims_rope": [4, 4, 8]}, {"text_encoder": 3, "text_encoder_2": 5})
    sizes = folder_sizes(sd3, None, 2)
    assert (sizes.image_pixels, sizes.tokens, sizes.latent_elements) == (32 * 32, 64 + 77 + 128, 4 * 16 * 16)
    assert (sizes.text_encoder_bytes, sizes.vae_params, sizes.vae_decode_channels) == (2 * 30, 7, 16)
    assert folder_sizes(sd3, None, 2, max_sequence_length=256).tokens == 64 + 77 + 256
    sizes = folder_sizes(flux, 64, 4, max_sequence_length=256)
    assert (sizes.image_pixels, sizes.tokens, sizes.latent_elements) == (64 * 64, 256 + 256, 4 * 32 * 32)
    assert (sizes.text_encoder_bytes, sizes.vae_params, sizes.vae_decode_channels) == (4 * 8, 7, 16)
