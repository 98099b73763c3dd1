"""The checks of a `TrainConfig` (`config.py`): the sizes, counts, prompts and combinations of options a run refuses,
each with a message that says what to change. `TrainConfig.__post_init__` runs them once, for the CLI, the app and
the notebooks; the model-dependent settings are checked in `model_settings`.
"""

from __future__ import annotations

from pathlib import Path

from workbench.core.errors import WorkbenchError
from workbench.core.fields import LIMITS
from workbench.flow.trajectory import check_seed
from workbench.rl.chunking import schedule
from workbench.rl.credit_estimators import lookahead_names
from workbench.rl.objectives import KL_FORMS
from workbench.train.model_settings import check_model_settings, is_real_model
from workbench.train.prompt_sets import is_pipeline_folder
from workbench.train.tasks import TASKS
from workbench.train.trackers import parse_report_to

LR_MAX = 1.0  # a larger AdamW step overflows float32 weights (1e30) or cannot be represented (1e300)
RANGES = {name: LIMITS[name].range() for name in (  # the sizes a run may have, from the one table of limits; memory
    "steps", "prompts_per_iteration", "iterations", "eval_prompts", "lora_rank", "noise_level", "seed", "inner_epochs",
    "max_sample_rounds", "keep_checkpoints", "threads")} | {"group": (2, LIMITS["group"].high)}  # is checked apart


def check_ranges(config) -> None:
    """The seed, the learning rate and every size of RANGES within their bounds."""
    check_seed(config.seed)  # the one seed rule of every command and control
    if config.lr > LR_MAX:
        raise WorkbenchError(f"lr must be in (0, {LR_MAX:g}], got {config.lr:g}; AdamW fine-tunes use 1e-6..1e-3")
    for name, (low, high) in RANGES.items():
        value = getattr(config, name)
        if isinstance(value, (int, float)) and not low <= value <= high:  # 'auto' is checked apart
            raise WorkbenchError(f"{name} must be in {low}..{high}, got {value}")


def check_counts(config) -> None:
    """The counts of iterations, steps, epochs, ... positive, the group at least 2, and the model's settings."""
    for name in ("eval_every", "prompts_per_iteration", "steps", "iterations", "inner_epochs", "grad_accum",
                 "sample_every", "checkpoint_every", "keep_checkpoints"):
        if not isinstance(getattr(config, name), int) or getattr(config, name) < 1:
            raise WorkbenchError(f"{name} must be a positive integer, got {getattr(config, name)!r}")
    if config.minibatch is not None and (not isinstance(config.minibatch, int) or config.minibatch < 0):
        raise WorkbenchError(f"minibatch must be None (one group), 0 (all transitions) or a positive number of "
                             f"transitions, got {config.minibatch!r}")
    if config.group < 2:
        raise WorkbenchError(f"group must be >= 2 (advantages compare samples of one prompt), got {config.group}")
    if not 0 <= config.eval_prompts <= 200:
        raise WorkbenchError(f"eval_prompts must be in 0..200 (the held-out scenes), got {config.eval_prompts}")
    check_model_settings(config)


def check_prompts(config) -> None:
    """One source of training prompts (prompts, prompt_file or a task of the toy world), and a LoRA on a real model."""
    if config.prompts is not None and config.prompt_file is not None:
        raise WorkbenchError("give prompts or prompt_file, not both")
    if config.task is not None:
        TASKS.get(config.task)  # an unknown name lists the valid ones
        if is_real_model(config.model):  # every task is a lesson of the toy world
            raise WorkbenchError(f"the task '{config.task}' is a lesson of the embedded model's toy world, not of an "
                                 "SD3 / FLUX model; drop the task (or the preset that brings it): a real model "
                                 "trains on the shipped real prompts, or on prompts / prompt_file")
        if config.prompts is not None or config.prompt_file is not None:
            raise WorkbenchError(f"the task '{config.task}' brings its own prompts; drop prompts / prompt_file "
                                 "or the task")
    if config.lora is not None:
        from workbench.models.lora import adapter_format

        if not is_pipeline_folder(config.model):
            raise WorkbenchError(f"lora {config.lora}: a LoRA adapter goes on an SD3 / FLUX model folder; give the "
                                 "base it was trained on as model")
        adapter_format(config.lora)  # a missing folder or files are named now, not after the model loaded
    if config.prompts is not None and not [p for p in config.prompts if p.strip()]:
        raise WorkbenchError("prompts is empty; give at least one prompt or leave it None for the world's")
    if config.prompt_file is not None and not Path(config.prompt_file).is_file():
        raise WorkbenchError(f"prompt file {config.prompt_file} does not exist; give a text file, one prompt a line")


