"""Named presets: small functions that start from `TrainConfig`'s defaults and override a few fields,
each magic number with its reason (flow_grpo recipes, nanoGPT `config/`).

    preset("dapo", iterations=10)   # DAPO's dynamic sampling and clip-higher, 10 iterations
"""

from __future__ import annotations

from dataclasses import replace

from workbench.core.registry import Registry
from workbench.train.config import TrainConfig

PRESETS = Registry("preset")


def preset(name: str, **overrides) -> TrainConfig:
    """The named preset with `overrides` applied (validated again)."""
    return replace(PRESETS.get(name)(), **overrides)


@PRESETS.register("embedded_demo")
def embedded_demo() -> TrainConfig:
    """The defaults: Chunk-GRPO [2,3,4,7] on the embedded model, 30 iterations of 4 x 8 samples (CPU minutes).

    How each default was chosen (lr, prompts per iteration, no KL term, the sampler, the clip range), with the
    measurements and the scripts that rerun them: docs/tuning.md.
    """
    return TrainConfig()


@PRESETS.register("gcpo")
def gcpo() -> TrainConfig:
    """GCPO / Chunk-GRPO (arXiv 2510.21583) as run on FLUX: full fine-tuning, tiny steps."""
    return TrainConfig(group=12,  # paper: group 12
                       lr=1e-5,  # paper: 1e-5
                       max_grad_norm=0.01,  # paper: stability setting
                       clip_low=5e-5,  # paper: eps 5e-5
                       kl_beta=0.0,  # paper: no KL term
                       iterations=150)  # paper: 150 iterations


@PRESETS.register("gcpo_weighted")
def gcpo_weighted() -> TrainConfig:
    """GCPO with weighted chunk sampling (half the chunks per iteration, drawn by L1_rel)."""
    return replace(gcpo(), chunk_fraction=0.5)  # paper: fraction 0.5


@PRESETS.register("flow_grpo")
def flow_grpo() -> TrainConfig:
    """Flow-GRPO (arXiv 2505.05470) SD3 recipe (its config/grpo.py, geneval_sd3): step ratios, LoRA, KL to the base."""
    return TrainConfig(objective="step_grpo",
                       group=24,  # paper: group 24
                       steps=9,  # sample 10 steps, train the first 9: timestep_fraction 0.99, int(10 * 0.99) = 9
                       global_std=True,  # config sample.global_std = True: one reward std for the whole batch
                       lr=3e-4, lora_rank=32,  # paper: LoRA r 32 / alpha 64, lr 3e-4
                       clip_low=1e-4,  # config train.clip_range 1e-4
                       kl_beta=0.04)  # GenEval and OCR beta 0.04 (PickScore 0.01), released code's KL form


@PRESETS.register("dance_grpo")
def dance_grpo() -> TrainConfig:
    """DanceGRPO: step ratios with the constant-diffusion SDE."""
    return TrainConfig(objective="step_grpo", sde="dance_grpo",
                       noise_level=0.3,  # DanceGRPO eta 0.3
                       clip_low=1e-4)  # DanceGRPO clip 1e-4


@PRESETS.register("mixgrpo")
def mixgrpo() -> TrainConfig:
    """MixGRPO (arXiv 2507.21802): SDE and training on a 4-step window sliding to lower noise every 25 iterations."""
    return TrainConfig(objective="step_grpo", mixgrpo=True,
                       chunks="4")  # 4 trained steps: one chunk should chunk_grpo be chosen


@PRESETS.register("gspo")
def gspo() -> TrainConfig:
    """GSPO (arXiv 2507.18071): one sequence ratio per trajectory."""
    return TrainConfig(objective="gspo",
                       clip_low=3e-4, clip_high=4e-4)  # paper: 3e-4 / 4e-4


@PRESETS.register("gpg")
def gpg() -> TrainConfig:
    """GPG (arXiv 2504.02546): no ratio, alpha-scaled advantages, one update per rollout."""
    return TrainConfig(objective="gpg", advantage="gpg",
                       minibatch=0)  # one update per rollout: all of an iteration's transitions, whatever N, G, T


@PRESETS.register("dapo")
def dapo() -> TrainConfig:
    """DAPO (arXiv 2503.14476): token-level step loss, clip-higher, dynamic sampling."""
    base = TrainConfig(objective="dapo", dynamic_sampling=True)
    return replace(base, clip_high=base.clip_low * 0.28 / 0.2)  # DAPO's 0.2 / 0.28 asymmetry


@PRESETS.register("dr_grpo")
def dr_grpo() -> TrainConfig:
    """Dr. GRPO (arXiv 2503.20783): advantages without the std division, loss normalised by a constant T."""
    return TrainConfig(objective="dr_grpo", advantage="dr_grpo")  # its advantage: r - mean(r), no std


@PRESETS.register("gfpo")
def gfpo() -> TrainConfig:
    """GFPO (arXiv 2508.09726): GRPO advantages over the kept half of each group, filtered by a second score."""
    return TrainConfig(objective="gfpo", advantage="gfpo",
                       gfpo_metric="sharpness")  # the paper keeps the shortest responses; here the sharpest images
