"""Training: settings, presets, the trainer loop, its rollout, the run store and several processes.

    config.py       TrainConfig, validated once for the CLI, the app and the notebooks
    presets.py      named recipes (embedded_demo, gcpo, flow_grpo, dapo, gpg, ...)
    trainer.py      the loop; emits TrainerEvents
    rollout.py      one iteration's sampling rounds (DAPO refill, GPG resampling)
    store.py        the run folder on disk
    trainable.py    what trains (all weights or LoRA) and loading a trained policy
    distributed.py  torchrun / accelerate helpers
"""

from __future__ import annotations

from workbench.train.config import TrainConfig
from workbench.train.presets import PRESETS, preset
from workbench.train.trainable import load_trained_policy
from workbench.train.trainer import RunSummary, Trainer, TrainerEvent

__all__ = ["PRESETS", "RunSummary", "TrainConfig", "Trainer", "TrainerEvent", "load_trained_policy", "preset"]
