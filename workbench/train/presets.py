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


@PRESETS.register("crosses")
def crosses() -> TrainConfig:
    """Teach the embedded model to draw crosses (it draws blobs and rings: 1 of 49 held-out crosses right).

    Measured by scripts/experiment_crosses.py (docs/crosses.md): one thread, process CPU time, seed 0 unless
    said. With the defaults (lr 3e-5, all 16 steps) an earlier exploration reached 0.10 held-out cross accuracy
    without CFG / 0.27 at CFG 4 after 110 iterations; lr 1e-4, 0.14 / 0.18. Training only the first 8 steps
    (window 0..8) helped most: 0.33 / 0.43 at lr 1e-4, 0.35 / 0.51 at lr 5e-5. With 4 prompts per iteration
    the accuracy oscillated (0.22 / 0.27 after 100 iterations, 180 CPU-s) and the pictures grew stripes and
    lost their colours; 8 prompts per iteration averaged that noise away: seed 0 reached 0.65 / 0.67 after 70
    iterations (240 training CPU-s); after 80, over seeds 0 / 1 / 2, 0.57 / 0.57 / 0.69 without CFG and
    0.55 / 0.37 / 0.47 at CFG 4 (docs/crosses.md).
    """
    return TrainConfig(task="crosses",  # 275 training-split cross prompts, 49 disjoint held-out ones
                       reward="shape_match",  # the shape alone: colour, size and position are already right
                       eval_prompts=49,  # every held-out cross prompt
                       eval_cfg=True,  # also at the model's default CFG 4, where pictures are made
                       eval_every=10,  # 9 evaluations (~3 CPU-s each): the grid changes between them
                       window=(0, 8),  # cross or ring is decided in the first 8 of 16 steps; half the update cost
                       chunks="1,2,2,3",  # GCPO-style temporal chunks over the 8 trained steps
                       lr=5e-5,  # 3e-5 too slow, 1e-4 worse (see above)
                       prompts_per_iteration=8,  # 4 was too noisy (see above); ~3.6 CPU-s per iteration
                       keep_checkpoints=8,  # every 10th iteration stays loadable: credit before, during and after
                       iterations=80)  # 268-274 training CPU-s on one thread: within 5 minutes on 2 cores
