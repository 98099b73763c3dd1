"""LoRA adapters in the formats other tools read and write: out of a LoRA run, into an SD3 / FLUX policy.

Out: `lora_file(policy)` takes the trained adapter of a policy's transformer with peft's `get_peft_model_state_dict`
and `save_lora_file` writes it with the pipeline class's `save_lora_weights`: `pytorch_lora_weights.safetensors`,
diffusers' key naming (`transformer.transformer_blocks.0.attn.to_q.lora_A.weight`) and the adapter's LoraConfig
(rank, alpha, targets) in the file's metadata, so `pipe.load_lora_weights(folder)` gives back the same model.

In: `load_adapter(policy, folder)` applies an adapter folder to an SD3 / FLUX policy, in either format:

    diffusers  pytorch_lora_weights.safetensors  (the run store's checkpoints, DanceGRPO, diffusers' scripts)
               loaded by the pipeline's own `load_lora_weights`
    PEFT       adapter_config.json + adapter_model.safetensors (or .bin)  (`PeftModel.save_pretrained`: Flow-GRPO)
               loaded by peft: the LoraConfig onto the transformer (diffusers' `add_adapter`), then its weights
               (`set_peft_model_state_dict`)

Both are checked against the base first: every adapted layer must exist in the model with the adapter's shapes,
so an adapter of another model is one message, not a silently partial load.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from workbench.core.errors import WorkbenchError

LORA_FILE = "pytorch_lora_weights.safetensors"  # diffusers' LoRA file name (save_lora_weights / load_lora_weights)
PEFT_CONFIG = "adapter_config.json"  # PEFT's adapter folder: this config beside one of PEFT_WEIGHTS
PEFT_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
PEFT_PREFIX = "base_model.model."  # the PeftModel wrapper's prefix in a saved PEFT adapter's keys
ADAPTER_NAME = "external"  # the name of an adapter loaded from a folder (a run's own LoRA is peft's "default")
FORMATS = (f"diffusers ({LORA_FILE}) or PEFT ({PEFT_CONFIG} + {PEFT_WEIGHTS[0]})")


@dataclass(frozen=True)
class LoraFile:
    """A trained LoRA ready to leave: its pipeline class, the peft state dict of the transformer's adapter
    (keys `transformer_blocks.0.attn.to_q.lora_A.weight`) and the adapter's LoraConfig as a dict."""

    pipeline: str  # the diffusers pipeline class whose save_lora_weights writes it, e.g. StableDiffusion3Pipeline
    layers: dict[str, torch.Tensor]
    metadata: dict


def lora_file(policy) -> LoraFile | None:
    """The LoRA of an SD3 / FLUX policy's transformer (its active peft adapter), on the CPU; None for a policy
    without a diffusers pipeline or without an adapter (full fine-tuning, the embedded model)."""
    pipe, transformer = getattr(policy, "pipe", None), getattr(policy, "transformer", None)
    for wrapper in ("module", "_orig_mod"):  # DistributedDataParallel's and torch.compile's wrapped model
        transformer = getattr(transformer, wrapper, transformer)
    configs = getattr(transformer, "peft_config", None)
    if pipe is None or not configs:
        return None
    from peft.utils import get_peft_model_state_dict

    name = "default" if "default" in configs else next(iter(configs))
    layers = {k: v.detach().to("cpu", copy=True).contiguous()
              for k, v in get_peft_model_state_dict(transformer, adapter_name=name).items()}
    return LoraFile(type(pipe).__name__, layers, configs[name].to_dict())


def save_lora_file(folder: str | Path, lora: LoraFile) -> Path:
    """Write `folder/pytorch_lora_weights.safetensors` with the pipeline class's `save_lora_weights`."""
    import diffusers

    getattr(diffusers, lora.pipeline).save_lora_weights(str(folder), transformer_lora_layers=lora.layers,
                                                        transformer_lora_adapter_metadata=lora.metadata)
    return Path(folder) / LORA_FILE


