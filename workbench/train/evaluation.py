"""Held-out evaluation during a fine-tune: fixed prompts and noise, the deterministic ODE, at one or more CFG scales.

Every evaluation of every run uses the same noise (EVAL_SEED), so its numbers compare across iterations,
seeds and objectives, and its grid of the first held-out prompts is a before/after picture of the run.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from PIL import Image

from workbench.core.imaging import checkerboard_share, grid
from workbench.flow.policy import FlowPolicy
from workbench.flow.sampler import ode_sample
from workbench.rewards import RewardFunction
from workbench.train.tasks import Task

EVAL_SEED = 1234  # fixed noise for the held-out ODE evaluation, the same for every run and seed
GRID_PROMPTS = 8  # held-out prompts in the before/after grid of every evaluation


@dataclass
class Evaluation:
    metrics: dict[str, float]  # {space}/reward_mean, {space}/checkerboard, {space}/<reward>/mean, {space}/<task
    # metric>, time/eval_(cpu_)s
    grid: Image.Image  # the first GRID_PROMPTS held-out images, one row per CFG scale
    grid_prompts: list[str]


@torch.no_grad()
def evaluate(policy: FlowPolicy, prompts: list[str], reward_fn: RewardFunction, task: Task | None,
             scales: dict[str, float], steps: int, shift: float | None) -> Evaluation:
    """Score the held-out prompts under each CFG scale: {"eval": 1.0, "eval_cfg": 4.0} -> eval/* and eval_cfg/*."""
    import time

    t0, cpu0, out, rows = time.perf_counter(), time.process_time(), {}, []
    for space, scale in scales.items():
        images = ode_sample(policy, prompts, steps=steps, seed=EVAL_SEED, shift=shift,
                            guidance_scale=scale)  # (E, 3, H, W)
        comps = reward_fn.components(images, prompts)
        out |= {f"{space}/reward_mean": reward_fn.combine(comps).mean().item()}
        out |= {f"{space}/checkerboard": checkerboard_share(images).mean().item()}  # quality beside the reward
        out |= {f"{space}/{k}/mean": v.mean().item() for k, v in comps.items()}
        out |= {f"{space}/{k}": v for k, v in (task.metrics(images, prompts) if task else {}).items()}
        rows.append(images[:GRID_PROMPTS])
    picture = grid(torch.cat(rows), ncol=len(rows[0]))
    seconds = {"time/eval_s": time.perf_counter() - t0, "time/eval_cpu_s": time.process_time() - cpu0}
    return Evaluation(out | seconds, picture, prompts[:GRID_PROMPTS])
