"""The embedded tiny text-to-image model: build, save and load.

Pixel space (3 x 32 x 32, values in [-1, 1]), no VAE. The denoiser is diffusers' SD3-style MMDiT
(`SD3Transformer2DModel`) with a tiny config, so the sampler, log-probs and trainer that run on it are
the ones that run on real SD3 models. The text encoder is `TinyTextEncoder`. Weights ship in
`workbench/weights/embedded/` (made by `python -m workbench.models.pretrain`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from workbench.core.errors import WorkbenchError, one_line
from workbench.core.fields import check_types
from workbench.core.precision import exact_gelu_in_bfloat16
from workbench.flow.policy import Conditioning, FlowPolicy
from workbench.models.text_encoder import TextEncoderConfig, TinyTextEncoder, WordTokenizer
from workbench.toyworld.world import parse_prompt

DEFAULT_WEIGHTS = Path(__file__).resolve().parents[1] / "weights" / "embedded"
CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"
X0_MIN_SIGMA = 0.05  # clamp of t in v = (x_t - x0) / t (the JiT paper's value)


@dataclass
class TransformerConfig:
    """Tiny `SD3Transformer2DModel` config (sized so a G=8 x T=16 group samples in well under 1 s)."""

    sample_size: int = 32  # pixels; pixel space, so also the image size
    patch_size: int = 4  # 4x4 patches -> 64 image tokens (2x2 patches cost 2x and drew no better shapes)
    in_channels: int = 3  # RGB
    out_channels: int = 3
    num_layers: int = 4  # joint (MMDiT) blocks
    attention_head_dim: int = 24
    num_attention_heads: int = 4  # inner width 96
    joint_attention_dim: int = 64  # = TextEncoderConfig.width
    caption_projection_dim: int = 96  # must equal heads * head_dim in SD3
    pooled_projection_dim: int = 64  # = TextEncoderConfig.pooled_dim
    pos_embed_max_size: int = 8  # 32 / patch_size


@dataclass
class EmbeddedConfig:
    """Everything needed to rebuild the embedded model, plus how it was trained."""

    transformer: TransformerConfig = field(default_factory=TransformerConfig)
    text: TextEncoderConfig = field(default_factory=TextEncoderConfig)
    default_shift: float = 3.0  # SD3-style schedule shift used for sampling (docs/methods.md "Schedules")
    prediction: str = "x0"  # what the transformer outputs: "x0" (clean image) or "velocity"
    default_guidance: float = 4.0  # CFG scale for making pictures (`sample`, quality report); RL rollouts use 1
    training: dict = field(default_factory=dict)  # pretraining settings and results, for the model card

    def __post_init__(self):
        if isinstance(self.transformer, dict):
            self.transformer = TransformerConfig(**self.transformer)
        if isinstance(self.text, dict):
            self.text = TextEncoderConfig(**self.text)
        check_types(self)  # a hand-edited config.json names its wrong field instead of failing deep in diffusers
        for part in (self.transformer, self.text):
            check_types(part)
            small = [f"{k}={v}" for k, v in asdict(part).items() if not 1 <= v <= 4096]
            if small:
                raise ValueError(f"sizes must be in 1..4096, got {', '.join(small)}")
        if self.transformer.joint_attention_dim != self.text.width:
            raise ValueError("transformer.joint_attention_dim must equal text.width")
        if self.prediction not in ("x0", "velocity"):
            raise ValueError(f"prediction must be 'x0' or 'velocity', not {self.prediction!r}")
        if self.transformer.pooled_projection_dim != self.text.pooled_dim:
            raise ValueError("transformer.pooled_projection_dim must equal text.pooled_dim")


@dataclass
class EmbeddedModel:
    """The three parts of the embedded model, on one device, float32."""

    config: EmbeddedConfig
    tokenizer: WordTokenizer
    text_encoder: TinyTextEncoder
    transformer: torch.nn.Module

    def denoise(self, x: torch.Tensor, sigma: torch.Tensor, embeds: torch.Tensor, pooled: torch.Tensor
                ) -> torch.Tensor:
        """Velocity (B, C, H, W) for x (B, C, H, W) at noise level sigma (B,) in [0, 1].

        With prediction "x0" the transformer predicts the clean image and the velocity follows from
        x_t = (1 - t) x0 + t eps: v = (x_t - x0) / t, with t clamped at X0_MIN_SIGMA in the division
        (x-prediction, "Back to Basics: Let Denoising Generative Models Denoise", arXiv 2511.13720: a clean
        image is easier for a large-patch pixel transformer to output than noise). In a 300-step test on
        four scenes, predicting velocity left speckle in the samples that x-prediction removed.
        """
        out = self.transformer(hidden_states=x, encoder_hidden_states=embeds, pooled_projections=pooled,
                               timestep=sigma * 1000.0, return_dict=False)[0]
        if self.config.prediction == "velocity":
            return out
        t = sigma.clamp(min=X0_MIN_SIGMA).to(x.dtype)[:, None, None, None]  # (B, 1, 1, 1)
        return (x - out) / t


def build_embedded(config: EmbeddedConfig | None = None, seed: int = 0) -> EmbeddedModel:
    """A freshly initialised embedded model (random weights, reproducible from `seed`)."""
    from diffusers import SD3Transformer2DModel

    config = config or EmbeddedConfig()
    torch.manual_seed(seed)
    text_encoder = TinyTextEncoder(config.text)
    transformer = SD3Transformer2DModel(**asdict(config.transformer))
    return EmbeddedModel(config, WordTokenizer(config.text.max_length), text_encoder, transformer)


def save_embedded(model: EmbeddedModel, directory: str | Path) -> Path:
    """Write `config.json` and `model.safetensors` (text encoder and transformer) to `directory`."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {f"text_encoder.{k}": v.detach().cpu().contiguous()
               for k, v in model.text_encoder.state_dict().items()}
    tensors |= {f"transformer.{k}": v.detach().cpu().contiguous()
                for k, v in model.transformer.state_dict().items()}
    save_file(tensors, str(directory / WEIGHTS_FILE))
    (directory / CONFIG_FILE).write_text(json.dumps(asdict(model.config), indent=2))
    return directory


