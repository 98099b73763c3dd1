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
from workbench.flow.sampler import initial_noise, ode_sample
from workbench.rewards import RewardFunction
from workbench.train.distributed import DistInfo
from workbench.train.tasks import Task

EVAL_SEED = 1234  # fixed noise for the held-out ODE evaluation, the same for every run and seed
GRID_PROMPTS = 8  # held-out prompts in the before/after grid of every evaluation


@dataclass
class Evaluation:
    metrics: dict[str, float]  # {space}/reward_mean, {space}/checkerboard, {space}/<reward>/mean, {space}/<task
    # metric>, time/eval_(cpu_)s
    grid: Image.Image  # the first GRID_PROMPTS held-out images, one row per CFG scale
    grid_prompts: list[str]


def evaluate(policy: FlowPolicy, prompts: list[str], reward_fn: RewardFunction, task: Task | None,
             scales: dict[str, float], steps: int, shift: float | None, dist: DistInfo | None = None) -> Evaluation:
    """Score the held-out prompts under each CFG scale: {"eval": 1.0, "eval_cfg": 4.0} -> eval/* and eval_cfg/*.

    With several processes (`dist`) each samples the prompts r::world, with the rows of the same noise tensor a
    single process draws for all of them: the images, the rewards (gathered per image) and the grid are those of
    one process, and no process waits for another's whole evaluation. Task metrics are means over images: each
    process's mean is weighted by its number of images."""
    import time

    dist = dist or DistInfo()
    t0, cpu0, out, rows = time.perf_counter(), time.process_time(), {}, []
    mine = list(range(dist.rank, len(prompts), dist.world))
    local = [prompts[i] for i in mine] or prompts[:1]  # a process without prompts samples one and drops it
    for space, scale in scales.items():
        noise = initial_noise((len(prompts), *policy.latent_shape), EVAL_SEED)[mine or [0]]  # (E_q, C, H, W)
        images = ode_sample(policy, local, steps=steps, shift=shift, guidance_scale=scale, noise=noise)
        if not mine:
            images = images[:0]
        comps = {k: v.cpu() for k, v in reward_fn.components(images, local[:len(images)]).items()}
        task_values = task.metrics(images, local[:len(images)]) if task and len(images) else {}
        grid_rows = images[:max(0, -(-(GRID_PROMPTS - dist.rank) // dist.world))].cpu()
        parts = dist.gather((mine, comps, task_values, grid_rows))
        order = torch.tensor([i for p in parts for i in p[0]]).argsort()  # gathered rows -> prompt order
        comps = {k: torch.cat([p[1][k] for p in parts])[order] for k in comps}  # (E,) each
        out |= {f"{space}/reward_mean": reward_fn.combine(comps).mean().item()}
        out |= {f"{space}/checkerboard": checkerboard_share(images).mean().item()}  # quality beside the reward
        out |= {f"{space}/{k}/mean": v.mean().item() for k, v in comps.items()}
        for k in sorted({k for p in parts for k in p[2]}):  # a mean over images: weighted by each process's count
            out[f"{space}/{k}"] = task_values[k] if dist.world == 1 else sum(
                p[2][k] * len(p[0]) for p in parts if p[0]) / len(prompts)
        rows.append(torch.stack([parts[i % dist.world][3][i // dist.world]
                                 for i in range(min(GRID_PROMPTS, len(prompts)))]))
    picture = grid(torch.cat(rows), ncol=len(rows[0]))
    seconds = {"time/eval_s": time.perf_counter() - t0, "time/eval_cpu_s": time.process_time() - cpu0}
    return Evaluation(out | seconds, picture, prompts[:GRID_PROMPTS])


evaluate = torch.no_grad()(evaluate)  # not a decorator: mutmut skips decorated functions
