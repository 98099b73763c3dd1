"""Reward hacking in the crosses lesson: the checkerboard share of its held-out pictures, and a run's verdict.

    .venv/bin/python experiments/lesson_quality.py                 # the shipped lesson's Before / Now grids
    .venv/bin/python experiments/lesson_quality.py runs/crosses    # also a run's held-out evaluations

The shipped result (workbench/weights/crosses_lesson) keeps the Before and Now grids of its first 8 held-out
prompts (top row without CFG, bottom row with the model's CFG, each image drawn 4x with nearest-neighbour
pixels): the script cuts them back into 32-pixel images and measures `core.imaging.checkerboard_share` on each
row. For a run folder it prints the evaluations' reward, checkerboard share and cross accuracy (without and with
CFG), the verdicts of `train.hacking.run_verdict` in both and whether the texture was held back
(`texture_held_back`; runs made before the metric existed have no eval/checkerboard rows).
"""

from __future__ import annotations

import sys

import numpy as np
import torch
from PIL import Image

from workbench.core.imaging import checkerboard_share
from workbench.train.evaluation import GRID_PROMPTS
from workbench.train.hacking import run_verdict, texture_held_back
from workbench.train.lesson_result import shipped_lesson
from workbench.train.store import RunStore

SCALE, PAD, SIZE = 4, 2, 32  # how `core.imaging.grid` drew the 32-pixel images
EXTRA = ("eval/checkerboard", "eval_cfg/checkerboard", "eval/cross_accuracy", "eval_cfg/cross_accuracy")


def grid_images(path) -> torch.Tensor:
    """(R * GRID_PROMPTS, 3, 32, 32) in [0, 1]: the images of a held-out grid, row by row."""
    pixels = torch.from_numpy(np.array(Image.open(path).convert("RGB"))).permute(2, 0, 1).float() / 255
    cell = SIZE * SCALE + PAD
    rows = (pixels.shape[1] - PAD) // cell
    return torch.stack([pixels[:, PAD + r * cell:PAD + r * cell + SIZE * SCALE:SCALE,
                               PAD + c * cell:PAD + c * cell + SIZE * SCALE:SCALE]
                        for r in range(rows) for c in range(GRID_PROMPTS)])


def main() -> None:
    lesson = shipped_lesson()
    for label, path in (("Before", lesson.before), ("Now", lesson.now)):
        shares = checkerboard_share(grid_images(path)).view(-1, GRID_PROMPTS).mean(dim=1)  # (rows,)
        print(f"shipped lesson {label:6s} checkerboard share: " + ", ".join(
            f"{name} {float(s):.3f}" for name, s in zip(("no CFG", "model's CFG"), shares)))
    for folder in sys.argv[1:]:
        rows = RunStore.open(folder).info().metrics
        for r in rows:
            if "eval/checkerboard" in r:
                print(f"{folder} iteration {r['iteration']:3d}: eval/reward_mean {r['eval/reward_mean']:.3f}, "
                      + ", ".join(f"{key} {r[key]:.3f}" for key in EXTRA if key in r))
        for space in ("eval", "eval_cfg"):
            verdict = run_verdict(rows, space)
            print(f"{folder} {space}: " + (verdict.text if verdict else "fewer than two evaluations with a share"))
        print(f"{folder}: texture held back (train.hacking.texture_held_back): {texture_held_back(rows)}")


if __name__ == "__main__":
    main()
