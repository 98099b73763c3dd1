"""Memory switches of real (SD3 / FLUX) policies: text encoders kept off the device with cached prompt embeddings,
and a sliced, tiled VAE decode. The trainer applies them from TrainConfig (`offload_text_encoders`, `vae_tiling`).

A fine-tune encodes the same few prompts again and again, and T5-XXL alone is 9.5 GB in bfloat16: with
`offload_text_encoders` the encoders stay on the CPU, each (prompt, CFG) is encoded there once, and its embeddings
are kept on the CPU and moved to the device when used (the same numbers as encoding on the device, up to the
CPU's float rounding).
"""

from __future__ import annotations

import torch

from workbench.core.errors import WorkbenchError
from workbench.flow.policy import Conditioning, FlowPolicy

TEXT_ENCODERS = ("text_encoder", "text_encoder_2", "text_encoder_3")


class PromptCache:
    """`policy.encode` with each (prompt, cfg) encoded once; rows are kept on the CPU, returned on the device."""

    def __init__(self, policy: FlowPolicy, encode):
        self.policy, self._encode, self.rows = policy, encode, {}

    def __call__(self, prompts: list[str], cfg: bool = False) -> Conditioning:
        missing = [p for p in dict.fromkeys(prompts) if (p, cfg) not in self.rows]
        if missing:
            fresh = self._encode(missing, cfg).to("cpu")  # (M, ...) one row per missing prompt
            for i, prompt in enumerate(missing):
                self.rows[(prompt, cfg)] = fresh.index(slice(i, i + 1))
        parts = [self.rows[(p, cfg)] for p in prompts]

        def cat(name: str):
            values = [getattr(part, name) for part in parts]
            return None if values[0] is None else torch.cat(values)
        return Conditioning(cat("embeds"), cat("pooled"), cat("uncond_embeds"), cat("uncond_pooled")).to(
            self.policy.device)  # (B, ...)


def offload_text_encoders(policy: FlowPolicy) -> None:
    """Move an SD3 / FLUX policy's text encoders to the CPU and cache its prompt embeddings (`PromptCache`)."""
    pipe = getattr(policy, "pipe", None)
    if pipe is None or not hasattr(policy, "text_device"):
        raise WorkbenchError("offload_text_encoders applies to SD3 / FLUX models (the embedded model's text encoder "
                             "is tiny); turn it off")
    if isinstance(policy.encode, PromptCache):
        return
    for name in TEXT_ENCODERS:
        encoder = getattr(pipe, name, None)
        if encoder is not None:
            encoder.to("cpu")
    policy.text_device = torch.device("cpu")
    policy.encode = PromptCache(policy, policy.encode)


def slice_vae(policy: FlowPolicy) -> None:
    """Decode one image at a time, in tiles above the VAE's tile size (diffusers' `enable_tiling`)."""
    pipe = getattr(policy, "pipe", None)
    if pipe is None or not hasattr(policy, "decode_batch"):
        raise WorkbenchError("vae_tiling applies to SD3 / FLUX models (the embedded model has no VAE); turn it off")
    policy.decode_batch = 1
    pipe.vae.enable_tiling()
