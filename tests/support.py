"""Helpers several test files share: a tiny training config and a fresh random policy, cheap rewards, run folders
with checkpoints. A helper module, not a test module: test files import it, never each other."""

from __future__ import annotations

from pathlib import Path

import torch

from workbench.core.files import write_json
from workbench.models.embedded import EmbeddedPolicy, build_embedded
from workbench.train import TrainConfig
from workbench.train.sources import load_policy
from workbench.train.store import CONFIG, RunStore

PROMPT = "a large red circle in the top left on a white background"


def mean_red(images, prompts):
    """A cheap reward: mean of the red channel."""
    return images[:, 0].flatten(1).mean(1)


# 2 prompts x 2 trajectories x 3 trained steps: each iteration takes well under a second on one core
TINY = TrainConfig(group=2, steps=3, chunks="1,2", prompts_per_iteration=2, eval_prompts=1, eval_every=2,
                   iterations=2, sample_every=1, lr=1e-3, clip_low=0.2)


def fresh_policy() -> EmbeddedPolicy:
    """A new random-init embedded model (seed 0): the trainer changes its weights in place."""
    model = build_embedded(seed=0)
    model.text_encoder.eval().requires_grad_(False)
    return EmbeddedPolicy(model)


RED_FLAT_PROMPTS = ["a small red circle in the center on a black background",
                    "a large red ring in the top left on a white background",
                    "a small blue bar in the bottom right on a gray background",
                    "a large green cross in the middle left on a black background"]


def red_flat(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
    """0.5 for every image of a prompt with 'red', else the image mean (different for every sample): red
    groups have zero reward variance, the others do not. Registered as 'red_flat' by the fixture below."""
    red = torch.tensor(["red" in p for p in prompts])
    return torch.where(red, torch.tensor(0.5), images.float().mean(dim=(1, 2, 3)))


def base_weights(model_dir: Path) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in load_policy(model_dir, device="cpu").transformer.named_parameters()}


def make_run(root: Path, model_dir: Path, iterations=(10, 20), name: str = "demo", keep: int = 5, **config) -> Path:
    """A run folder of the model in model_dir with a checkpoint per iteration: every weight + iteration / 1000."""
    store = RunStore.create(root, name)
    write_json(store.path / CONFIG, TrainConfig(model=str(model_dir), iterations=max(iterations), **config).to_dict())
    store.write_status("finished", max(iterations))
    weights = base_weights(model_dir)
    for it in iterations:
        store.save_checkpoint(it, {k: v + it / 1000 for k, v in weights.items()}, {"state": {}, "param_groups": []},
                              keep=keep)
    return store.path


def shift_of(policy, model_dir: Path) -> float:
    """The constant every weight of policy was moved by from the base model."""
    base = base_weights(model_dir)
    moved = {k: v.detach() for k, v in policy.transformer.named_parameters()}
    shifts = {round(float((moved[k] - base[k]).mean()), 4) for k in base}
    assert len(shifts) == 1, shifts
    return shifts.pop()
