"""Tiny random SD3 and FLUX pipelines saved to a folder, as diffusers' own tests build them (hub-free tokenizers).

Shared by the tests of real-model paths. The FLUX pipeline's VAE has one block (factor 1), so its default
resolution is the pipeline's 128 latents = 128 px: not the toy world's 32. That VAE has no mid-block attention:
at factor 1 it would attend over all 16,384 pixels of a 128 px image (a real VAE's factor 8 makes that 256
positions) and took most of a FLUX test's time.
"""

from __future__ import annotations

from pathlib import Path

import torch
from test_adapters import clip_config, clip_tokenizer, t5_tokenizer, tiny_vae


def save_tiny_flux(folder: Path) -> Path:
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
    from transformers import CLIPTextModel, T5Config, T5EncoderModel

    torch.manual_seed(0)
    transformer = FluxTransformer2DModel(patch_size=1, in_channels=16, num_layers=1, num_single_layers=1,
                                         attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                                         pooled_projection_dim=32, axes_dims_rope=[4, 4, 8], guidance_embeds=True)
    t5 = T5EncoderModel(T5Config(vocab_size=1000, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4))
    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15)
    FluxPipeline(transformer=transformer, vae=tiny_vae(mid_attention=False), scheduler=scheduler,
                 text_encoder=CLIPTextModel(clip_config()), tokenizer=clip_tokenizer(),
                 text_encoder_2=t5, tokenizer_2=t5_tokenizer()).save_pretrained(folder)
    return folder


def save_tiny_sd3(folder: Path, layers: int = 1, heads: int = 4, head_dim: int = 8, sample_size: int = 32) -> Path:
    """SD3 with `layers` joint blocks of `heads` x `head_dim` (the defaults are diffusers' test config)."""
    from diffusers import FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel, StableDiffusion3Pipeline
    from transformers import CLIPTextModelWithProjection

    torch.manual_seed(0)
    transformer = SD3Transformer2DModel(sample_size=sample_size, patch_size=2, in_channels=4, num_layers=layers,
                                        attention_head_dim=head_dim, num_attention_heads=heads,
                                        caption_projection_dim=heads * head_dim, joint_attention_dim=32,
                                        pooled_projection_dim=64, out_channels=4)
    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0)
    StableDiffusion3Pipeline(transformer=transformer, vae=tiny_vae(), scheduler=scheduler,
                             text_encoder=CLIPTextModelWithProjection(clip_config()), tokenizer=clip_tokenizer(),
                             text_encoder_2=CLIPTextModelWithProjection(clip_config()), tokenizer_2=clip_tokenizer(),
                             text_encoder_3=None, tokenizer_3=None).save_pretrained(folder)
    return folder
