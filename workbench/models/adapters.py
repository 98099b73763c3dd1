"""Real diffusers models as `FlowPolicy`s, and `load_model` for any local model folder (runs: `train.sources`).

`SD3Policy` wraps `StableDiffusion3Pipeline`, `FluxPolicy` wraps `FluxPipeline`; both load offline
(`local_files_only=True`) from a folder made by `save_pretrained` or a hub download. The sampler keeps
latents unpacked, (B, C, H, W), for every model; FLUX's 2x2 token packing happens inside `denoise`.

Adapted from diffusers 0.42 (huggingface/diffusers), `StableDiffusion3Pipeline.__call__`
(pipelines/stable_diffusion_3/pipeline_stable_diffusion_3.py) and `FluxPipeline.__call__`
(pipelines/flux/pipeline_flux.py). What changed: the denoising loop is gone (the workbench's sampler
runs it); the loop's transformer call became `denoise(x, sigma)` with timestep = sigma * 1000 (SD3) or
sigma (FLUX, whose pipeline passes timesteps / 1000); the final VAE decode became `decode`, batched and
without the PIL post-processing; FLUX's timestep schedule (`np.linspace(1, 1/T, T)` + `calculate_shift`
+ the scheduler's exponential time shift) became `flux_pipeline_sigmas`, a pure function.
"""

from __future__ import annotations

import inspect
import json
import math
import warnings
from pathlib import Path

import numpy as np
import torch

from workbench.core.errors import WorkbenchError, shorten
from workbench.core.heap import end_start_up
from workbench.core.precision import exact_gelu_in_bfloat16
from workbench.flow.policy import Conditioning, FlowPolicy
from workbench.flow.schedule import shift_sigmas
from workbench.models.architectures import FLUX_T5_TOKENS, SD3_T5_TOKENS
from workbench.models.config_checks import check_model_folder
from workbench.models.embedded import CONFIG_FILE, WEIGHTS_FILE, EmbeddedPolicy, check_finite_weights

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
# scheduler settings that change the sigmas in ways the workbench's schedules do not reproduce
UNSUPPORTED_SCHEDULER_OPTIONS = ("shift_terminal", "use_karras_sigmas", "use_exponential_sigmas",
                                 "use_beta_sigmas", "invert_sigmas", "use_flow_sigmas")


def default_device() -> str:
    """The best available device: "cuda", else "mps", else "cpu"."""
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def check_device(name: str) -> str:
    """A device name this machine can run on (cpu, cuda, cuda:N, mps), else a WorkbenchError that says why."""
    text = str(name).strip().lower()
    kind, _, index = text.partition(":")
    if kind not in ("cpu", "cuda", "mps") or (index and (kind != "cuda" or not index.isdigit())):
        raise WorkbenchError(f"unknown device {shorten(name)}; valid devices: cpu, cuda, cuda:N, mps")
    if kind == "cuda":
        if not torch.cuda.is_available():
            build = "has no CUDA" if torch.version.cuda is None else "sees no GPU"
            raise WorkbenchError(f"device 'cuda' is not available: this PyTorch build {build}; use cpu")
        if index and int(index) >= torch.cuda.device_count():
            raise WorkbenchError(f"device {text} does not exist: {torch.cuda.device_count()} GPU(s) visible")
    if kind == "mps" and not (getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()):
        raise WorkbenchError("device 'mps' is not available on this machine; use cpu")
    return text


def torch_dtype(name: str) -> torch.dtype:
    """"float32" / "float16" / "bfloat16" -> the torch dtype; anything else is a WorkbenchError."""
    if name not in DTYPES:
        raise WorkbenchError(f"unknown dtype '{name}'; valid dtypes: {', '.join(DTYPES)}")
    return DTYPES[name]


