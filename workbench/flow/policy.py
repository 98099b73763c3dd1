"""Flow policies: the one interface the sampler, the credit estimator and the trainer talk to.

A policy turns prompts into conditioning, predicts the rectified-flow velocity v(x_t, t, c) with optional
classifier-free guidance, and decodes latents to RGB images in [0, 1]. `EmbeddedPolicy` wraps the
embedded pixel-space model; `workbench.models.adapters` wraps diffusers' SD3 and FLUX pipelines.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from workbench.flow.schedule import sd3_sigmas


@dataclass
class Conditioning:
    """Encoded prompts: what the denoiser consumes besides x_t and t. Tensors are (B, ...)."""

    embeds: torch.Tensor  # (B, L, D) token embeddings
    pooled: torch.Tensor | None  # (B, P) pooled embedding
    uncond_embeds: torch.Tensor | None = None  # same for the empty prompt, used by CFG
    uncond_pooled: torch.Tensor | None = None

    def repeat(self, n: int) -> Conditioning:
        """Each row repeated n times in place: (B, ...) -> (B * n, ...), row i*n+k is prompt i."""
        def rep(t):
            return None if t is None else t.repeat_interleave(n, dim=0)
        return Conditioning(rep(self.embeds), rep(self.pooled), rep(self.uncond_embeds), rep(self.uncond_pooled))

    def to(self, device) -> Conditioning:
        def move(t):
            return None if t is None else t.to(device)
        return Conditioning(move(self.embeds), move(self.pooled), move(self.uncond_embeds), move(self.uncond_pooled))

    def index(self, idx) -> Conditioning:
        def sel(t):
            return None if t is None else t[idx]
        return Conditioning(sel(self.embeds), sel(self.pooled), sel(self.uncond_embeds), sel(self.uncond_pooled))


class FlowPolicy:
    """Base class: subclasses set `transformer`, `latent_shape`, `default_shift` and implement the
    three hooks below; `velocity` (with CFG) is shared."""

    transformer: torch.nn.Module  # the part RL fine-tuning updates
    latent_shape: tuple[int, int, int]  # (C, H, W) of x_t
    default_shift: float = 3.0
    default_guidance: float = 1.0  # CFG scale for making pictures when none is given (1 = off)
    name: str = "policy"
    supports_cfg: bool = True
    toy_world: bool = False  # a model of the toy world (the embedded model): its rewards and prompts are the defaults
    vae_factor: int = 1  # image pixels per latent pixel (8 for SD3 / FLUX; 1 for the pixel-space embedded model)

    @property
    def device(self) -> torch.device:
        return next(self.transformer.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the transformer's weights (float32 unless the model was loaded in half precision)."""
        return next(self.transformer.parameters()).dtype

    @property
    def image_size(self) -> int:
        """Side in pixels of the square images `decode` returns (what a reward must accept)."""
        return self.latent_shape[-1] * self.vae_factor

    def check_prompt(self, prompt: str) -> None:
        """Raise WorkbenchError if the model cannot take this prompt (default: any text goes)."""

    def schedule(self, steps: int, shift: float | None = None) -> torch.Tensor:
        """Sigmas (T + 1,) from 1 to 0 on this policy's device (default: SD3-style shifted schedule)."""
        return sd3_sigmas(steps, self.default_shift if shift is None else shift).to(self.device)

    def encode(self, prompts: list[str], cfg: bool = False) -> Conditioning:
        raise NotImplementedError

    def denoise(self, x: torch.Tensor, sigma: torch.Tensor, embeds, pooled) -> torch.Tensor:
        """Raw velocity prediction for x (B, C, H, W) at noise level sigma (B,) in [0, 1]."""
        raise NotImplementedError

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """Latents (B, C, H, W) -> RGB images (B, 3, H', W') in [0, 1]."""
        raise NotImplementedError

    def with_transformer(self, transformer: torch.nn.Module) -> FlowPolicy:
        """A shallow copy of this policy that denoises with `transformer`; everything else stays shared.

        Attributes holding the old transformer (the embedded model, a diffusers pipeline) are copied
        shallowly with it replaced, so the copy never writes into the original. Used to move a copy of
        the weights away from the sampling policy (`workbench.rl.explain.moved_log_probs`).
        """
        other = copy.copy(self)
        for name, value in vars(self).items():
            if value is not self.transformer and getattr(value, "transformer", None) is self.transformer:
                holder = copy.copy(value)
                holder.transformer = transformer
                setattr(other, name, holder)
        other.transformer = transformer
        return other

    def velocity(self, x: torch.Tensor, sigma: torch.Tensor, cond: Conditioning,
                 guidance_scale: float = 1.0) -> torch.Tensor:
        """v_theta(x_t, t, c), with classifier-free guidance when guidance_scale != 1. x: (B, C, H, W)."""
        sigma = sigma.expand(x.shape[0]) if sigma.dim() == 0 or sigma.numel() == 1 else sigma  # (B,)
        if guidance_scale == 1.0 or cond.uncond_embeds is None:
            return self.denoise(x, sigma, cond.embeds, cond.pooled)
        embeds = torch.cat([cond.uncond_embeds, cond.embeds])  # (2B, L, D)
        pooled = None if cond.pooled is None else torch.cat([cond.uncond_pooled, cond.pooled])
        v_uncond, v_cond = self.denoise(torch.cat([x, x]), torch.cat([sigma, sigma]), embeds, pooled).chunk(2)
        return v_uncond + guidance_scale * (v_cond - v_uncond)
