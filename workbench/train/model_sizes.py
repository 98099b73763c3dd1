"""The sizes the memory estimate needs, read from a model's configs without loading any weight: the transformer
built on the meta device (its parameters, buffers, blocks, width, tokens and LoRA targets), the other parts counted
from their safetensors headers; published architectures (`meta:NAME`, `models.architectures`) from their configs.
`run_sizes` reads a TrainConfig's. `train/dry_run.py` turns them into a run's plan.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import torch

from workbench.core.errors import WorkbenchError
from workbench.models.architectures import FLUX_T5_TOKENS, SD3_T5_TOKENS, meta_architecture
from workbench.train.config import TrainConfig
from workbench.train.memory import REWARD_MODEL_PARAMS, ModelSizes, RunSizes
from workbench.train.model_settings import native_resolution
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
                buffer_elements=sum(b.numel() for b in transformer.buffers()),
                blocks=cfg.num_layers + getattr(cfg, "num_single_layers", 0),
                width=cfg.num_attention_heads * cfg.attention_head_dim,
                tokens=(side // patch) ** 2 + text_tokens, latent_elements=channels * side * side,
                image_pixels=resolution * resolution, lora_params_per_rank=lora_params_per_rank(transformer))


def folder_sizes(folder: Path, resolution: int | None, weight_bytes: int, max_sequence_length: int | None = None):
    """ModelSizes of a diffusers SD3 / FLUX folder, from its configs and safetensors headers."""
    index = json.loads((folder / "model_index.json").read_text())
    tcfg = json.loads((folder / "transformer" / "config.json").read_text())
    vcfg = json.loads((folder / "vae" / "config.json").read_text())
    class_name = tcfg["_class_name"]
    factor = 2 ** (len(vcfg["block_out_channels"]) - 1)
    resolution = resolution or native_resolution(folder)
    text = [k for k in index if k.startswith("text_encoder") and isinstance(index[k], list) and index[k][0]]
    text_tokens = TEXT_TOKENS[class_name] if max_sequence_length is None else (
        (77 if class_name == "SD3Transformer2DModel" else 0) + max_sequence_length)
    sizes = transformer_sizes(_meta_transformer(class_name, tcfg), class_name, resolution, factor, text_tokens)
    return ModelSizes(**sizes, text_encoder_bytes=weight_bytes * sum(_safetensors_params(folder / k) for k in text),
                      vae_params=_safetensors_params(folder / "vae"), vae_decode_channels=decode_channels(vcfg))


folder_sizes = lru_cache(maxsize=16)(folder_sizes)  # not a decorator: mutmut skips decorated functions


def decode_channels(vae_config: dict) -> int:
    """Channels live at full resolution at the VAE decoder's peak: the upsampled input of its last up block (the
    second-smallest width) plus two tensors of its own width; 512 for the SD3 / FLUX VAE (128, 256, 512, 512)."""
    widths = vae_config["block_out_channels"]
    return (widths[1] if len(widths) > 1 else widths[0]) + 2 * widths[0]


def architecture_sizes(name: str, resolution: int, max_sequence_length: int | None = None) -> ModelSizes:
    """ModelSizes of a published architecture (`models.architectures`) at a resolution, built on the meta device;
    max_sequence_length T5 tokens instead of the policy's default (SD3 128, FLUX 512)."""
    from workbench.models.architectures import ARCHITECTURES, build_on_meta

    arch = ARCHITECTURES[name]
    text = arch.text_tokens if max_sequence_length is None else (
        (77 if arch.transformer_class == "SD3Transformer2DModel" else 0) + max_sequence_length)
    sizes = transformer_sizes(build_on_meta(name), arch.transformer_class, resolution, arch.vae_factor, text)
    return ModelSizes(**sizes, text_encoder_bytes=arch.text_encoder_bytes, vae_params=arch.vae_params,
                      vae_decode_channels=512)


architecture_sizes = lru_cache(maxsize=16)(architecture_sizes)  # not a decorator: mutmut skips decorated functions


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
    """The RunSizes of a TrainConfig whose settings are resolved (`dry_run.plan_run`) on `device`, one of `world`
    processes: each holds the rollouts of its share of the prompts."""
    from workbench.rewards import parse_reward_spec

    real = is_pipeline_folder(config.model) or meta_architecture(config.model) is not None
    named = set(parse_reward_spec(config.reward)) if config.reward else set()
    bf16 = config.dtype == "bfloat16"
    micro = config.micro_batch if isinstance(config.micro_batch, int) else None
    return RunSizes(group=config.group, sampling_steps=config.sampling_steps,
                    trained_steps=len(config.trained_steps(1)), prompts=-(-config.prompts_per_iteration // world),
                    transitions_per_pass=min(micro or config.minibatch_size, config.minibatch_size),
                    lora_rank=config.lora_rank, weight_bytes=2 if real and bf16 else 4,
                    compute_bytes=2 if bf16 else 4, checkpointing=config.checkpointing, kl=config.kl_beta > 0,
                    cfg=config.guidance_scale != 1.0, text_encoders_on_device=config.offload_text_encoders is not True,
                    decode_batch=1 if config.vae_tiling else 4,
                    reward_params=sum(REWARD_MODEL_PARAMS.get(n, 0) for n in named), device=device.split(":")[0],
                    world=world, fsdp=config.fsdp)


def model_sizes(config: TrainConfig, weight_bytes: int) -> ModelSizes:
    """The ModelSizes of a resolved config's model (a folder, `meta:NAME` or the embedded model), loading nothing."""
    arch = meta_architecture(config.model)
    if arch is not None:
        return architecture_sizes(arch, config.resolution or 1024, config.max_sequence_length)
    if is_pipeline_folder(config.model):
        return folder_sizes(Path(config.model).expanduser(), config.resolution, weight_bytes,
                            config.max_sequence_length)
    folder = None if config.model is None else Path(config.model).expanduser()
    if folder is not None and not folder.exists():  # as models.adapters.load_model says it
        raise WorkbenchError(f"model folder {folder} does not exist; pass a local SD3/FLUX diffusers folder, "
                             "an embedded model folder, or no model for the embedded one")
    if folder is not None and not (folder / "config.json").is_file():
        raise WorkbenchError(f"{folder} is not a model folder: it has neither model_index.json (diffusers SD3/FLUX) "
                             "nor config.json (embedded); point the model path at the folder holding them")
    return embedded_sizes(config.model)