def flux_pipeline_sigmas(steps: int, shift: float | None = None, mu: float | None = None,
                         linear: bool = False) -> torch.Tensor:
    """FLUX sigmas (T + 1,), bit for bit what `FluxPipeline` gets from `FlowMatchEulerDiscreteScheduler`.

    The grid is linspace(1, 1/T, T) cast to float32 (as the scheduler does), then either the
    resolution-dependent time shift with `mu` (exponential: e^mu / (e^mu + 1/t - 1); linear: mu in place
    of e^mu) or, when mu is None, the static SD3 shift. The two agree when shift = e^mu.
    """
    if steps < 1:
        raise WorkbenchError(f"steps must be a positive integer, got {steps}")
    if mu is None and (shift is None or shift <= 0):
        raise WorkbenchError(f"shift must be positive, got {shift}")
    base = np.linspace(1.0, 1.0 / steps, steps).astype(np.float32)  # (T,)
    if mu is None:
        sigmas = shift_sigmas(base, shift)
    else:
        scale = mu if linear else math.exp(mu)
        sigmas = scale / (scale + (1 / base - 1))
    return torch.cat([torch.from_numpy(np.asarray(sigmas)).to(torch.float32), torch.zeros(1)])  # (T + 1,)


def _check_scheduler(config, model: str, allow_dynamic: bool) -> None:
    """Refuse scheduler settings whose sigmas this module would not reproduce."""
    used = [k for k in UNSUPPORTED_SCHEDULER_OPTIONS if config.get(k)]
    if not allow_dynamic and config.get("use_dynamic_shifting"):
        used.append("use_dynamic_shifting")
    if used:
        raise WorkbenchError(f"the {model} scheduler sets {', '.join(used)}, which the workbench does not support; "
                             "turn them off in scheduler/scheduler_config.json")


def _latent_size(resolution: int | None, default: int, vae_scale: int, patch: int, model: str) -> int:
    """Latent side length for a square image of `resolution` pixels (default: the model's own)."""
    pixels = default if resolution is None else resolution
    multiple = vae_scale * patch
    if pixels <= 0 or pixels % multiple:
        nearest = max(multiple, pixels - pixels % multiple)
        raise WorkbenchError(f"resolution {pixels} px does not fit {model}: it must be a positive multiple of "
                             f"{multiple} (VAE factor {vae_scale} x patch {patch}); try {nearest}")
    return pixels // vae_scale


def pipeline_geometry(folder: str | Path) -> tuple[int, int]:
    """(native resolution, multiple) of a diffusers SD3 / FLUX folder's square images, read from its configs without
    loading weights: the side the policy draws by default and the step every resolution must be a multiple of (VAE
    factor x patch; 16 for SD3.5 and FLUX.1), as `SD3Policy` / `FluxPolicy` compute them."""
    folder = Path(folder).expanduser()
    try:
        index = json.loads((folder / "model_index.json").read_text())
        transformer = json.loads((folder / "transformer" / "config.json").read_text())
        vae = json.loads((folder / "vae" / "config.json").read_text())
        factor = 2 ** (len(vae["block_out_channels"]) - 1)  # the pipelines' vae_scale_factor
        if index.get("_class_name") == "FluxPipeline":
            return 128 * factor, 2 * factor  # the pipeline's default_sample_size latents; 2x2 packed tokens
        return int(transformer["sample_size"]) * factor, int(transformer["patch_size"]) * factor
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise WorkbenchError(f"cannot read the image size of {folder} from its configs ({err}); "
                             "check that the model folder is complete") from None


def _freeze(*modules: torch.nn.Module | None) -> None:
    for module in modules:
        if module is not None:
            module.requires_grad_(False).eval()


@torch.no_grad()
def vae_decode(vae, latents: torch.Tensor, batch_size: int = 4) -> torch.Tensor:
    """Model latents (B, C, H, W) -> RGB (B, 3, H * f, W * f) in [0, 1], `batch_size` images at a time.

    Undoes the latent normalisation (latents / scaling_factor + shift_factor) as the SD3 and FLUX
    pipelines do, decodes, and maps [-1, 1] -> [0, 1]. No gradient: rewards score finished images.
    """
    shift = vae.config.shift_factor or 0.0
    images = []
    for chunk in latents.split(batch_size):
        z = chunk.to(vae.device, vae.dtype) / vae.config.scaling_factor + shift  # (b, C, H, W)
        images.append(vae.decode(z, return_dict=False)[0].float())  # (b, 3, H * f, W * f) in [-1, 1]
    return (torch.cat(images) / 2 + 0.5).clamp(0, 1)


