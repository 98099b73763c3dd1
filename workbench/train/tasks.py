"""Named tasks: what a fine-tune is for, as training prompts, held-out prompts and a measure of success.

A task makes a fine-tune's effect visible. `crosses`: the embedded model draws a cross as a blob or a ring
(1 of 49 held-out crosses right at CFG 4 before any fine-tune); its training prompts are the crosses of
the world's training scenes and its held-out prompts the crosses of the 200 held-out scenes (never seen in
pretraining), so the two lists are disjoint; success is the share of held-out crosses the attribute
checks read back as crosses (`workbench.toyworld.perception`).

    task = TASKS.get("crosses")()
    task.metrics(images, prompts)   # {"cross_accuracy": 0.52}
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from workbench.core.registry import Registry
from workbench.toyworld.perception import detect
from workbench.toyworld.world import split_scenes

TASKS = Registry("task")


@dataclass(frozen=True)
class Task:
    """A fine-tuning task on the embedded model's world (its name is the one it is registered under in TASKS)."""

    train_prompts: list[str]
    eval_prompts: list[str]
    metrics: Callable[[torch.Tensor, list[str]], dict[str, float]]  # images (B, 3, H, W), prompts -> metrics
    grid_prompts: int = 8  # the first this many held-out prompts make the before/after grid


def shape_accuracy(shape: str) -> Callable[[torch.Tensor, list[str]], dict[str, float]]:
    """The share of images in which `detect` finds an object and reads its shape as `shape`."""
    def metrics(images: torch.Tensor, prompts: list[str]) -> dict[str, float]:
        right = [float(det.found and det.scene().shape == shape) for det in map(detect, images)]
        return {f"{shape}_accuracy": sum(right) / max(len(right), 1)}
    return metrics


def crosses() -> Task:
    """Draw crosses: train on the training scenes' crosses, measure on the held-out scenes' crosses."""
    train, heldout = split_scenes()
    return Task([s.prompt() for s in train if s.shape == "cross"], [s.prompt() for s in heldout if s.shape == "cross"],
                shape_accuracy("cross"))


TASKS.add(crosses, "crosses")
