"""`workbench train --dry-run`: the sizes of a run's model read from its configs (the transformer built on the meta
device, the other weights counted from their safetensors headers: nothing loads), the memory estimate of
`memory.estimate_memory` and its verdict against the device.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import torch

from workbench.core.errors import WorkbenchError
from workbench.models.architectures import FLUX_T5_TOKENS, SD3_T5_TOKENS
from workbench.models.config_checks import check_model_folder
from workbench.train.config import TrainConfig
from workbench.train.memory import REWARD_MODEL_PARAMS, MemoryEstimate, ModelSizes, RunSizes, estimate_memory, verdict
from workbench.train.prompt_sets import is_pipeline_folder
from workbench.train.trainable import LORA_TARGETS

# the policies' defaults: 77 CLIP + T5 tokens (models/adapters.py)
TEXT_TOKENS = {"SD3Transformer2DModel": 77 + SD3_T5_TOKENS, "FluxTransformer2DModel": FLUX_T5_TOKENS}


def lora_params_per_rank(transformer: torch.nn.Module) -> int:
    """LoRA parameters per unit of rank: sum of (in + out) over the linear layers the workbench adapts."""
    return sum(m.in_features + m.out_features for name, m in transformer.named_modules()
               if isinstance(m, torch.nn.Linear) and any(name == t or name.endswith("." + t) for t in LORA_TARGETS))


def _meta_transformer(class_name: str, config: dict) -> torch.nn.Module:
    import diffusers

    with torch.device("meta"):
        return getattr(diffusers, class_name)(**{k: v for k, v in config.items() if not k.startswith("_")})


def _safetensors_params(folder: Path) -> int:
    """Parameters stored in a folder's safetensors files, read from their headers."""
    from safetensors import safe_open

    total = 0
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(str(file), "pt") as f:
            for key in f.keys():
                n = 1
                for d in f.get_slice(key).get_shape():
                    n *= d
                total += n
    return total


