"""Training: settings, presets, the trainer loop, its rollout, the run store and several processes.

    config.py       TrainConfig, validated once for the CLI, the app and the notebooks
    presets.py      named recipes (embedded_demo, gcpo, flow_grpo, dapo, gpg, ...)
    trainer.py      the loop; emits TrainerEvents (events.py) to its subscribers
    rollout.py      one iteration's sampling rounds (DAPO refill, GPG resampling)
    evaluation.py   held-out evaluation at fixed noise, with and without CFG; the before/after grid
    tasks.py        named tasks (crosses): training and held-out prompts, a measure of success
    store.py        the run folder on disk, a subscriber of the events
    trackers.py     TensorBoard and trackio, subscribers too
    update.py       the inner updates: minibatches shared by processes with the one-process gradient
    microbatch.py   the gradient of a minibatch in micro-batches (and across processes), exact
    trainable.py    what trains (all weights or LoRA), copying checkpoint weights in
    sources.py      load_policy: a model folder, a run or one of its checkpoints (the app's picker, --model)
    distributed.py  several processes through accelerate (DDP, FSDP)
    model_settings.py  the settings whose defaults depend on the model ('auto')
    dry_run.py      a run's plan before it loads: resolved settings, memory estimate (memory.py), verdict
"""

from __future__ import annotations

from workbench.train.config import TrainConfig
from workbench.train.events import RunSummary, TrainerEvent
from workbench.train.presets import PRESETS, preset
from workbench.train.sources import load_policy
from workbench.train.trainer import Trainer

__all__ = ["PRESETS", "RunSummary", "TrainConfig", "Trainer", "TrainerEvent", "load_policy", "preset"]
