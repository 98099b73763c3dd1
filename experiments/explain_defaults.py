"""How far a few inner updates move the embedded model, and how many units then clip. Prints a table.

    .venv/bin/python experiments/explain_defaults.py [--prompt "..."] [--seed 0]

Samples one group (G=8, T=16) with the shipped embedded weights, scores it with `adherence`, runs N
AdamW updates of step GRPO on a copy of the transformer (`workbench.rl.explain.moved_log_probs`) at a
few learning rates and clip ranges, and prints for each setting the time the updates took, the median
|log-ratio| and the fraction of trained units that clip under step GRPO, Chunk-GRPO [2,3,4,7] and GSPO.
The Objectives tab's defaults (INNER_LR, CLIP, INNER_UPDATES in workbench/rl/explain.py) were picked
from it: some units of every objective clip, not all.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from workbench import load_policy
from workbench.flow.sampler import sample_group
from workbench.flow.trajectory import SamplingConfig
from workbench.rewards import build_reward
from workbench.rl.explain import explain, moved_log_probs, paired_advantages
from workbench.rl.objectives import ObjectiveSettings

SHOWN = ("step_grpo", "chunk_grpo", "gspo")


def unit_clip_fraction(ex, name: str, sizes: list[int]) -> float:
    """Fraction of (trajectory, unit) pairs whose unit is clipped (units: steps, chunks or the sequence)."""
    clipped = ex.clipped[ex.index(name)]  # (G, T)
    starts = {"step_grpo": list(range(clipped.shape[1])), "gspo": [0]}.get(name)
    starts = starts if starts is not None else [sum(sizes[:k]) for k in range(len(sizes))]
    return float(clipped[:, starts].float().mean())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prompt", default="a large red circle in the top left on a white background")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.manual_seed(0)
    policy = load_policy()
    group = sample_group(policy, args.prompt, SamplingConfig(group=8, steps=16, seed=args.seed))
    rewards = build_reward("adherence")(group.images, [args.prompt] * 8)
    adv = paired_advantages(rewards, SHOWN)
    sizes = [2, 3, 4, 7]
    print("lr      N  clip    time_s  median|l|  clipped units: " + "  ".join(f"{n:>10}" for n in SHOWN))
    for lr in (3e-5, 1e-4, 3e-4):
        for updates in (1, 3):
            for clip in (2e-5, 1e-4, 1e-3):
                settings = ObjectiveSettings(clip_low=clip, chunks=sizes)
                start = time.perf_counter()
                new = moved_log_probs(policy, group, adv["step_grpo"], "step_grpo", settings, updates, lr)
                seconds = time.perf_counter() - start
                ex = explain(new, group.log_probs, adv, settings, SHOWN)
                fractions = "  ".join(f"{unit_clip_fraction(ex, n, sizes):>10.2f}" for n in SHOWN)
                print(f"{lr:<7g} {updates}  {clip:<7g} {seconds:6.1f}  {float(ex.log_ratio.abs().median()):9.2e}"
                      f"  {'':15}{fractions}")


if __name__ == "__main__":
    main()
