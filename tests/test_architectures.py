"""Real architectures without weights: SD3.5 Medium, SD3.5 Large and FLUX.1-dev transformers built on the meta
device from their published transformer/config.json, with the workbench's LoRA applied as the trainer applies it.
Every LoRA target exists, the trainable and frozen parameter counts follow from the configs, and the KL reference
of a LoRA run is the same transformer with its adapters disabled (no copy of the weights)."""

from __future__ import annotations

import pytest
import torch

from workbench.models.architectures import ARCHITECTURES, build_on_meta
from workbench.train.trainable import LORA_TARGETS, AdaptersOff, add_lora, reference_policy, trainable_weights

# transformer/config.json of stabilityai/stable-diffusion-3.5-medium, -3.5-large and black-forest-labs/FLUX.1-dev
PUBLISHED = {
    "sd3.5-medium": dict(attention_head_dim=64, caption_projection_dim=1536, dual_attention_layers=tuple(range(13)),
                         in_channels=16, joint_attention_dim=4096, num_attention_heads=24, num_layers=24,
                         out_channels=16, patch_size=2, pooled_projection_dim=2048, pos_embed_max_size=384,
                         qk_norm="rms_norm", sample_size=128),
    "sd3.5-large": dict(attention_head_dim=64, caption_projection_dim=2432, in_channels=16, joint_attention_dim=4096,
                        num_attention_heads=38, num_layers=38, out_channels=16, patch_size=2,
                        pooled_projection_dim=2048, pos_embed_max_size=192, qk_norm="rms_norm", sample_size=128),
    "flux.1-dev": dict(attention_head_dim=128, axes_dims_rope=(16, 56, 56), guidance_embeds=True, in_channels=64,
                       joint_attention_dim=4096, num_attention_heads=24, num_layers=19, num_single_layers=38,
                       patch_size=1, pooled_projection_dim=768),
}
# adapted linear layers, each hidden x hidden: SD3 blocks have 8 (q, k, v, out + the 4 context projections; the last
# block is context_pre_only: no to_add_out) and the 13 dual-attention blocks of 3.5 Medium 4 more (attn2: q, k, v,
# out); FLUX has 8 per double-stream block and 3 per single-stream block (q, k, v; its output is proj_out, an MLP)
LORA_LAYERS = {"sd3.5-medium": 24 * 8 - 1 + 13 * 4, "sd3.5-large": 38 * 8 - 1, "flux.1-dev": 19 * 8 + 38 * 3}
PARAMETERS = {"sd3.5-medium": 2_243_171_520, "sd3.5-large": 8_056_627_520, "flux.1-dev": 11_901_408_320}  # 2.2/8.1/12 B


@pytest.fixture(scope="module", params=list(PUBLISHED))
def meta_model(request):
    return request.param, build_on_meta(request.param)


def test_configs_are_the_published_ones():
    assert {name: arch.config for name, arch in ARCHITECTURES.items()} == PUBLISHED


@pytest.mark.parametrize("rank", [1, 32])
@pytest.mark.parametrize("name", list(PUBLISHED))
def test_lora_on_meta_targets_and_counts(name, rank):
    model = build_on_meta(name)
    frozen = sum(p.numel() for p in model.parameters())
    assert frozen == PARAMETERS[name] and next(model.parameters()).device.type == "meta"
    add_lora(model, rank, None)
    adapted = {n for n, m in model.named_modules() if hasattr(m, "lora_A")}
    hidden = ARCHITECTURES[name].hidden
    assert len(adapted) == LORA_LAYERS[name]
    for target in LORA_TARGETS:  # every target name matches layers of every real architecture
        assert any(n.endswith(target) for n in adapted), target
    trainable = trainable_weights(model)
    assert sum(p.numel() for p in trainable.values()) == LORA_LAYERS[name] * rank * 2 * hidden
    assert all("lora_" in n and p.dtype == torch.float32 for n, p in trainable.items())
    base = sum(p.numel() for n, p in model.named_parameters() if "lora_" not in n)
    assert base == frozen and not any(p.requires_grad for n, p in model.named_parameters() if "lora_" not in n)


def test_kl_reference_of_lora_shares_the_weights(meta_model):
    from workbench.flow.policy import FlowPolicy

    name, model = meta_model
    policy = FlowPolicy()
    policy.transformer, policy.latent_shape = model, (16, 8, 8)
    if not any("lora_" in n for n, _ in model.named_parameters()):
        add_lora(model, 4, None)
    reference = reference_policy(policy, lora=True)
    assert isinstance(reference.transformer, AdaptersOff) and reference.transformer.config == model.config
    assert {id(p) for p in reference.transformer.parameters()} == {id(p) for p in model.parameters()}


