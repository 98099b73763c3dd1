"""Published transformer configurations of real models, and their transformers built without weights.

The numbers are those of each model's `transformer/config.json` on the Hugging Face hub (stabilityai/
stable-diffusion-3.5-medium, stabilityai/stable-diffusion-3.5-large, black-forest-labs/FLUX.1-dev). Built on
the meta device (`build_on_meta`) the transformers hold shapes but no memory, so the workbench's LoRA can be
applied to them exactly as the trainer does, their parameters counted and the memory estimate
(`workbench.train.memory`) computed for a real model on a machine that could not load it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# T5 tokens of an SD3 prompt: Flow-GRPO samples and trains SD3 with max_sequence_length=128 (scripts/train_sd3.py);
# the diffusers pipeline's own default is 256 (docs/methods.md "Real models")
SD3_T5_TOKENS = 128
FLUX_T5_TOKENS = 512  # the FLUX pipeline's default


@dataclass(frozen=True)
class Architecture:
    """A real model's transformer: its diffusers class and published config, and the pipeline around it."""

    name: str
    transformer_class: str  # the diffusers class of transformer/config.json's "_class_name"
    config: dict  # transformer/config.json, without the underscore keys
    vae_factor: int = 8  # image pixels per latent pixel (the 16-channel SD3 / FLUX VAE)
    text_encoder_bytes: int = 0  # CLIP-L + CLIP-G (SD3) or CLIP-L (FLUX) + T5-XXL encoder, in bfloat16
    vae_params: int = 83_819_683  # the 16-channel AutoencoderKL of SD3 / FLUX (encoder + decoder)

    @property
    def patch(self) -> int:
        """Latent pixels per side of one token (SD3: patch_size 2; FLUX packs 2x2 latents into a token)."""
        return self.config.get("patch_size", 1) if self.transformer_class == "SD3Transformer2DModel" else 2

    def tokens(self, resolution: int) -> int:
        """Image tokens of a square image of `resolution` pixels."""
        return (resolution // (self.vae_factor * self.patch)) ** 2

    @property
    def hidden(self) -> int:
        return self.config["num_attention_heads"] * self.config["attention_head_dim"]

    @property
    def blocks(self) -> int:
        """Transformer blocks (FLUX: double-stream plus single-stream)."""
        return self.config["num_layers"] + self.config.get("num_single_layers", 0)

    @property
    def text_tokens(self) -> int:
        """Text tokens the transformer attends to: 77 CLIP + 128 T5 (SD3, as Flow-GRPO) or 512 T5 (FLUX pipeline)."""
        return 77 + SD3_T5_TOKENS if self.transformer_class == "SD3Transformer2DModel" else FLUX_T5_TOKENS


# about CLIP-L 123 M + OpenCLIP bigG 695 M + T5-XXL encoder 4.76 B parameters (their papers), 2 bytes each
_SD3_TEXT = 2 * (123_060_480 + 694_659_840 + 4_762_310_656)
_FLUX_TEXT = 2 * (123_060_480 + 4_762_310_656)  # CLIP-L + T5-XXL encoder

ARCHITECTURES = {
    "sd3.5-medium": Architecture("sd3.5-medium", "SD3Transformer2DModel", dict(
        attention_head_dim=64, caption_projection_dim=1536, dual_attention_layers=tuple(range(13)), in_channels=16,
        joint_attention_dim=4096, num_attention_heads=24, num_layers=24, out_channels=16, patch_size=2,
        pooled_projection_dim=2048, pos_embed_max_size=384, qk_norm="rms_norm", sample_size=128), 8, _SD3_TEXT),
    "sd3.5-large": Architecture("sd3.5-large", "SD3Transformer2DModel", dict(
        attention_head_dim=64, caption_projection_dim=2432, in_channels=16, joint_attention_dim=4096,
        num_attention_heads=38, num_layers=38, out_channels=16, patch_size=2, pooled_projection_dim=2048,
        pos_embed_max_size=192, qk_norm="rms_norm", sample_size=128), 8, _SD3_TEXT),
    "flux.1-dev": Architecture("flux.1-dev", "FluxTransformer2DModel", dict(
        attention_head_dim=128, axes_dims_rope=(16, 56, 56), guidance_embeds=True, in_channels=64,
        joint_attention_dim=4096, num_attention_heads=24, num_layers=19, num_single_layers=38, patch_size=1,
        pooled_projection_dim=768), 8, _FLUX_TEXT),
}


META_PREFIX = "meta:"  # --model meta:NAME: a published architecture's shapes, for planning only (--dry-run)


def meta_architecture(model: str | None) -> str | None:
    """NAME of a model given as 'meta:NAME' (`ARCHITECTURES`), else None; an unknown NAME lists the valid ones."""
    if not isinstance(model, str) or not model.startswith(META_PREFIX):
        return None
    name = model[len(META_PREFIX):]
    if name not in ARCHITECTURES:
        from workbench.core.errors import WorkbenchError

        raise WorkbenchError(f"unknown architecture '{name}' in --model {model}; valid: "
                             f"{', '.join(META_PREFIX + n for n in ARCHITECTURES)}")
    return name


def build_on_meta(name: str) -> torch.nn.Module:
    """The named real transformer with every parameter on the meta device (shapes only, no memory)."""
    import diffusers

    from workbench.core.errors import WorkbenchError

    if name not in ARCHITECTURES:
        raise WorkbenchError(f"unknown architecture '{name}'; valid: {', '.join(ARCHITECTURES)}")
    arch = ARCHITECTURES[name]
    with torch.device("meta"):
        return getattr(diffusers, arch.transformer_class)(**arch.config)
