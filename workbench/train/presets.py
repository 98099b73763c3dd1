"""Named presets: small functions that start from `TrainConfig`'s defaults and override a few fields,
each magic number with its reason (flow_grpo recipes, nanoGPT `config/`).

    preset("dapo", iterations=10)   # DAPO's dynamic sampling and clip-higher, 10 iterations

A preset that names a reference matches its released code setting by setting, or lists the departure: the
table "Presets and their references" in docs/methods.md (file and line of each reference value; the
tests read it back).

Every objective whose registration names preset overrides (`ObjectiveInfo.preset`, rl/objectives.py) gets a
preset of its name: TrainConfig with that objective, its paired advantage estimator and the overrides (gspo,
gpg, dapo, dr_grpo, gfpo, ppo, dense_grpo); the reason for each override is commented there.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from workbench.core.registry import Registry
from workbench.rl.objectives import OBJECTIVES
from workbench.train.config import TrainConfig

PRESETS = Registry("preset")


def preset(name: str, **overrides) -> TrainConfig:
    """The named preset with `overrides` applied (validated again)."""
    return replace(PRESETS.get(name)(), **overrides)


def embedded_demo() -> TrainConfig:
    """The defaults: Chunk-GRPO [2,3,4,7] on the embedded model, 30 iterations of 4 x 8 samples (CPU minutes).

    How each default was chosen (lr, prompts per iteration, no KL term, the sampler, the clip range), with the
    measurements and the scripts that rerun them: docs/tuning.md.
    """
    return TrainConfig()


PRESETS.add(embedded_demo, "embedded_demo")


def gcpo() -> TrainConfig:
    """GCPO / Chunk-GRPO (arXiv 2510.21583) as its released FLUX script runs it (xingzhejun/GCPO
    `scripts/finetune/finetune_pickscore_chunk.sh`, `fastvideo/train_grpo_flux_pickscore.py`)."""
    return TrainConfig(group=12,  # script: --num_generations 12
                       lr=1e-5,  # script: --learning_rate 1e-5
                       max_grad_norm=0.01,  # script: --max_grad_norm 0.01
                       clip_low=5e-5,  # script: --clip_range 5e-5 (and --right_clip_range 5e-5)
                       kl_beta=0.0,  # no KL term (kl_coeff commented out)
                       schedule="linspace",  # sigma = shift(linspace(1, 0, 18)), shift 3 (l. 219-220)
                       last_step_sde=True,  # --sampling_steps 17, all SDE; chunks [2,3,4,7] train 16
                       chunk_fraction=0.5,  # --timestep_fraction 0.5: int(4 x 0.5) = 2 chunks per trajectory
                       chunk_weights="uniform",  # --sample_weight commented out: torch.randperm (l. 662-665)
                       adv_unbiased_std=True, adv_eps=1e-8,  # group_rewards.std() + 1e-8 (l. 566)
                       iterations=150)  # paper: 150 iterations


PRESETS.add(gcpo, "gcpo")


def gcpo_weighted() -> TrainConfig:
    """GCPO as the paper describes it: the two chunks per trajectory drawn by L1_rel, not uniformly."""
    return replace(gcpo(), chunk_weights="l1_rel")  # paper / --sample_weight --sample_weight_method normalized


PRESETS.add(gcpo_weighted, "gcpo_weighted")


def flow_grpo() -> TrainConfig:
    """Flow-GRPO (arXiv 2505.05470) SD3 recipe (its config/grpo.py, geneval_sd3): step ratios, LoRA, KL to the base."""
    return TrainConfig(objective="step_grpo",
                       group=24,  # paper: group 24
                       steps=9,  # sample 10 steps, train the first 9: timestep_fraction 0.99, int(10 * 0.99) = 9
                       last_step_sde=True,  # the 10th step is an SDE step too (the pipeline's loop), untrained
                       shared_noise=False,  # the pipeline draws one x_T per image
                       guidance_scale=4.5,  # config sample.guidance_scale 4.5, with CFG in training rollouts
                       global_std=True,  # config sample.global_std = True: one reward std for the whole batch
                       lr=3e-4, lora_rank=32,  # paper: LoRA r 32 / alpha 64, lr 3e-4
                       clip_low=1e-4,  # config train.clip_range 1e-4
                       kl_beta=0.04)  # GenEval and OCR beta 0.04 (PickScore 0.01), released code's KL form


PRESETS.add(flow_grpo, "flow_grpo")


def dance_grpo() -> TrainConfig:
    """DanceGRPO: step ratios with the constant-diffusion SDE (XueZeyue/DanceGRPO
    `scripts/finetune/finetune_flux_grpo.sh`, `fastvideo/train_grpo_flux.py`)."""
    return TrainConfig(objective="step_grpo", sde="dance_grpo",
                       noise_level=0.3,  # script: --eta 0.3
                       clip_low=1e-4,  # script: --clip_range 1e-4
                       group=12,  # script: --num_generations 12
                       lr=1e-5,  # script: --learning_rate 1e-5
                       schedule="linspace",  # shift 3 of linspace(1, 0, 17) (train_grpo_flux.py l. 311-313)
                       train_last_step=True,  # --sampling_steps 16, every one an SDE step that can train
                       chunks=",".join(["1"] * 16), chunk_fraction=0.6,  # int(16 x 0.6) = 9 steps per trajectory,
                       chunk_weights="uniform",  # drawn by torch.randperm for each sample (l. 551-556, 570)
                       adv_unbiased_std=True, adv_eps=1e-8)  # group_rewards.std() + 1e-8 (l. 542)


PRESETS.add(dance_grpo, "dance_grpo")


def mixgrpo() -> TrainConfig:
    """MixGRPO (arXiv 2507.21802): SDE and training on a 4-step window sliding to lower noise every 25 iterations
    (Tencent-Hunyuan/MixGRPO `scripts/finetune/finetune_flux_grpo_MixGRPO.sh`)."""
    return TrainConfig(objective="step_grpo", mixgrpo=True,
                       steps=24,  # script: sampling_steps 25 (the window never reaches the last ones)
                       schedule="linspace",  # shift 3 of linspace(1, 0, 26) (train_grpo_flux.py l. 187-189)
                       group=12,  # script: --num_generations 12
                       lr=1e-5,  # script: --learning_rate 1e-5
                       clip_low=1e-4,  # script: --clip_range 1e-4
                       chunks="4")  # 4 trained steps: one chunk should chunk_grpo be chosen


PRESETS.add(mixgrpo, "mixgrpo")


def crosses() -> TrainConfig:
    """Teach the embedded model to draw crosses (it draws blobs and rings: 1 of 49 held-out crosses right).

    Measured by experiments/crosses.py (docs/crosses.md), without a KL term: one thread, process CPU time, seed 0 unless
    said. With the defaults (lr 3e-5, all 16 steps) an earlier exploration reached 0.10 held-out cross accuracy
    without CFG / 0.27 at CFG 4 after 110 iterations; lr 1e-4, 0.14 / 0.18. Training only the first 8 steps
    (window 0..8) helped most: 0.33 / 0.43 at lr 1e-4, 0.35 / 0.51 at lr 5e-5. With 4 prompts per iteration
    the accuracy oscillated (0.22 / 0.27 after 100 iterations, 180 CPU-s) and the pictures grew stripes and
    lost their colours; 8 prompts per iteration averaged that noise away: seed 0 reached 0.65 / 0.67 after 70
    iterations (240 training CPU-s); after 80, over seeds 0 / 1 / 2, 0.57 / 0.57 / 0.69 without CFG and
    0.55 / 0.37 / 0.47 at CFG 4 (docs/crosses.md).

    Without a KL term the reward also paid for a checkerboard texture (reward hacking, docs/methods.md "Reward
    hacking", experiments/lesson_settings.py, seed 0): 0.76 / 0.65 after 80 iterations, but a checkerboard share of
    0.48 / 0.56 (base model 0.03 / 0.04), flagged from iteration 10 to 30. A KL term to the base model at beta 3
    holds the share at 0.06 / 0.09 and is never flagged, while the accuracy still rises to 0.22 / 0.53 (seed 1:
    never flagged, but the share ends just over 0.10, at 0.10 / 0.13, with 0.24 / 0.51); beta 1
    reached 0.41 / 0.45 but let the share grow to 0.13 / 0.17 (flagged with CFG); Flow-GRPO's 0.04 is too weak.
    """
    return TrainConfig(task="crosses",  # 275 training-split cross prompts, 49 disjoint held-out ones
                       reward="shape_match",  # the shape alone: colour, size and position are already right
                       eval_prompts=49,  # every held-out cross prompt
                       eval_cfg=True,  # also at the model's default CFG 4, where pictures are made
                       eval_every=10,  # 9 evaluations (~3 CPU-s each): the grid changes between them
                       window=(0, 8),  # cross or ring is decided in the first 8 of 16 steps; half the update cost
                       chunks="1,2,2,3",  # GCPO-style temporal chunks over the 8 trained steps
                       lr=5e-5,  # 3e-5 too slow, 1e-4 worse (see above)
                       kl_beta=3.0,  # holds the checkerboard texture back; 1 lets it grow (see above)
                       prompts_per_iteration=8,  # 4 was too noisy (see above); ~3.6 CPU-s per iteration
                       keep_checkpoints=8,  # every 10th iteration stays loadable: credit before, during and after
                       iterations=80)  # 268-274 training CPU-s on one thread without the KL term, ~1.2x with it


PRESETS.add(crosses, "crosses")


def gfpo_scores(group) -> torch.Tensor:
    """(G,) GFPO's second score of a TrajectoryGroup's final images: the reward its preset filters the group by
    (sharpness: the paper keeps the shortest answers, rl/objectives.py). The Objectives tab and the exported page
    explain gfpo with it."""
    from workbench.rewards import build_reward

    return build_reward(preset("gfpo").gfpo_metric)(group.images, [group.prompt] * group.group_size)


def with_objective(base: TrainConfig, name: str) -> TrainConfig:
    """base with objective `name`, its paired advantage estimator and its companion settings (GPG's one update
    per rollout, DAPO's dynamic sampling and clip-higher from base.clip_low), as its registration says."""
    info = OBJECTIVES.info(name)
    if info is None:
        return replace(base, objective=name)
    companions = info.companions(base) if info.companions else {}
    return replace(base, objective=name, advantage=info.advantage, **companions)


def _objective_preset(name: str):
    info = OBJECTIVES.info(name)

    def make() -> TrainConfig:
        return replace(with_objective(TrainConfig(), name), **info.preset)

    make.__doc__ = f"{name}: {info.label} (overrides on its registration, rl/objectives.py)."
    return make


for _name in OBJECTIVES.names():
    if OBJECTIVES.info(_name) is not None and OBJECTIVES.info(_name).preset is not None and _name not in PRESETS:
        PRESETS.register(_name)(_objective_preset(_name))
