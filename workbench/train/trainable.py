"""What a fine-tune trains: the base policy, LoRA adapters or all weights, and checkpoint weights
(`train.sources.load_policy` loads a run's checkpoint with them).

Full fine-tuning for the embedded model; LoRA (peft, through diffusers' `add_adapter`) on the
attention projections of real SD3 / FLUX transformers (Flow-GRPO r 32 / alpha 64).
"""

from __future__ import annotations

import copy

import torch

from workbench.core.errors import WorkbenchError
from workbench.flow.policy import FlowPolicy
from workbench.train.config import TrainConfig
from workbench.train.distributed import DistInfo
from workbench.train.prompt_sets import is_pipeline_folder

# attention projections of diffusers' attention blocks (SD3 / FLUX MMDiT, UNet attn1 / attn2), matched by name suffix
LORA_TARGETS = ["to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out"]


def load_base_policy(config: TrainConfig, info: DistInfo) -> FlowPolicy:
    """The policy named by a resolved config's model (`dry_run.plan_run`) on config.device (per-process GPU under
    accelerate launch / torchrun)."""
    from workbench.models.adapters import default_device, load_model
    from workbench.models.architectures import meta_architecture

    if meta_architecture(config.model) is not None:
        raise WorkbenchError(f"--model {config.model} is an architecture's shapes without weights: it plans a run "
                             "(workbench train --dry-run); give a model folder to train")
    device = config.device or default_device()
    if device == "cuda" and info.world > 1:
        device = f"cuda:{info.local_rank}"
        torch.cuda.set_device(info.local_rank)
    if not is_pipeline_folder(config.model):
        return load_model(config.model, device=device)
    options = {name: getattr(config, name) for name in ("resolution", "max_sequence_length")
               if isinstance(getattr(config, name), int)}
    policy = load_model(config.model, device=device, dtype=config.dtype,
                        offload_text_encoders=config.offload_text_encoders is True, **options)
    if config.lora is not None:  # model + adapter is the base this run fine-tunes (`models.lora.merge_adapter`)
        from workbench.models.lora import merge_adapter

        merge_adapter(policy, config.lora)
    return policy


def add_lora(transformer: torch.nn.Module, rank: int, alpha: float | None, seed: int | None = None) -> None:
    """LoRA adapters on the attention projections (peft via diffusers' `add_adapter`); only they train. With `seed`
    the gaussian initial weights are drawn from it (the same on every process and every run of the seed)."""
    from peft import LoraConfig

    device = next(transformer.parameters()).device  # peft's injection freezes every weight but the adapters'
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            if seed is not None:
                torch.manual_seed(seed)
            transformer.add_adapter(LoraConfig(r=rank, lora_alpha=alpha or 2 * rank, init_lora_weights="gaussian",
                                               target_modules=LORA_TARGETS))
    except ValueError as err:  # peft: no module matches the targets
        raise WorkbenchError(f"cannot add LoRA adapters to this model ({str(err).splitlines()[0]}); "
                             "use lora_rank 0 for full fine-tuning") from None
    for name, p in transformer.named_parameters():
        if "lora_" in name:
            p.data = p.data.float()
            p.requires_grad_(True)


def set_adapters(transformer: torch.nn.Module, enabled: bool) -> None:
    """Turn every LoRA adapter of the transformer on or off (peft's tuner layers); off = the base model."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    for module in transformer.modules():
        if isinstance(module, BaseTunerLayer):
            module.enable_adapters(enabled)


class AdaptersOff:
    """The transformer with its LoRA adapters disabled during each call: the KL reference of a LoRA run without
    a copy of the weights (Flow-GRPO's `with transformer.module.disable_adapter()`). Attributes pass through."""

    def __init__(self, transformer: torch.nn.Module):
        self._transformer = transformer

    def __getattr__(self, name: str):
        return getattr(self._transformer, name)

    @torch.no_grad()
    def __call__(self, *args, **kwargs):
        set_adapters(self._transformer, False)
        try:
            return self._transformer(*args, **kwargs)
        finally:
            set_adapters(self._transformer, True)


def reference_policy(policy: FlowPolicy, lora: bool) -> FlowPolicy:
    """The KL reference, the initial model: with LoRA the policy with its adapters disabled (call after
    `add_lora`); for full fine-tuning a frozen deep copy of the transformer (call before training)."""
    if lora:
        return policy.with_transformer(AdaptersOff(policy.transformer))
    return policy.with_transformer(copy.deepcopy(policy.transformer).requires_grad_(False).eval())


def enable_checkpointing(transformer: torch.nn.Module) -> None:
    """Gradient checkpointing (diffusers' `enable_gradient_checkpointing`), else a WorkbenchError saying why."""
    if not getattr(transformer, "_supports_gradient_checkpointing", False):
        raise WorkbenchError("this model does not support gradient checkpointing; turn gradient_checkpointing off")
    transformer.enable_gradient_checkpointing()


def apply_memory_switches(policy: FlowPolicy, config: TrainConfig) -> None:
    """The TrainConfig switches that change how a real policy holds its parts (`models.offload`)."""
    from workbench.models.offload import offload_text_encoders, slice_vae

    if config.offload_text_encoders:
        offload_text_encoders(policy)
    if config.vae_tiling:
        slice_vae(policy)


def trainable_weights(transformer: torch.nn.Module) -> dict[str, torch.Tensor]:
    """name -> parameter of everything that trains (all weights, or only the LoRA adapters)."""
    return {n: p for n, p in transformer.named_parameters() if p.requires_grad}


def copy_weights(transformer: torch.nn.Module, weights: dict[str, torch.Tensor]) -> None:
    """Load checkpoint `weights` into the transformer's trainable parameters (names and shapes must match exactly:
    `copy_` would broadcast a (1,) tensor into any weight)."""
    params = trainable_weights(transformer)
    if set(params) != set(weights):
        raise WorkbenchError("the checkpoint's weights do not match the model's trainable parameters; "
                             "was it made with another model or lora_rank?")
    for name, p in params.items():
        if weights[name].shape != p.shape:
            raise WorkbenchError(f"the checkpoint's {name} is {tuple(weights[name].shape)}, the model's "
                                 f"{tuple(p.shape)}; was it made with another model or lora_rank?")
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(weights[name].to(p))