class SD3Policy(FlowPolicy):
    """Stable Diffusion 3 / 3.5: MMDiT velocity on VAE latents, two CLIPs (+ optional T5), CFG supported.

    resolution: square image side in pixels (default transformer.config.sample_size * VAE factor).
    max_sequence_length: T5 tokens (zeros stand in when there is no T5). 128, as Flow-GRPO samples and trains SD3
        (scripts/train_sd3.py); the diffusers pipeline's own default is 256 (docs/methods.md "Real models").
    """

    name = "sd3"
    text_device: torch.device | None = None  # where the text encoders run (`models.offload`); None = self.device
    decode_batch = 4  # images per VAE decode (1 = sliced, `models.offload.slice_vae`)

    def __init__(self, pipe, resolution: int | None = None, max_sequence_length: int = SD3_T5_TOKENS):
        _check_scheduler(pipe.scheduler.config, "SD3", allow_dynamic=False)
        self.pipe, self.transformer = pipe, pipe.transformer
        exact_gelu_in_bfloat16(self.transformer)  # as EmbeddedPolicy
        _freeze(pipe.text_encoder, pipe.text_encoder_2, pipe.text_encoder_3, pipe.vae)
        cfg, vae_scale = pipe.transformer.config, pipe.vae_scale_factor
        size = _latent_size(resolution, cfg.sample_size * vae_scale, vae_scale, cfg.patch_size, "SD3")
        self.latent_shape, self.vae_factor = (cfg.in_channels, size, size), vae_scale
        self.default_shift = float(pipe.scheduler.config.shift)
        self.max_sequence_length = max_sequence_length

    @torch.no_grad()
    def encode(self, prompts: list[str], cfg: bool = False) -> Conditioning:
        """The pipeline's `encode_prompt`: embeds (B, 77 + L_T5, D), pooled (B, P); with cfg also for ""."""
        embeds, u_embeds, pooled, u_pooled = self.pipe.encode_prompt(
            prompt=prompts, prompt_2=None, prompt_3=None, device=self.text_device or self.device,
            do_classifier_free_guidance=cfg, max_sequence_length=self.max_sequence_length)
        return Conditioning(embeds, pooled, u_embeds, u_pooled).to(self.device)

    def denoise(self, x, sigma, embeds, pooled):
        """Velocity (B, C, H, W) in float32; the SD3 transformer takes timestep = sigma * 1000."""
        dtype = self.transformer.dtype
        out = self.transformer(hidden_states=x.to(dtype), timestep=sigma * 1000.0,
                               encoder_hidden_states=embeds.to(dtype), pooled_projections=pooled.to(dtype),
                               return_dict=False)[0]
        return out.float()

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        return vae_decode(self.pipe.vae, latents, self.decode_batch)


