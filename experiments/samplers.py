"""Which SDE should the embedded model's rollouts use? Image noise, credit and a default fine-tune per sampler.

    .venv/bin/python experiments/samplers.py            # full: 3 seeds, ~40 min on 2 cores (--seeds 2: ~20 min)
    .venv/bin/python experiments/samplers.py --quick    # a smoke run of every part

Flow-GRPO's SDE (a = 0.7) leaves visible speckle in pixel space: its step from sigma 0.17 to 0.009 injects
noise that the last, nearly noiseless step cannot remove (the excess noise CPS, arXiv 2509.05952, describes).
Compared here, on the shipped weights:
  flow_grpo            Flow-GRPO's SDE on all 16 trained steps (the default before this experiment)
  cps                  Coefficients-Preserving Sampling, a = 0.7, all 16 trained steps
  flow_grpo (0, 15)    Flow-GRPO's SDE on steps 0-14, ODE on the last ones (an SDE window, Flow-GRPO-Fast)
For each: (A) speckle (`workbench.core.imaging.speckle`), adherence and its spread within groups on
16 held-out prompts x 8 samples; (B) Monte-Carlo credit (M=8) on 4 held-out prompts: the plain sign rates;
(C) the default fine-tune (30 iterations, Chunk-GRPO) with that sampler, 3 seeds: held-out adherence of 48
prompts (unguided ODE). Writes docs/samplers.md (or --out).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import train_and_score

from workbench.core.files import atomic_write
from workbench.core.imaging import speckle
from workbench.flow.sampler import ode_sample, sample_groups
from workbench.models.embedded import EmbeddedPolicy
from workbench.rewards import build_reward
from workbench.rl.chunking import CHUNKERS
from workbench.rl.credit import measure_credit
from workbench.toyworld.world import split_scenes
from workbench.train import TrainConfig

VARIANTS = {  # name -> TrainConfig overrides (the sampler part of a run)
    "flow_grpo": {},
    "cps": {"sde": "cps"},
    "flow_grpo (0, 15)": {"window": (0, 15), "chunks": ",".join(map(str, CHUNKERS.get("temporal")(15)))},
}


def rollouts(policy, config: TrainConfig, prompts: list[str]) -> dict:
    """Speckle, adherence and within-group spread of one rollout batch (G samples per prompt)."""
    reward = build_reward("adherence")
    groups = sample_groups(policy, prompts, config.sampling_config(1), seeds=list(range(len(prompts))))
    images = torch.cat([g.images for g in groups])  # (N * G, 3, H, W)
    r = reward(images, [g.prompt for g in groups for _ in range(config.group)]).view(len(prompts), -1)  # (N, G)
    return {"speckle": float(speckle(images).mean()), "adherence": float(r.mean()),
            "group_std": float(r.std(dim=1, unbiased=False).mean())}


def credit_rates(policy, config: TrainConfig, prompts: list[str], continuations: int) -> dict:
    """Plain sign misattribution rates (steps, and chunks of the variant's schedule) over the prompts."""
    reward, step, chunk = build_reward("adherence"), [], []
    scfg = replace(config.sampling_config(1), steps=config.steps)  # the trained steps only: credit spans T
    scfg = replace(scfg, window=None if config.window is None else config.window)
    for i, prompt in enumerate(prompts):
        group = sample_groups(policy, [prompt], replace(scfg, seed=i))[0]
        chunks = config.chunks if config.window is None else ",".join(map(str, CHUNKERS.get("temporal")(config.steps)))
        m = measure_credit(policy, group, reward, continuations=continuations, chunks=chunks, seed=i,
                           precision="float32").misattribution()  # the reference numerics of docs' figures
        step.append(m["step_misattribution"])
        chunk.append(m["chunk_misattribution"])
    return {"step": float(np.mean(step)), "chunk": float(np.mean(chunk))}


def fine_tune(config: TrainConfig, seeds: int, root: Path) -> list[tuple[float, float]]:
    """(held-out adherence before, after) of the default fine-tune with this sampler, one pair per seed."""
    out = []
    for seed in range(seeds):
        r = train_and_score(replace(config, seed=seed), root)
        out.append((r["before"], r["after"]))
        print(f"    seed {seed}: held-out {r['before']:.4f} -> {r['after']:.4f}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: few prompts, 2 iterations, 1 seed")
    parser.add_argument("--out", default="docs", help="folder for samplers.md (default docs/)")
    parser.add_argument("--seeds", type=int, default=None, help="fine-tune seeds per sampler (default 3; quick 1)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    held_out = [s.prompt() for s in split_scenes()[1]]
    n_roll, n_credit, continuations, seeds = (4, 1, 2, 1) if args.quick else (16, 4, 8, 3)
    seeds = args.seeds or seeds
    base = TrainConfig(eval_prompts=4 if args.quick else 48, eval_every=10**6, sample_every=10**6,
                       checkpoint_every=10**6, iterations=2 if args.quick else 30)
    policy = EmbeddedPolicy.load()
    ode = ode_sample(policy, held_out[:n_roll], steps=base.sampling_steps, seed=0)
    ode_row = {"speckle": float(speckle(ode).mean()),
               "adherence": float(build_reward("adherence")(ode, held_out[:n_roll]).mean())}
    root = Path(tempfile.mkdtemp(prefix="samplers-"))
    results = {}
    for name, overrides in VARIANTS.items():
        config = replace(base, **overrides)
        print(f"{name}: rollouts, credit, fine-tune", flush=True)
        results[name] = {"rollouts": rollouts(policy, config, held_out[:n_roll]),
                         "credit": credit_rates(policy, config, held_out[n_roll:n_roll + n_credit], continuations),
                         "tune": fine_tune(config, seeds, root)}
        print(f"  {results[name]['rollouts']}  credit {results[name]['credit']}", flush=True)
    command = "python experiments/samplers.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    lines = ["# Samplers for the embedded model's rollouts", "", f"Reproduce: `{command.strip()}`", "",
             f"Rollouts: {n_roll} held-out prompts x {base.group} samples, {base.sampling_steps} steps "
             f"(T={base.steps} trained + 1), noise level {base.noise_level}. Speckle = mean |difference| of "
             f"neighbouring pixels (`workbench.core.imaging.speckle`); the unguided ODE on the same prompts: "
             f"speckle {ode_row['speckle']:.4f}, adherence {ode_row['adherence']:.4f}. Credit: plain sign rates, "
             f"M={continuations}, {n_credit} other held-out prompts. Fine-tune: the default run ({base.iterations} "
             f"iterations) with that sampler, held-out adherence of {base.eval_prompts} prompts (unguided ODE), "
             f"{seeds} seed(s).", "",
             "| sampler | speckle | rollout adherence | within-group std | step misattribution | "
             "chunk misattribution | fine-tune held-out (before -> after, per seed) |", "|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        ro, cr = r["rollouts"], r["credit"]
        tune = ", ".join(f"{a:.3f} -> {b:.3f}" for a, b in r["tune"])
        mean_after = np.mean([b for _, b in r["tune"]])
        lines.append(f"| {name} | {ro['speckle']:.4f} | {ro['adherence']:.4f} | {ro['group_std']:.4f} | "
                     f"{cr['step']:.3f} | {cr['chunk']:.3f} | {tune} (mean {mean_after:.3f}) |")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    path = atomic_write(Path(args.out) / "samplers.md", "\n".join(lines) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
