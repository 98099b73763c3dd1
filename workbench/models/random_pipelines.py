"""SD3 / FLUX pipelines with random weights, built from configs on a device without any download: the published
architectures at their real size (`models.architectures`, with CLIP-L, OpenCLIP bigG and T5-XXL text encoders and
the 16-channel VAE), or tiny ones of the same classes (as diffusers' own tests build them). Tokenizers are hub-free
(letters for CLIP, a few words for T5): the prompts' ids differ from the real tokenizers', their shapes do not.

`scripts/gpu_smoke.py` trains them to answer "does the workbench work on this card" before any weights are
downloaded; what they draw is noise.

    policy = random_policy("sd3.5-medium", "cuda")   # SD3.5 Medium's shapes, random bfloat16 weights, on the GPU
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import torch

from workbench.core.errors import WorkbenchError
from workbench.models.architectures import ARCHITECTURES

T5_XXL = dict(d_model=4096, d_ff=10240, d_kv=64, num_heads=64, num_layers=24, vocab_size=32128,
              feed_forward_proj="gated-gelu")  # google/t5-v1_1-xxl's encoder (SD3's text_encoder_3, FLUX's _2)
CLIP_L = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
              projection_dim=768, hidden_act="quick_gelu")  # openai/clip-vit-large-patch14's text model
CLIP_G = dict(hidden_size=1280, intermediate_size=5120, num_hidden_layers=32, num_attention_heads=20,
              projection_dim=1280, hidden_act="gelu")  # OpenCLIP ViT-bigG's text model (SD3's text_encoder_2)
TINY_CLIP = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
                 projection_dim=32, hidden_act="gelu")
TINY_T5 = dict(d_model=32, d_ff=37, d_kv=8, num_heads=4, num_layers=2, vocab_size=1000)
VAE = dict(down_block_types=["DownEncoderBlock2D"] * 4, up_block_types=["UpDecoderBlock2D"] * 4,
           block_out_channels=[128, 256, 512, 512], layers_per_block=2, latent_channels=16, norm_num_groups=32,
           sample_size=1024, use_quant_conv=False, use_post_quant_conv=False)  # SD3 / FLUX's 16-channel VAE
TINY_VAE = dict(block_out_channels=[4], layers_per_block=1, latent_channels=4, norm_num_groups=1, sample_size=32,
                use_quant_conv=False, use_post_quant_conv=False, mid_block_add_attention=False)
VAE_SCALING = {"sd3": (1.5305, 0.0609), "flux": (0.3611, 0.1159)}  # (scaling_factor, shift_factor)


@contextmanager
def _default_dtype(dtype: torch.dtype):
    """Parameters created in `dtype` (bfloat16 halves what a real-size model needs while it is built)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def clip_tokenizer():
    """A hub-free CLIP BPE tokenizer: every lowercase letter (and its word-final form), no merges."""
    from transformers import CLIPTokenizer

    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for ch in "abcdefghijklmnopqrstuvwxyz":
        vocab[ch], vocab[ch + "</w>"] = len(vocab), len(vocab) + 1
    return CLIPTokenizer(vocab=vocab, merges=[], model_max_length=77)


