"""Chunk-GRPO Workbench: see and try RL fine-tuning of text-to-image flow models.

The library is layered; a module imports only from layers below its own (tests/test_layers.py checks it):

    cli, ui        the command line and the Gradio app
    viz            plotly figures (no gradio): the app, the notebooks and exported pages share them
    train          settings, presets, trainer, rollout, run store, several processes
    rl             advantages, objectives, chunking, credit          (pure maths over tensors)
    rewards        reward functions and specs
    models         the embedded model, SD3 / FLUX adapters
    flow           schedules, the SDE step, the policy interface, sampling, dynamics
    toyworld       the embedded model's world and its attribute checks
    core           errors, registries, images

The names of the README's example are importable from here without loading anything heavy up front:

    from workbench import SamplingConfig, build_reward, load_policy, measure_credit, sample_group
"""

from __future__ import annotations

import importlib
import os

# OpenMP threads spin briefly, then sleep while they wait, so a process sharing cores with another (the app and
# its fine-tune) does not collapse (workbench/core/threads.py PASSIVE_WAIT). Read when torch loads; a value set
# in the environment stays.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("GOMP_SPINCOUNT", "10000")

_EXPORTS = {"load_policy": "workbench.train.sources", "load_model": "workbench.models.adapters",
            "sample_group": "workbench.flow.sampler",
            "SamplingConfig": "workbench.flow.trajectory", "build_reward": "workbench.rewards",
            "measure_credit": "workbench.rl.credit", "TrainConfig": "workbench.train",
            "Trainer": "workbench.train"}
LAYERS = ("core", "toyworld", "flow", "models", "rewards", "rl", "train", "viz", ("cli", "ui"))

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'workbench' has no attribute {name!r}")
