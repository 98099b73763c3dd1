"""A model folder's configs checked before anything is built from them: their types, their sizes, and whether the
transformer they describe can fit.

diffusers builds a model from whatever its config.json says: `num_layers: 100000` builds for minutes and fills the
memory, `num_layers: -3` builds a transformer with no blocks that samples noise, `"sample_size": NaN` or a
`vae/config.json` that is a list fail deep inside it with an internal error. `check_model_folder` reads the configs
first (model_index.json, transformer/, vae/ and scheduler/ of a diffusers SD3 / FLUX folder; config.json of the
embedded format) and refuses, in one line naming the file and the field, what is not a JSON object, a size that
is not a whole number in its range (`ARCHITECTURE_LIMITS`), a non-finite number, a field the model class does not
take, and a transformer whose weights alone need more memory than the device has (`transformer_params`).
Loading (`models.adapters.load_model`) and `train --dry-run` call it; a fine-tuning run's folder given as a model
is named as what it is.
"""

from __future__ import annotations

import inspect
import json
import math
from pathlib import Path

from workbench.core.errors import WorkbenchError, shorten

# every size of a published architecture lies far inside these (SD3.5 large: 38 blocks of 38 x 64; FLUX.1: 19 + 38
# blocks of 24 x 128, 64 channels; their VAE 128..512 wide, 4 blocks)
ARCHITECTURE_LIMITS = {
    "num_layers": (1, 1000), "num_single_layers": (0, 1000), "attention_head_dim": (1, 1024),
    "num_attention_heads": (1, 1024), "sample_size": (1, 8192), "patch_size": (1, 64), "in_channels": (1, 4096),
    "out_channels": (1, 4096), "joint_attention_dim": (1, 65536), "caption_projection_dim": (1, 65536),
    "pooled_projection_dim": (1, 65536), "pos_embed_max_size": (1, 8192), "latent_channels": (1, 4096),
    "layers_per_block": (1, 64), "norm_num_groups": (1, 4096), "block_out_channels": (1, 65536),
    "axes_dims_rope": (1, 65536), "dual_attention_layers": (0, 999),
}
PIPELINES = {"StableDiffusion3Pipeline": "SD3Transformer2DModel", "FluxPipeline": "FluxTransformer2DModel"}
RUN_MARKS = ("status.json", "metrics.jsonl", "checkpoints")  # what a fine-tuning run's folder holds beside config.json


def _read(path: Path) -> dict:
    """A config file as a dict; missing, unreadable, not JSON or not an object is a WorkbenchError naming it."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise WorkbenchError(f"{path} is missing; copy it from the complete model download") from None
    except RecursionError:
        raise WorkbenchError(f"{path} cannot be read: its JSON is nested too deeply") from None
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise WorkbenchError(f"{path} cannot be read ({shorten(str(err).splitlines()[0], 120)}); copy it from the "
                             "complete model download") from None
    if not isinstance(data, dict):
        raise WorkbenchError(f"{path} holds a {type(data).__name__}, not a JSON object of settings; copy it from the "
                             "complete model download")
    return data


def _check_value(path: Path, key: str, value) -> None:
    """No NaN or inf anywhere; a size (ARCHITECTURE_LIMITS) a whole number in its range, or a list of them."""
    if isinstance(value, float) and not math.isfinite(value):
        raise WorkbenchError(f"{path}: {key} is {value}, not a finite number")
    if isinstance(value, (list, tuple)):
        for item in value:
            _check_value(path, key, item)
        if key in ("block_out_channels", "axes_dims_rope") and not value:
            raise WorkbenchError(f"{path}: {key} is empty; it lists one size per block")
        return
    if key not in ARCHITECTURE_LIMITS or value is None:
        return
    low, high = ARCHITECTURE_LIMITS[key]
    if not isinstance(value, int) or isinstance(value, bool):
        raise WorkbenchError(f"{path}: {key} must be a whole number, got {shorten(value)}")
    if not low <= value <= high:
        raise WorkbenchError(f"{path}: {key} must be in {low}..{high}, got {value}")


def check_config(path: Path, config: dict, cls=None) -> None:
    """Every field of a component's config: finite, sizes in range, and (given the class) a field the class takes."""
    for key, value in config.items():
        _check_value(path, key, value)
    if cls is not None:
        taken = set(inspect.signature(cls.__init__).parameters) - {"self"}
        unknown = sorted(k for k in config if not k.startswith("_") and k not in taken)
        if unknown:
            raise WorkbenchError(f"{path}: {cls.__name__} takes no field {', '.join(unknown[:5])}; copy the file "
                                 "from the complete model download")