def adapter_format(folder: str | Path) -> str:
    """'diffusers' or 'peft': the format of an adapter folder, checked on disk without reading weights; anything
    else (no such folder, a file, a config without its weights, neither) is a WorkbenchError naming it."""
    path = Path(str(folder).strip()).expanduser()
    if not path.exists():
        raise WorkbenchError(f"LoRA adapter {path} does not exist; give a folder holding a {FORMATS} adapter")
    if path.is_file() and path.name in (LORA_FILE, PEFT_CONFIG, *PEFT_WEIGHTS):
        raise WorkbenchError(f"LoRA adapter {path} is a file; give the folder that holds it ({path.parent})")
    if not path.is_dir():
        raise WorkbenchError(f"LoRA adapter {path} is not a folder; give a folder holding a {FORMATS} adapter")
    if (path / LORA_FILE).is_file():
        return "diffusers"
    if (path / PEFT_CONFIG).is_file():
        if not any((path / name).is_file() for name in PEFT_WEIGHTS):
            raise WorkbenchError(f"LoRA adapter {path} has {PEFT_CONFIG} but no weights ({' or '.join(PEFT_WEIGHTS)});"
                                 " copy the whole adapter folder")
        return "peft"
    if any((path / name).is_file() for name in PEFT_WEIGHTS):
        raise WorkbenchError(f"LoRA adapter {path} has PEFT weights but no {PEFT_CONFIG}; copy the whole adapter "
                             "folder")
    raise WorkbenchError(f"{path} holds no LoRA adapter: expected {FORMATS}")


def load_adapter(policy, folder: str | Path) -> None:
    """Apply the LoRA adapter in `folder` (diffusers or PEFT format) to an SD3 / FLUX policy's transformer, in
    place. A folder that is not a LoRA of this model is a WorkbenchError naming the adapter and why."""
    path = Path(str(folder).strip()).expanduser()
    kind = adapter_format(path)
    if getattr(policy, "pipe", None) is None:
        raise WorkbenchError(f"LoRA adapter {path}: adapters apply to SD3 / FLUX diffusers folders, not to the "
                             "embedded model; give a diffusers base folder")
    if kind == "diffusers":
        _load_diffusers(policy, path)
    else:
        _load_peft(policy, path)
    policy.transformer.requires_grad_(False).eval()


def merge_adapter(policy, folder: str | Path) -> None:
    """Apply the adapter in `folder` and fold it into the transformer's weights (diffusers' `fuse_lora`, then
    `unload_lora`): no LoRA layer is left, so a fine-tune can add its own on top of model + adapter."""
    load_adapter(policy, folder)
    policy.transformer.fuse_lora()
    policy.transformer.unload_lora()


def _modules(transformer: torch.nn.Module) -> dict[str, torch.nn.Module]:
    return dict(transformer.named_modules())


def _check_layers(path: Path, layers: dict[str, torch.Tensor], transformer: torch.nn.Module) -> None:
    """Every adapted layer (`<module>.lora_A.weight` / `.lora_B.weight`) exists in the transformer and its LoRA
    factors fit the layer's in / out features; else a WorkbenchError: the adapter belongs to another model."""
    modules = _modules(transformer)
    targets = {}
    for key, tensor in layers.items():
        module, found, part = key.partition(".lora_")
        if found:
            targets.setdefault(module, {})[part.split(".")[0]] = tensor
    if not targets:
        raise WorkbenchError(f"{path} is not a LoRA adapter of a transformer: it holds no lora_A / lora_B weights")
    missing = sorted(m for m in targets if m not in modules)
    if missing:
        raise WorkbenchError(f"LoRA adapter {path} does not fit this model: {len(missing)} of its {len(targets)} "
                             f"layers are not in the transformer (e.g. {missing[0]}); was it trained on another "
                             "base model?")
    for module, parts in sorted(targets.items()):
        layer = getattr(modules[module], "base_layer", modules[module])
        fan_in, fan_out = getattr(layer, "in_features", None), getattr(layer, "out_features", None)
        a, b = parts.get("A"), parts.get("B")
        if (a is not None and fan_in is not None and a.shape[-1] != fan_in) or (
                b is not None and fan_out is not None and b.shape[0] != fan_out):
            shapes = " and ".join(f"lora_{k} {tuple(v.shape)}" for k, v in sorted(parts.items()))
            raise WorkbenchError(f"LoRA adapter {path} does not fit this model: layer {module} is {fan_in} -> "
                                 f"{fan_out} features but the adapter has {shapes}; was it trained on another base "
                                 "model?")