def check_finite_weights(tensors, source: str) -> None:
    """Refuse weights holding NaN or inf (named by `source`, a file or folder): they would sample NaN images."""
    bad = [name for name, t in tensors if t.is_floating_point() and not bool(torch.isfinite(t).all())]
    if bad:
        raise WorkbenchError(f"{source} holds NaN or inf values in {len(bad)} tensor(s), e.g. {bad[0]}; "
                             "restore the file from a good copy")


def load_embedded(directory: str | Path | None = None, device: str | torch.device = "cpu") -> EmbeddedModel:
    """Load the embedded model from `directory` (default: the weights shipped with the package).

    Raises WorkbenchError naming the missing or corrupted file and the command that remakes it.
    """
    directory = Path(directory) if directory is not None else DEFAULT_WEIGHTS
    remake = "run `python -m workbench.models.pretrain` to make it, or restore it with `git checkout`"
    config_path, weights_path = directory / CONFIG_FILE, directory / WEIGHTS_FILE
    for path in (config_path, weights_path):
        if not path.is_file():
            raise WorkbenchError(f"model file {path} is missing; {remake}")
    try:
        data = json.loads(config_path.read_text())
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        config = EmbeddedConfig(**data)
        model = build_embedded(config)
    except (json.JSONDecodeError, UnicodeDecodeError, TypeError, ValueError, RuntimeError) as err:
        raise WorkbenchError(f"model config {config_path} is corrupted ({one_line(err, 200)}); {remake}") from None
    try:
        tensors = load_file(str(weights_path))
    except (SafetensorError, OSError, ValueError) as err:
        raise WorkbenchError(f"model weights {weights_path} are corrupted ({err}); {remake}") from None
    check_finite_weights(tensors.items(), f"model weights {weights_path}")
    for prefix, module in (("text_encoder.", model.text_encoder), ("transformer.", model.transformer)):
        part = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
        try:
            module.load_state_dict(part)
        except RuntimeError as err:
            first = str(err).splitlines()[0]
            raise WorkbenchError(f"model weights {weights_path} do not match {config_path} ({first}); "
                                 f"{remake}") from None
    model.text_encoder.to(device).eval().requires_grad_(False)
    model.transformer.to(device).eval()
    return model


class EmbeddedPolicy(FlowPolicy):
    """The embedded tiny model: pixel space, so latents are images in [-1, 1]."""

    name = "embedded"
    toy_world = True

    def __init__(self, model: EmbeddedModel):
        self.model = model
        self.transformer = model.transformer
        exact_gelu_in_bfloat16(self.transformer)  # faster bfloat16 continuations on the CPU (core/precision.py)
        cfg = model.config.transformer
        self.latent_shape = (cfg.in_channels, cfg.sample_size, cfg.sample_size)
        self.default_shift = model.config.default_shift
        self.default_guidance = model.config.default_guidance

    @classmethod
    def load(cls, directory: str | Path | None = None, device: str | torch.device = "cpu") -> EmbeddedPolicy:
        return cls(load_embedded(directory, device))

    def check_prompt(self, prompt: str) -> None:
        parse_prompt(prompt)

    @torch.no_grad()
    def encode(self, prompts: list[str], cfg: bool = False) -> Conditioning:
        ids = self.model.tokenizer(prompts).to(self.device)  # (B, L)
        embeds, pooled = self.model.text_encoder(ids)
        if not cfg:
            return Conditioning(embeds, pooled)
        u_embeds, u_pooled = self.model.text_encoder(self.model.tokenizer([""] * len(prompts)).to(self.device))
        return Conditioning(embeds, pooled, u_embeds, u_pooled)

    def denoise(self, x, sigma, embeds, pooled):
        return self.model.denoise(x, sigma, embeds, pooled)

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        return ((latents.float() + 1) / 2).clamp(0, 1)