def test_the_full_fine_tuning_kl_reference_is_a_frozen_copy(random_policy):
    """Without LoRA the reference is a deep copy of the transformer that no optimizer step can move."""
    reference = reference_policy(random_policy, lora=False)
    weights = dict(reference.transformer.named_parameters())
    assert weights and not any(p.requires_grad for p in weights.values()) and not reference.transformer.training
    originals = dict(random_policy.transformer.named_parameters())
    assert all(torch.equal(p, originals[n]) and p is not originals[n] for n, p in weights.items())


def test_kl_reference_is_the_base_model_with_adapters_off(tmp_path):
    """On a tiny SD3: after the LoRA moved, the reference still predicts what the model predicted before LoRA."""
    from tiny_pipelines import save_tiny_sd3

    from workbench.flow.sampler import initial_noise
    from workbench.models.adapters import load_model

    policy = load_model(save_tiny_sd3(tmp_path / "sd3"), device="cpu", resolution=16, max_sequence_length=8)
    cond = policy.encode(["a cat"])
    x, sigma = initial_noise((1, *policy.latent_shape), seed=1), torch.tensor([0.6])
    with torch.no_grad():
        before = policy.velocity(x, sigma, cond)
        add_lora(policy.transformer, 4, None)
        for p in trainable_weights(policy.transformer).values():
            p.add_(0.1)
        moved = policy.velocity(x, sigma, cond)
        reference = reference_policy(policy, lora=True).velocity(x, sigma, cond)
        after = policy.velocity(x, sigma, cond)  # the adapters are on again after the reference's call
    assert not torch.allclose(moved, before, atol=1e-4)
    torch.testing.assert_close(reference, before)
    torch.testing.assert_close(after, moved)


def test_enable_checkpointing_asks_the_model_and_says_what_to_turn_off():
    """diffusers' models say `_supports_gradient_checkpointing`; one that does not (or has no such flag) is refused."""
    import re

    from workbench.core.errors import WorkbenchError
    from workbench.train.trainable import enable_checkpointing

    class Checkpointable(torch.nn.Linear):
        _supports_gradient_checkpointing = True
        enabled = False

        def enable_gradient_checkpointing(self):
            self.enabled = True

    model = Checkpointable(2, 2)
    enable_checkpointing(model)
    assert model.enabled
    message = "this model does not support gradient checkpointing; turn gradient_checkpointing off"
    class Unsupported(Checkpointable):
        _supports_gradient_checkpointing = False

    for bare in (torch.nn.Linear(2, 2), Unsupported(2, 2)):  # no flag, or the flag off
        with pytest.raises(WorkbenchError, match="^" + re.escape(message) + "$"):
            enable_checkpointing(bare)


def test_a_run_refuses_an_architecture_and_loads_its_model_on_the_cpu_whatever_its_rank(model_dir):
    """`load_base_policy`: an architecture's shapes plan a run but cannot train one; a run loads the model folder it
    names, and a CPU process of a two-process run keeps the CPU (only a CUDA device becomes the process's GPU)."""
    from workbench.core.errors import WorkbenchError
    from workbench.models.adapters import load_model
    from workbench.train.config import TrainConfig
    from workbench.train.distributed import DistInfo
    from workbench.train.trainable import load_base_policy

    with pytest.raises(WorkbenchError) as refused:
        load_base_policy(TrainConfig(model="meta:sd3.5-medium", device="cpu"), DistInfo())
    assert str(refused.value) == ("--model meta:sd3.5-medium is an architecture's shapes without weights: it plans a "
                                  "run (workbench train --dry-run); give a model folder to train")
    policy = load_base_policy(TrainConfig(model=str(model_dir), device="cpu"), DistInfo(rank=1, world=2, local_rank=1))
    assert policy.device.type == "cpu" and {p.device.type for p in policy.transformer.parameters()} == {"cpu"}
    saved = load_model(model_dir, device="cpu").transformer.state_dict()  # random weights, not the shipped model's
    assert all(torch.equal(w, saved[k]) for k, w in policy.transformer.state_dict().items())


def test_a_run_loads_a_pipeline_folder_in_its_dtype_with_the_text_encoders_where_it_asks(sd3_dir):
    from workbench.models.offload import PromptCache
    from workbench.train.config import TrainConfig
    from workbench.train.distributed import DistInfo
    from workbench.train.trainable import load_base_policy

    for offload in (True, False):
        config = TrainConfig(model=str(sd3_dir), device="cpu", dtype="bfloat16", offload_text_encoders=offload)
        policy = load_base_policy(config, DistInfo())
        assert next(policy.transformer.parameters()).dtype == torch.bfloat16
        assert isinstance(policy.encode, PromptCache) is offload