def _load_diffusers(policy, path: Path) -> None:
    """diffusers' format through the pipeline's own loader, after the layers are checked against the model."""
    pipe = policy.pipe
    try:
        state = type(pipe).lora_state_dict(str(path))
    except (OSError, ValueError, RuntimeError, KeyError) as err:
        raise WorkbenchError(f"cannot read LoRA adapter {path / LORA_FILE} ({_first_line(err)})") from None
    prefix = "transformer."
    layers = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    if not layers and state:
        raise WorkbenchError(f"LoRA adapter {path} adapts no transformer layer (its keys start with "
                             f"{sorted({k.split('.')[0] for k in state})[0]!r}); the workbench needs a LoRA of the "
                             "transformer")
    _check_layers(path, layers, policy.transformer)
    try:
        pipe.load_lora_weights(str(path), adapter_name=ADAPTER_NAME)
    except (OSError, ValueError, RuntimeError, KeyError, TypeError) as err:
        raise WorkbenchError(f"cannot load LoRA adapter {path} into this model ({_first_line(err)})") from None


def _load_peft(policy, path: Path) -> None:
    """PEFT's format: its LoraConfig onto the transformer, then its weights, both through peft."""
    from peft import LoraConfig
    from peft.utils import load_peft_weights, set_peft_model_state_dict

    try:
        saved = json.loads((path / PEFT_CONFIG).read_text())
    except (OSError, ValueError) as err:
        raise WorkbenchError(f"cannot read {path / PEFT_CONFIG} ({_first_line(err)})") from None
    kind = saved.get("peft_type") if isinstance(saved, dict) else None
    if kind != "LORA":
        raise WorkbenchError(f"adapter {path} is a {kind or 'non-PEFT'} adapter, not LoRA ({PEFT_CONFIG} says "
                             f"peft_type {kind!r}); the workbench loads LoRA adapters")
    try:
        config = LoraConfig.from_pretrained(str(path))
        weights = load_peft_weights(str(path), device="cpu")
    except (OSError, ValueError, TypeError, RuntimeError) as err:
        raise WorkbenchError(f"cannot read LoRA adapter {path} ({_first_line(err)})") from None
    layers = {k.removeprefix(PEFT_PREFIX): v for k, v in weights.items()}
    _check_layers(path, layers, policy.transformer)
    transformer = policy.transformer
    try:
        transformer.add_adapter(config, adapter_name=ADAPTER_NAME)
        result = set_peft_model_state_dict(transformer, layers, adapter_name=ADAPTER_NAME)
    except (ValueError, RuntimeError, KeyError, TypeError) as err:
        raise WorkbenchError(f"LoRA adapter {path} does not fit this model ({_first_line(err)}); was it trained on "
                             "another base model?") from None
    lacking = [k for k in result.missing_keys if ".lora_" in k and f".{ADAPTER_NAME}." in k]
    if result.unexpected_keys or lacking:
        example = (result.unexpected_keys or lacking)[0]
        raise WorkbenchError(f"LoRA adapter {path} does not match its own config on this model ({example} is "
                             f"{'not in the model' if result.unexpected_keys else 'not in the adapter'}); was it "
                             "trained on another base model?")
    dtype = next(p.dtype for n, p in transformer.named_parameters() if "lora_" not in n)
    for name, p in transformer.named_parameters():
        if f".{ADAPTER_NAME}." in name:
            p.data = p.data.to(dtype)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return (text.splitlines()[0] if text else type(err).__name__)[:200]