def transformer_params(config: dict) -> int:
    """A lower bound on a transformer's parameters from its config (w = heads x head_dim): a joint block holds the
    query, key, value and output projections of its two streams (8 w^2) and their feed-forwards (16 w^2); a single
    block of FLUX at least its attention and feed-forward projections (12 w^2). SD3-medium: 24 joint blocks of
    w = 1536 -> 1.4 B (it has 2.0 B); FLUX.1: 19 + 38 blocks of w = 3072 -> 8.6 B (it has 11.9 B)."""
    width = config.get("num_attention_heads", 1) * config.get("attention_head_dim", 1)
    return (24 * config.get("num_layers", 1) + 12 * config.get("num_single_layers", 0)) * width * width


def check_fits(folder: Path, params: int, bytes_per_param: int, free: int | None) -> None:
    """Refuse a transformer whose weights alone need more than `free` bytes (None: unknown, not refused)."""
    from workbench.core.budget import human_bytes

    needed = params * bytes_per_param
    if free is not None and needed > free:
        raise WorkbenchError(f"the transformer of {folder} has at least {params / 1e9:.1f} B parameters "
                             f"({human_bytes(needed)}) but the device has {human_bytes(free)} free; check its "
                             "config.json (num_layers, num_attention_heads, attention_head_dim)")


def _check_pipeline(folder: Path, free: int | None, bytes_per_param: int) -> None:
    import diffusers

    index = _read(folder / "model_index.json")
    for key, entry in index.items():
        if not key.startswith("_") and not (isinstance(entry, list) and len(entry) == 2
                                            and all(v is None or isinstance(v, str) for v in entry)):
            raise WorkbenchError(f"{folder / 'model_index.json'}: {key} must be [library, class], got "
                                 f"{shorten(entry)}")
    pipeline = index.get("_class_name")
    if pipeline not in PIPELINES:
        raise WorkbenchError(f"{folder / 'model_index.json'} names pipeline {shorten(pipeline)}, which the workbench "
                             f"does not support; supported pipelines: {', '.join(PIPELINES)}")
    missing = [k for k, v in index.items() if not k.startswith("_") and v[0] is not None
               and not ((folder / k).is_dir() and any((folder / k).iterdir()))]
    if missing:
        raise WorkbenchError(f"{folder} lacks the component folder(s) {', '.join(missing)} named in model_index.json "
                             "(or they are empty); copy them from the complete model download")
    for part in ("transformer", "vae", "scheduler"):
        if part not in index:
            raise WorkbenchError(f"{folder / 'model_index.json'} names no {part}; copy it from the complete download")
    tpath = folder / "transformer" / "config.json"
    transformer = _read(tpath)
    name = transformer.get("_class_name")
    if name != PIPELINES[pipeline]:
        raise WorkbenchError(f"{tpath}: _class_name {shorten(name)} is not {PIPELINES[pipeline]}, the transformer of "
                             f"{pipeline}")
    check_config(tpath, transformer, getattr(diffusers, name))
    vpath = folder / "vae" / "config.json"
    vae = _read(vpath)
    check_config(vpath, vae, diffusers.AutoencoderKL)
    if not isinstance(vae.get("block_out_channels"), list):
        raise WorkbenchError(f"{vpath}: block_out_channels must be a list of sizes, got "
                             f"{shorten(vae.get('block_out_channels'))}")
    spath = folder / "scheduler" / "scheduler_config.json"
    check_config(spath, _read(spath))
    check_fits(folder, transformer_params(transformer), bytes_per_param, free)
    for part in (k for k, v in index.items() if not k.startswith("_") and v[0] is not None):
        shapes = _stored_shapes(folder / part)
        if part == "transformer":
            _check_shapes(folder / part, getattr(diffusers, name), transformer, shapes)