def t5_tokenizer():
    """A hub-free T5 (Unigram) tokenizer over a few words; every other word is <unk>."""
    from transformers import T5Tokenizer

    words = ["a", "photo", "of", "cat", "dog", "red", "blue", "the", "on", "in"]
    return T5Tokenizer(vocab=[("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)] + [("▁" + w, -1.0) for w in words],
                       extra_ids=0)


def _kind(name: str) -> str:
    if name not in ARCHITECTURES:
        raise WorkbenchError(f"unknown architecture '{name}'; valid: {', '.join(ARCHITECTURES)}")
    return "sd3" if ARCHITECTURES[name].transformer_class == "SD3Transformer2DModel" else "flux"


def random_pipeline(name: str, device: str | torch.device = "cpu", dtype: torch.dtype = torch.bfloat16,
                    seed: int = 0, tiny: bool = False):
    """The diffusers pipeline of architecture `name` with random weights drawn from `seed` on `device` in `dtype`;
    tiny: the same classes a few hundred parameters wide (SD3 without T5, as diffusers' tests)."""
    import diffusers
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection, T5Config, T5EncoderModel

    kind, arch = _kind(name), ARCHITECTURES[name]
    torch.manual_seed(seed)
    clip = {"bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 1, "vocab_size": 1000 if tiny else 49408,
            "layer_norm_eps": 1e-5}
    scaling, shift = VAE_SCALING[kind]
    with torch.device(device), _default_dtype(dtype):
        if tiny:
            transformer = (diffusers.SD3Transformer2DModel(
                sample_size=32, patch_size=2, in_channels=4, num_layers=1, attention_head_dim=8, num_attention_heads=4,
                caption_projection_dim=32, joint_attention_dim=32, pooled_projection_dim=64, out_channels=4)
                if kind == "sd3" else diffusers.FluxTransformer2DModel(
                patch_size=1, in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=16,
                num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=32, axes_dims_rope=[4, 4, 8],
                guidance_embeds=True))
        else:
            transformer = getattr(diffusers, arch.transformer_class)(**arch.config)
        vae = diffusers.AutoencoderKL(in_channels=3, out_channels=3, scaling_factor=scaling, shift_factor=shift,
                                      **(TINY_VAE if tiny else VAE))
        clip_l = CLIPTextConfig(**clip, **(TINY_CLIP if tiny else CLIP_L))
        t5 = None if tiny and kind == "sd3" else T5EncoderModel(T5Config(**(TINY_T5 if tiny else T5_XXL)))
        if kind == "sd3":
            clip_g = CLIPTextConfig(**clip, **(TINY_CLIP if tiny else CLIP_G))
            return diffusers.StableDiffusion3Pipeline(
                transformer=transformer, vae=vae, scheduler=diffusers.FlowMatchEulerDiscreteScheduler(shift=3.0),
                text_encoder=CLIPTextModelWithProjection(clip_l), tokenizer=clip_tokenizer(),
                text_encoder_2=CLIPTextModelWithProjection(clip_g), tokenizer_2=clip_tokenizer(),
                text_encoder_3=t5, tokenizer_3=None if t5 is None else t5_tokenizer())
        scheduler = diffusers.FlowMatchEulerDiscreteScheduler(shift=3.0, use_dynamic_shifting=True, base_shift=0.5,
                                                              max_shift=1.15)
        return diffusers.FluxPipeline(transformer=transformer, vae=vae, scheduler=scheduler,
                                      text_encoder=CLIPTextModel(clip_l), tokenizer=clip_tokenizer(),
                                      text_encoder_2=t5, tokenizer_2=t5_tokenizer())


def random_policy(name: str, device: str | torch.device = "cpu", dtype: torch.dtype = torch.bfloat16,
                  seed: int = 0, tiny: bool = False, **options):
    """The workbench policy (SD3Policy / FluxPolicy) around `random_pipeline` (options: resolution, ...)."""
    from workbench.models.adapters import FluxPolicy, SD3Policy

    pipe = random_pipeline(name, device, dtype, seed, tiny)
    policy = (SD3Policy if _kind(name) == "sd3" else FluxPolicy)(pipe, **options)
    policy.name = f"{policy.name}:random-{name}{'-tiny' if tiny else ''}"
    return policy


def save_random_pipeline(name: str, folder: str | Path, tiny: bool = True, seed: int = 0) -> Path:
    """A random pipeline saved as a diffusers folder (float32 on the CPU), which `--model` and the app load."""
    folder = Path(folder)
    random_pipeline(name, "cpu", torch.float32, seed, tiny).save_pretrained(folder)
    return folder
