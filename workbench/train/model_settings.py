"""The settings of a fine-tune whose defaults depend on the model: 'auto' in `TrainConfig`, resolved here.

For SD3 / FLUX (a diffusers folder, or a published architecture's shapes 'meta:NAME' for `--dry-run`) a run
defaults to what fits one 80 GB GPU (docs/methods.md "Defaults of a real-model run"): LoRA r 32 (Flow-GRPO's),
bfloat16 weights (log-prob maths stays float32), 512 px (Flow-GRPO trains SD3.5-M at 512; a model whose own
resolution is smaller keeps its own), gradient checkpointing on; the micro-batch and whether the text encoders
leave the device are chosen from the memory estimate against the device (`dry_run.plan_run`). The embedded model
keeps its own: full fine-tuning, float32, 32 px, no checkpointing, the whole minibatch in one pass.

    model_defaults(TrainConfig(model="models/sd3.5-medium")).lora_rank   # -> 32
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from workbench.core.errors import WorkbenchError
from workbench.models.architectures import meta_architecture
from workbench.train.prompt_sets import is_pipeline_folder

AUTO = "auto"
REAL_LORA_RANK = 32  # Flow-GRPO's LoRA r 32 / alpha 64 (its SD3.5-M configs)
REAL_DTYPE = "bfloat16"  # weights and autocast; log-probs stay float32 (flow/sde.py)
REAL_RESOLUTION = 512  # Flow-GRPO's SD3.5-M resolution; a quarter of the tokens of the models' own 1024


def is_real_model(model: str | None) -> bool:
    """Whether `model` names an SD3 / FLUX model: a diffusers folder, or a published architecture's shapes
    ('meta:sd3.5-medium', `models.architectures`: only `--dry-run` plans with those)."""
    return is_pipeline_folder(model) or meta_architecture(model) is not None


def native_resolution(folder: str | Path) -> int:
    """The image side a diffusers SD3 / FLUX folder makes by default (its pipeline's): SD3 sample_size x the VAE
    factor, FLUX 128 x the VAE factor; SD3.5 and FLUX.1: 1024. 1024 for a published architecture (`meta:NAME`)."""
    if meta_architecture(str(folder)) is not None:
        return 1024
    folder = Path(folder).expanduser()
    try:
        tcfg = json.loads((folder / "transformer" / "config.json").read_text())
        vcfg = json.loads((folder / "vae" / "config.json").read_text())
        factor = 2 ** (len(vcfg["block_out_channels"]) - 1)
        sd3 = tcfg["_class_name"] == "SD3Transformer2DModel"
        return (tcfg.get("sample_size", 128) if sd3 else 128) * factor
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise WorkbenchError(f"cannot read the transformer and VAE configs of {folder} ({err}); re-download the "
                             "model") from None


def check_model_settings(config) -> None:
    """Refuse model-dependent settings that are neither 'auto' nor a valid value (a TrainConfig calls this)."""
    for name, what in (("lora_rank", "an integer >= 0"), ("resolution", "a positive integer or None"),
                       ("micro_batch", "a positive integer or None"), ("offload_text_encoders", "true or false")):
        if isinstance(getattr(config, name), str) and getattr(config, name) != AUTO:
            raise WorkbenchError(f"{name} must be 'auto' or {what}, got '{getattr(config, name)}'")
    for name in ("resolution", "micro_batch", "max_sequence_length"):
        if isinstance(getattr(config, name), int) and getattr(config, name) < 1:
            raise WorkbenchError(f"{name} must be a positive integer, 'auto' or None, got {getattr(config, name)}")
    if isinstance(config.lora_rank, int) and config.lora_rank < 0:
        raise WorkbenchError(f"lora_rank must be >= 0 (0 = full fine-tuning), got {config.lora_rank}")
    if config.dtype not in (AUTO, "float32", "bfloat16"):
        raise WorkbenchError(f"dtype must be auto, float32 or bfloat16, got '{config.dtype}'")
    real = is_real_model(config.model)
    if (config.offload_text_encoders is True or config.vae_tiling) and not real:
        raise WorkbenchError("offload_text_encoders and vae_tiling apply to SD3 / FLUX models (--model with "
                             "model_index.json); turn them off for the embedded model")
    if config.max_sequence_length is not None and not real:
        raise WorkbenchError(f"max_sequence_length {config.max_sequence_length}: the embedded model has no T5; "
                             "drop it or give an SD3 / FLUX folder")
    if isinstance(config.resolution, int) and not real:
        raise WorkbenchError(f"resolution {config.resolution}: the embedded model makes 32 px images only; "
                             "drop resolution or give an SD3 / FLUX folder")
    if config.fsdp and config.lora_rank not in (0, AUTO):
        raise WorkbenchError(f"fsdp shards the weights of a full fine-tune; with LoRA (lora_rank {config.lora_rank}) "
                             "every GPU holds the frozen model anyway: drop fsdp (DDP) or set lora_rank 0")


def model_defaults(config):
    """`config` with its model-dependent 'auto' settings resolved for its model, except the two the device decides
    (micro_batch and offload_text_encoders stay 'auto' for SD3 / FLUX: `dry_run.plan_run` picks them). This is
    what a run stores: a resume or a loaded checkpoint means the same model, dtype and resolution."""
    real = is_real_model(config.model)
    values = {}
    if config.lora_rank == AUTO:
        values["lora_rank"] = REAL_LORA_RANK if real and not config.fsdp else 0
    if config.dtype == AUTO:
        values["dtype"] = REAL_DTYPE if real else "float32"
    if config.resolution == AUTO:  # 512, or the model's own when smaller (a small model is not upsampled)
        values["resolution"] = min(REAL_RESOLUTION, native_resolution(config.model)) if real else None
    if config.gradient_checkpointing is None:
        values["gradient_checkpointing"] = real
    if not real:
        values |= {name: value for name, value in (("micro_batch", None), ("offload_text_encoders", False))
                   if getattr(config, name) == AUTO}
    return replace(config, **values) if values else config


def auto_settings(config) -> list[str]:
    """The names of the settings `config` leaves to the model or the device ('auto', or None for checkpointing)."""
    names = [n for n in ("lora_rank", "dtype", "resolution", "micro_batch", "offload_text_encoders")
             if getattr(config, n) == AUTO]
    return names + (["gradient_checkpointing"] if config.gradient_checkpointing is None else [])