def check_options(config) -> None:
    """The rewards' folders and the objective's, the SDE's, the sampling's and the critic's options together."""
    from workbench.rewards import check_folders, parse_reward_spec

    named = set(parse_reward_spec(config.reward)) if config.reward is not None else set()
    if config.gfpo_metric is not None:
        named |= set(parse_reward_spec(config.gfpo_metric))
    check_folders(named, config.reward_folders())  # model-based rewards need their folder, and only they
    if config.window is not None and config.mixgrpo:
        raise WorkbenchError("mixgrpo slides its own window; drop window or mixgrpo")
    if config.mixgrpo and config.steps < 4:
        raise WorkbenchError(f"mixgrpo needs steps >= 4 (a 4-step window), got {config.steps}")
    if config.window is not None and not 0 <= config.window[0] < config.window[1] <= config.steps:
        raise WorkbenchError(f"SDE window {config.window} must satisfy 0 <= start < end <= steps ({config.steps})")
    if config.noise_level <= 0:
        raise WorkbenchError("noise_level must be > 0 for training: the ODE (0) has no log-probs to train")
    if config.lr <= 0 or config.max_grad_norm <= 0 or config.weight_decay < 0:
        raise WorkbenchError("lr and max_grad_norm must be > 0 and weight_decay >= 0")
    config.objective_settings()  # validates clip_low, clip_high, kl_beta
    parse_report_to(config.report_to)
    if config.kl_form not in KL_FORMS:
        raise WorkbenchError(f"kl_form must be one of {', '.join(KL_FORMS)}, got '{config.kl_form}'")
    if config.chunk_fraction is not None and not 0 < config.chunk_fraction <= 1:
        raise WorkbenchError(f"chunk_fraction must be in (0, 1] or None, got {config.chunk_fraction}")
    if config.chunk_weights not in ("l1_rel", "uniform"):
        raise WorkbenchError(f"chunk_weights must be 'l1_rel' or 'uniform', got '{config.chunk_weights}'")
    if config.last_step_sde and (config.train_last_step or config.window is not None or config.mixgrpo):
        raise WorkbenchError("last_step_sde makes the extra untrained last step an SDE step; it needs "
                             "train_last_step=False and no window or mixgrpo")
    if config.chunk_sampling not in ("trajectory", "iteration"):
        raise WorkbenchError(f"chunk_sampling must be trajectory (GCPO) or iteration, not '{config.chunk_sampling}'")
    if (config.advantage == "gfpo") != (config.gfpo_metric is not None):
        raise WorkbenchError("advantage 'gfpo' and gfpo_metric go together: set both (e.g. gfpo_metric="
                             "'sharpness') or neither")
    if not 0.0 <= config.gpg_threshold <= 1.0:
        raise WorkbenchError(f"gpg_threshold is a fraction of the groups, in [0, 1]; got {config.gpg_threshold}")
    if config.max_sample_rounds is not None:
        if not config.refills:
            raise WorkbenchError("max_sample_rounds caps the refill of DAPO dynamic sampling or GPG; set "
                                 "dynamic_sampling or advantage 'gpg', or leave it None")
        if not isinstance(config.max_sample_rounds, int) or config.max_sample_rounds < 1:
            raise WorkbenchError(f"max_sample_rounds must be a positive integer, got {config.max_sample_rounds!r}")
    if config.gfpo_keep is not None and not 1 <= config.gfpo_keep <= config.group:
        raise WorkbenchError(f"gfpo_keep must be in 1..group ({config.group}), got {config.gfpo_keep}")
    if config.uses_chunks:
        schedule(config.chunks, len(config.trained_steps(1)))
    if not (0 <= config.gae_gamma <= 1 and 0 <= config.gae_lambda <= 1 and config.critic_lr > 0
            and config.critic_epochs >= 1 and config.lookahead in lookahead_names()):
        raise WorkbenchError("need gae_gamma and gae_lambda in [0, 1], critic_lr > 0, critic_epochs >= 1 and "
                             f"lookahead one of {', '.join(lookahead_names())}; got {config.gae_gamma}, "
                             f"{config.gae_lambda}, {config.critic_lr}, {config.critic_epochs}, '{config.lookahead}'")