def _stored_shapes(folder: Path) -> dict[str, tuple[int, ...]]:
    """{tensor name: shape} of a component folder's safetensors files, from their headers (nothing is loaded); a
    file whose header cannot be read is a WorkbenchError naming it."""
    from safetensors import safe_open

    shapes = {}
    for file in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(file), "pt") as f:
                shapes |= {key: tuple(f.get_slice(key).get_shape()) for key in f.keys()}
        except Exception as err:  # noqa: BLE001 - safetensors raises its own error, OSError or ValueError
            why = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise WorkbenchError(f"{file} cannot be read ({shorten(why, 120)}); copy it from the complete model "
                                 "download") from None
    return shapes


def _check_shapes(folder: Path, cls, config: dict, stored: dict[str, tuple[int, ...]]) -> None:
    """The stored weights have the shapes the config gives its model (built on the meta device: no memory)."""
    import torch

    with torch.device("meta"):
        expected = {k: tuple(v.shape) for k, v in cls(**{k: v for k, v in config.items()
                                                        if not k.startswith("_")}).state_dict().items()}
    for key, shape in stored.items():
        if key in expected and expected[key] != shape:
            raise WorkbenchError(f"the weights in {folder} do not match its config.json: {key} is "
                                 f"{list(shape)} where the config makes {list(expected[key])}; copy the folder from "
                                 "one complete download")


def _check_embedded(folder: Path, free: int | None) -> None:
    from dataclasses import asdict

    from workbench.models.embedded import CONFIG_FILE, EmbeddedConfig

    path = folder / CONFIG_FILE
    data = _read(path)
    try:
        config = EmbeddedConfig(**data)
    except (TypeError, ValueError) as err:  # WorkbenchError too: a wrong type names its field
        raise WorkbenchError(f"model config {path} is not an embedded model's config ({shorten(str(err), 200)})"
                             ) from None
    check_fits(folder, transformer_params(asdict(config.transformer)), 4, free)


def check_model_folder(folder: str | Path | None, device: str | None = None, bytes_per_param: int = 4) -> None:
    """Refuse a model folder whose configs cannot describe a model that loads (module docstring), before anything
    is built; None (the shipped embedded model) passes. `device` (e.g. "cpu", "cuda"): also refuse a transformer
    whose weights cannot fit its free memory; None skips that (a dry run reports the fit itself)."""
    if folder is None:
        return
    from workbench.core.budget import free_bytes
    from workbench.models.embedded import CONFIG_FILE, WEIGHTS_FILE

    folder = Path(folder).expanduser()
    if not folder.exists():
        raise WorkbenchError(f"{folder} does not exist")
    free = free_bytes(device) if device is not None else None
    if (folder / "model_index.json").is_file():
        return _check_pipeline(folder, free, bytes_per_param)
    if (folder / CONFIG_FILE).is_file() and any((folder / m).exists() for m in RUN_MARKS):
        raise WorkbenchError(f"{folder} is a fine-tuning run, not a model folder: continue it with --resume, or "
                             "sample from it (--model takes a run in sample, attribute and the app's picker)")
    if (folder / CONFIG_FILE).is_file() and (folder / WEIGHTS_FILE).is_file():
        return _check_embedded(folder, free)
    raise WorkbenchError(f"{folder} is not a model folder: it has neither model_index.json (diffusers SD3/FLUX) "
                         f"nor {CONFIG_FILE} + {WEIGHTS_FILE} (embedded); point the model path at the folder holding "
                         "them")
