"""Tiny random SD3 and FLUX pipelines saved to a folder, as diffusers' own tests build them (hub-free tokenizers),
and their parts: tokenizers, text-encoder config, VAE, and a tiny CLIP reward model.

Shared by the tests of real-model paths. The FLUX pipeline's VAE has one block (factor 1), so its default
resolution is the pipeline's 128 latents = 128 px: not the toy world's 32. That VAE has no mid-block attention:
at factor 1 it would attend over all 16,384 pixels of a 128 px image (a real VAE's factor 8 makes that 256
positions) and took most of a FLUX test's time.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from workbench.models.random_pipelines import clip_tokenizer  # the package's, also used by the tests below


def t5_tokenizer():
    """A hub-free T5 (Unigram) tokenizer over a handful of words."""
    from transformers import T5Tokenizer

    words = ["a", "cat", "dog", "red", "blue"]
    return T5Tokenizer(vocab=[("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)] + [("▁" + w, -1.0) for w in words],
                       extra_ids=0)


def clip_config():
    from transformers import CLIPTextConfig

    return CLIPTextConfig(bos_token_id=0, eos_token_id=1, pad_token_id=1, hidden_size=32, intermediate_size=37,
                          num_hidden_layers=2, num_attention_heads=4, vocab_size=1000, projection_dim=32,
                          layer_norm_eps=1e-5, hidden_act="gelu")


def tiny_vae(mid_attention: bool = True):
    from diffusers import AutoencoderKL

    return AutoencoderKL(sample_size=32, in_channels=3, out_channels=3, block_out_channels=(4,), layers_per_block=1,
                         latent_channels=4, norm_num_groups=1, use_quant_conv=False, use_post_quant_conv=False,
                         shift_factor=0.0609, scaling_factor=1.5035, mid_block_add_attention=mid_attention)


# ------------------------------------------------------------------------------------------- CLIP
WORDS = ("a", "large", "red", "circle", "blue", "ring", "in", "the", "center", "on", "white", "background")


def write_tiny_clip(folder) -> None:
    """A random 2-layer CLIP (32 wide, 30x30 images) and a BPE tokenizer knowing WORDS, saved to `folder`."""
    from transformers import CLIPConfig, CLIPModel, CLIPTokenizer

    special = ["<|startoftext|>", "<|endoftext|>"]
    letters = sorted(set("".join(WORDS)))
    vocab = special + letters + [c + "</w>" for c in letters]
    merges = []
    for word in WORDS:  # merge each word left to right: "r e", "re d</w>"
        symbols = list(word[:-1]) + [word[-1] + "</w>"]
        while len(symbols) > 1:
            merges.append(f"{symbols[0]} {symbols[1]}")
            symbols = [symbols[0] + symbols[1]] + symbols[2:]
            vocab.append(symbols[0])
    vocab = list(dict.fromkeys(vocab))
    merges = list(dict.fromkeys(merges))
    raw = folder / "raw_tokenizer"
    raw.mkdir()
    (raw / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(vocab)}))
    (raw / "merges.txt").write_text("\n".join(["#version: 0.2", *merges]) + "\n")
    tokenizer = CLIPTokenizer.from_pretrained(raw)
    tokenizer.save_pretrained(folder / "clip")
    torch.manual_seed(0)
    text = dict(vocab_size=1000, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                num_attention_heads=4, max_position_embeddings=32, eos_token_id=tokenizer.eos_token_id,
                bos_token_id=tokenizer.bos_token_id, pad_token_id=tokenizer.pad_token_id)
    vision = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
                  image_size=30, patch_size=2)
    CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=32)).save_pretrained(folder / "clip")


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