def transformer_sizes(transformer: torch.nn.Module, class_name: str, resolution: int, vae_factor: int,
                      text_tokens: int) -> dict:
    """The ModelSizes fields a transformer (on any device) determines at a resolution."""
    cfg = transformer.config
    patch = cfg.patch_size if class_name == "SD3Transformer2DModel" else 2
    channels = cfg.in_channels if class_name == "SD3Transformer2DModel" else cfg.in_channels // 4
    side = resolution // vae_factor
    return dict(transformer_params=sum(p.numel() for p in transformer.parameters()),
                blocks=cfg.num_layers + getattr(cfg, "num_single_layers", 0),
                width=cfg.num_attention_heads * cfg.attention_head_dim,
                tokens=(side // patch) ** 2 + text_tokens, latent_elements=channels * side * side,
                image_pixels=resolution * resolution, lora_params_per_rank=lora_params_per_rank(transformer))


@lru_cache(maxsize=16)
def folder_sizes(folder: Path, resolution: int | None, weight_bytes: int, max_sequence_length: int | None = None):
    """ModelSizes of a diffusers SD3 / FLUX folder, from its configs and safetensors headers."""
    index = json.loads((folder / "model_index.json").read_text())
    tcfg = json.loads((folder / "transformer" / "config.json").read_text())
    vcfg = json.loads((folder / "vae" / "config.json").read_text())
    class_name = tcfg["_class_name"]
    factor = 2 ** (len(vcfg["block_out_channels"]) - 1)
    default = tcfg.get("sample_size", 128) * factor if class_name == "SD3Transformer2DModel" else 128 * factor
    resolution = resolution or default
    text = [k for k in index if k.startswith("text_encoder") and isinstance(index[k], list) and index[k][0]]
    text_tokens = TEXT_TOKENS[class_name] if max_sequence_length is None else (
        (77 if class_name == "SD3Transformer2DModel" else 0) + max_sequence_length)
    sizes = transformer_sizes(_meta_transformer(class_name, tcfg), class_name, resolution, factor, text_tokens)
    return ModelSizes(**sizes, text_encoder_bytes=weight_bytes * sum(_safetensors_params(folder / k) for k in text),
                      vae_params=_safetensors_params(folder / "vae"), vae_decode_channels=decode_channels(vcfg))


def decode_channels(vae_config: dict) -> int:
    """Channels live at full resolution at the VAE decoder's peak: the upsampled input of its last up block (the
    second-smallest width) plus two tensors of its own width; 512 for the SD3 / FLUX VAE (128, 256, 512, 512)."""
    widths = vae_config["block_out_channels"]
    return (widths[1] if len(widths) > 1 else widths[0]) + 2 * widths[0]


@lru_cache(maxsize=8)
def architecture_sizes(name: str, resolution: int) -> ModelSizes:
    """ModelSizes of a published architecture (`models.architectures`) at a resolution, built on the meta device."""
    from workbench.models.architectures import ARCHITECTURES, build_on_meta

    arch = ARCHITECTURES[name]
    sizes = transformer_sizes(build_on_meta(name), arch.transformer_class, resolution, arch.vae_factor,
                              arch.text_tokens)
    return ModelSizes(**sizes, text_encoder_bytes=arch.text_encoder_bytes, vae_params=arch.vae_params,
                      vae_decode_channels=512)


def embedded_sizes(folder: str | None) -> ModelSizes:
    """ModelSizes of the embedded model (pixel space, 32 px, tiny text encoder)."""
    from workbench.models.embedded import CONFIG_FILE, DEFAULT_WEIGHTS, EmbeddedConfig

    config = EmbeddedConfig(**json.loads((Path(folder or DEFAULT_WEIGHTS) / CONFIG_FILE).read_text()))
    tcfg = vars(config.transformer)
    size = tcfg["sample_size"]
    sizes = transformer_sizes(_meta_transformer("SD3Transformer2DModel", tcfg), "SD3Transformer2DModel", size, 1,
                              config.text.max_length)
    return ModelSizes(**sizes)


def run_sizes(config: TrainConfig, device: str, world: int = 1) -> RunSizes:
    """The RunSizes of a TrainConfig on `device`."""
    from workbench.rewards import parse_reward_spec

    pipeline = is_pipeline_folder(config.model)
    named = set(parse_reward_spec(config.reward)) if config.reward else set()
    bf16 = config.dtype == "bfloat16"
    return RunSizes(group=config.group, sampling_steps=config.sampling_steps,
                    trained_steps=len(config.trained_steps(1)), prompts=-(-config.prompts_per_iteration // world),
                    transitions_per_pass=min(config.micro_batch or config.minibatch_size, config.minibatch_size),
                    lora_rank=config.lora_rank, weight_bytes=2 if pipeline and bf16 else 4,
                    compute_bytes=2 if bf16 else 4, checkpointing=config.checkpointing, kl=config.kl_beta > 0,
                    cfg=config.guidance_scale != 1.0, text_encoders_on_device=not config.offload_text_encoders,
                    decode_batch=1 if config.vae_tiling else 4,
                    reward_params=sum(REWARD_MODEL_PARAMS.get(n, 0) for n in named), device=device.split(":")[0])


def estimate_run(config: TrainConfig, device: str | None = None) -> tuple[MemoryEstimate, str]:
    """(estimate, verdict line) of a run's first iteration on its device, without loading any weights."""
    from workbench.core.budget import free_bytes
    from workbench.models.adapters import default_device

    device = device or config.device or default_device()
    check_model_folder(config.model)  # damaged or absurd configs are refused here, before the meta build
    run = run_sizes(config, device)
    if is_pipeline_folder(config.model):
        model = folder_sizes(Path(config.model).expanduser(), config.resolution, run.weight_bytes,
                             config.max_sequence_length)
    elif config.model is not None and not (Path(config.model) / "config.json").is_file():
        raise WorkbenchError(f"{config.model} is not a model folder; the estimate needs its configs")
    else:
        model = embedded_sizes(config.model)
    estimate = estimate_memory(model, run)
    return estimate, verdict(estimate, free_bytes(device), device)
