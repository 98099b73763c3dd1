"""How much bfloat16 continuations change the measured credit, against the Monte-Carlo error they carry anyway
(docs/methods.md "Continuation numerics"). Prints the figures the methods page quotes.

    .venv/bin/python experiments/precision.py [--prompts 4] [--json FILE]

For each prompt, one group at the app's defaults (G=8, T=16, M=4, shared start noise) is measured three times:
float32, bfloat16 with the same continuation seed (same noise), and float32 with another seed. Reported:
- |credit(bf16) - credit(fp32)| in units of the cell's standard error (mean and 95th percentile), and the mean
  of the signed difference (a bias would show there);
- how many step cells change class (misattributed / undetermined / aligned) under bf16, against how many change
  between two float32 measurements that differ only in their continuation noise;
- the determined and misattributed step rates of each measurement, and the wall time of each (one thread).
"""

from __future__ import annotations

import argparse
import json
import time

import torch


def measure(policy, group, reward, precision: str, seed: int):
    from workbench.rl.credit import measure_credit

    start = time.perf_counter()
    credit = measure_credit(policy, group, reward, continuations=4, chunks="2,3,4,7", seed=seed, precision=precision)
    return credit, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=4, help="prompts to measure (the toy world's spread_prompts)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    torch.set_num_threads(1)
    from workbench.flow.sampler import sample_group
    from workbench.flow.trajectory import SamplingConfig
    from workbench.models.embedded import EmbeddedPolicy
    from workbench.rewards import build_reward, default_reward
    from workbench.toyworld.world import spread_prompts

    policy = EmbeddedPolicy.load()
    reward = build_reward(default_reward(policy.toy_world))
    gaps, flips, noise_flips, cells, seconds, rows = [], 0, 0, 0, {"float32": [], "bfloat16": []}, []
    for n, prompt in enumerate(spread_prompts(args.prompts)):
        group = sample_group(policy, prompt, SamplingConfig(group=8, steps=16, seed=n))
        fp32, t32 = measure(policy, group, reward, "float32", seed=0)
        bf16, t16 = measure(policy, group, reward, "bfloat16", seed=0)
        other, _ = measure(policy, group, reward, "float32", seed=1)
        seconds["float32"].append(t32), seconds["bfloat16"].append(t16)
        valid = fp32.step_valid & fp32.step_se.isfinite() & (fp32.step_se > 0)  # (G, T) cells with an error
        gaps.append(((bf16.step_credit - fp32.step_credit) / fp32.step_se)[valid])  # signed, in standard errors
        classes = fp32.step_classes()
        flips += int(((bf16.step_classes() != classes) & fp32.step_valid).sum())
        noise_flips += int(((other.step_classes() != classes) & fp32.step_valid).sum())
        cells += int(fp32.step_valid.sum())
        named = (("float32", fp32), ("bfloat16", bf16), ("float32 seed 1", other))
        rows.append({"prompt": prompt, **{name: {"determined": c.rates().step.determined,
                                                 "misattributed": c.rates().step.misattributed} for name, c in named}})
        print(f"{prompt}: {t32:.1f} s float32, {t16:.1f} s bfloat16", flush=True)
    signed = torch.cat(gaps)
    gap = signed.abs()
    out = {"prompts": args.prompts, "cells": cells, "gap_mean_se": float(gap.mean()),
           "gap_p95_se": float(gap.quantile(0.95)), "signed_gap_mean_se": float(signed.mean()),
           "class_changes_bf16": flips,
           "class_changes_other_noise": noise_flips, "threads": torch.get_num_threads(), "rates": rows,
           **{f"seconds_{name}": sum(times) / len(times) for name, times in seconds.items()}}
    print(f"|credit(bf16) - credit(fp32)| / se over {cells} step cells: mean {out['gap_mean_se']:.3f}, "
          f"95th percentile {out['gap_p95_se']:.3f}; signed mean {out['signed_gap_mean_se']:+.3f}")
    print(f"step cells that change class: {flips} under bfloat16 (same noise), {noise_flips} under float32 with other "
          f"continuation noise")
    print(f"seconds per measurement (one thread): float32 {out['seconds_float32']:.1f}, "
          f"bfloat16 {out['seconds_bfloat16']:.1f}")
    for row in rows:
        rates = [f"{k} determined {v['determined']:.2f} misattributed {v['misattributed']:.2f}"
                 for k, v in row.items() if k != "prompt"]
        print(f"  {row['prompt']}: " + "; ".join(rates))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