class FluxPolicy(FlowPolicy):
    """FLUX.1: MMDiT velocity on 2x2-packed VAE latents, CLIP pooled + T5 tokens, guidance embedding.

    FLUX.1 [dev] is guidance-distilled: it has no classifier-free guidance, so `supports_cfg` is False,
    `encode` never returns an unconditional branch and `velocity` ignores guidance_scale. The guidance
    strength is `guidance` (default 3.5, the pipeline's), fed to the transformer's guidance embedding
    when transformer.config.guidance_embeds (schnell has none).
    resolution: square image side in pixels (default the pipeline's 128 latents * VAE factor = 1024).
    max_sequence_length: T5 tokens (the pipeline's default 512).
    """

    name = "flux"
    supports_cfg = False
    text_device: torch.device | None = None  # as SD3Policy
    decode_batch = 4

    def __init__(self, pipe, resolution: int | None = None, max_sequence_length: int = FLUX_T5_TOKENS,
                 guidance: float = 3.5):
        sched = pipe.scheduler.config
        _check_scheduler(sched, "FLUX", allow_dynamic=True)
        self.pipe, self.transformer = pipe, pipe.transformer
        exact_gelu_in_bfloat16(self.transformer)  # as EmbeddedPolicy
        _freeze(pipe.text_encoder, pipe.text_encoder_2, pipe.vae)
        vae_scale = pipe.vae_scale_factor
        size = _latent_size(resolution, pipe.default_sample_size * vae_scale, vae_scale, 2, "FLUX")
        self.latent_shape = (pipe.transformer.config.in_channels // 4, size, size)  # 4 = one 2x2 token
        self.vae_factor = vae_scale
        self.image_seq_len = (size // 2) ** 2  # packed tokens per image
        self.max_sequence_length, self.guidance = max_sequence_length, guidance
        self.linear_shift = sched.get("time_shift_type", "exponential") == "linear"
        self.mu = None
        if sched.get("use_dynamic_shifting"):
            from diffusers.pipelines.flux.pipeline_flux import calculate_shift

            self.mu = calculate_shift(self.image_seq_len, sched.get("base_image_seq_len", 256),
                                      sched.get("max_image_seq_len", 4096), sched.get("base_shift", 0.5),
                                      sched.get("max_shift", 1.15))
        # the equivalent SD3-style shift (e^mu for the exponential time shift), shown as the model's default
        if self.mu is None:
            self.default_shift = float(sched.shift)
        else:
            self.default_shift = float(self.mu if self.linear_shift else math.exp(self.mu))

    def schedule(self, steps: int, shift: float | None = None) -> torch.Tensor:
        """The FLUX pipeline's sigmas (T + 1,) at this resolution; an explicit shift s means mu = ln s."""
        mu = self.mu if shift is None else None
        return flux_pipeline_sigmas(steps, shift or self.default_shift, mu, self.linear_shift).to(self.device)

    @torch.no_grad()
    def encode(self, prompts: list[str], cfg: bool = False) -> Conditioning:
        """T5 embeds (B, L, D) and CLIP pooled (B, P); cfg is ignored (no uncond branch, see class doc)."""
        embeds, pooled, _ = self.pipe.encode_prompt(prompt=prompts, prompt_2=None,
                                                    device=self.text_device or self.device,
                                                    max_sequence_length=self.max_sequence_length)
        return Conditioning(embeds, pooled).to(self.device)

    def velocity(self, x: torch.Tensor, sigma: torch.Tensor, cond: Conditioning,
                 guidance_scale: float = 1.0) -> torch.Tensor:
        """FLUX's velocity (B, C, H, W); guidance_scale is ignored, the guidance embedding uses `guidance`."""
        return super().velocity(x, sigma, Conditioning(cond.embeds, cond.pooled), 1.0)

    def denoise(self, x, sigma, embeds, pooled):
        """Pack x (B, C, H, W) into (B, HW/4, 4C) tokens, predict, unpack; velocity in float32."""
        b, c, h, w = x.shape
        dtype, vae_scale = self.transformer.dtype, self.pipe.vae_scale_factor
        tokens = self.pipe._pack_latents(x.to(dtype).contiguous(), b, c, h, w)  # (B, HW/4, 4C)
        img_ids = self.pipe._prepare_latent_image_ids(b, h // 2, w // 2, x.device, dtype)  # (HW/4, 3)
        txt_ids = torch.zeros(embeds.shape[1], 3, device=x.device, dtype=dtype)  # (L, 3)
        guidance = (torch.full((b,), self.guidance, device=x.device, dtype=torch.float32)
                    if self.transformer.config.guidance_embeds else None)
        out = self.transformer(hidden_states=tokens, timestep=sigma.to(dtype), guidance=guidance,
                               pooled_projections=pooled.to(dtype), encoder_hidden_states=embeds.to(dtype),
                               txt_ids=txt_ids, img_ids=img_ids, return_dict=False)[0]  # (B, HW/4, 4C)
        return self.pipe._unpack_latents(out, h * vae_scale, w * vae_scale, vae_scale).float()  # (B, C, H, W)

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        return vae_decode(self.pipe.vae, latents, self.decode_batch)


PIPELINES: dict[str, type[FlowPolicy]] = {"StableDiffusion3Pipeline": SD3Policy, "FluxPipeline": FluxPolicy}


def load_model(path: str | Path | None = None, device: str | None = None, dtype: str = "float32",
               offload_text_encoders: bool = False, **options) -> FlowPolicy:
    """A policy from a local folder, never the network.

    None -> the embedded model; a folder with model_index.json -> SD3Policy or FluxPolicy by its
    `_class_name` (options such as resolution go to their constructors; offload_text_encoders keeps the text
    encoders on the CPU, `models.offload`); a folder with config.json +
    model.safetensors -> the embedded format. Every failure is a one-line WorkbenchError.
    """
    device = check_device(device) if device else default_device()
    dt = torch_dtype(dtype)
    folder = None if path is None else Path(path).expanduser()
    if folder is not None and not folder.exists():
        raise WorkbenchError(f"model folder {folder} does not exist; pass a local SD3/FLUX diffusers folder, "
                             "an embedded model folder, or no model for the embedded one")
    if folder is not None and (folder / "model_index.json").is_file():
        policy = _load_pipeline(folder, device, dt, options, offload_text_encoders)
        end_start_up()  # the CLI's start-up ends here: collector on, what is loaded frozen (core/heap.py)
        return policy
    if folder is not None and not ((folder / CONFIG_FILE).is_file() and (folder / WEIGHTS_FILE).is_file()):
        raise WorkbenchError(f"{folder} is not a model folder: it has neither model_index.json (diffusers SD3/FLUX) "
                             f"nor {CONFIG_FILE} + {WEIGHTS_FILE} (embedded); point the model path at the folder "
                             "holding them")
    if options or dt != torch.float32:
        given = ", ".join([*options, *([f"dtype={dtype}"] if dt != torch.float32 else [])])
        raise WorkbenchError(f"the embedded model runs in float32 and takes no options ({given}); drop them")
    check_model_folder(folder, device)  # its config's types and sizes, before anything is built
    policy = EmbeddedPolicy.load(folder, device)
    end_start_up()
    return policy


def _read_index(folder: Path) -> dict:
    try:
        index = json.loads((folder / "model_index.json").read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise WorkbenchError(f"cannot read {folder / 'model_index.json'} ({err}); re-download the model") from None
    if not isinstance(index, dict):
        raise WorkbenchError(f"{folder / 'model_index.json'} is not a JSON object; re-download the model")
    return index


def _load_pipeline(folder: Path, device: str, dtype: torch.dtype, options: dict, offload: bool) -> FlowPolicy:
    """Check model_index.json against the folder, load the pipeline offline, wrap it in its policy."""
    index = _read_index(folder)
    class_name = index.get("_class_name")
    if class_name not in PIPELINES:
        raise WorkbenchError(f"{folder / 'model_index.json'} names pipeline '{class_name}', which the workbench "
                             f"does not support; supported pipelines: {', '.join(PIPELINES)}")
    policy_cls = PIPELINES[class_name]
    valid = [p for p in inspect.signature(policy_cls.__init__).parameters if p not in ("self", "pipe")]
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise WorkbenchError(f"unknown option(s) {', '.join(unknown)} for {class_name}; "
                             f"valid options: {', '.join(valid)}")
    check_model_folder(folder, device, dtype.itemsize)  # its configs' types and sizes, before anything is built
    components = {k: v for k, v in index.items() if not k.startswith("_") and isinstance(v, list) and len(v) == 2}
    missing = [k for k, (library, _) in components.items()
               if library is not None and not ((folder / k).is_dir() and any((folder / k).iterdir()))]
    if missing:
        raise WorkbenchError(f"{folder} lacks the component folder(s) {', '.join(missing)} named in model_index.json "
                             "(or they are empty); copy them from the complete model download")
    never_saved = {k: None for k, (library, _) in components.items() if library is None}
    import diffusers

    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*torch_dtype.*", category=FutureWarning)
            pipe = getattr(diffusers, class_name).from_pretrained(str(folder), local_files_only=True,
                                                                  torch_dtype=dtype, **never_saved)
    except (OSError, ValueError, RuntimeError, TypeError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise WorkbenchError(f"cannot load {class_name} from {folder} ({first}); "
                             "check that the download is complete") from None
    check_finite_weights(pipe.transformer.named_parameters(), f"{folder / 'transformer'}")
    try:
        for name, module in pipe.components.items():  # text encoders stay on the CPU when offloaded
            if isinstance(module, torch.nn.Module) and not (offload and name.startswith("text_encoder")):
                module.to(device)
    except (torch.OutOfMemoryError, MemoryError):
        params = sum(p.numel() for m in pipe.components.values() if isinstance(m, torch.nn.Module)
                     for p in m.parameters())
        raise WorkbenchError(f"the weights of {folder.name} do not fit on the {device}: {params / 1e9:.1f} B "
                             f"parameters in {str(dtype).removeprefix('torch.')}, about "
                             f"{params * dtype.itemsize / 1e9:.0f} GB before any work; load in bfloat16 (--dtype), "
                             "keep the text encoders off the device (--offload-text-encoders) or use a larger "
                             "device") from None
    policy = policy_cls(pipe, **options)
    policy.name = f"{policy.name}:{folder.name}"
    if offload:
        from workbench.models.offload import offload_text_encoders

        offload_text_encoders(policy)
    return policy
