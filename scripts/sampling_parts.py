"""Where the recording sampler's time goes beyond a plain Euler loop: one group sampled with the SDE (noise drawn at
every step), the same with noise level 0 (every step a deterministic Euler step: the step's arithmetic, log-prob and
stored states, no noise), the plain diffusers Euler loop of `workbench bench sampling`, and the SDE noise draws alone
(each group's generator on the CPU, then moved to the model's device, as `flow.sampler.sample_groups` draws them).
Prints the median of each over alternating rounds (issue 24; the closing notes cite it).

    .venv/bin/python scripts/sampling_parts.py [--device cpu|cuda] [--group 16] [--steps 16] [--rounds 40]

On a GPU every timing ends with the device synchronised.
"""

# ruff: noqa: I001 - workbench first: it sets OpenMP's wait policy before torch loads (workbench/__init__.py)
from __future__ import annotations

import workbench  # noqa: F401
import argparse
import statistics
import time

import torch

from workbench.cli.bench import PROMPT, plain_euler
from workbench.core.heap import reuse_freed_memory
from workbench.flow.sampler import sample_group
from workbench.flow.trajectory import SamplingConfig
from workbench.train.sources import load_policy


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--group", type=int, default=16)
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--rounds", type=int, default=40)
    args = p.parse_args()
    reuse_freed_memory()  # the allocator settings of `workbench bench` (core/heap.py)
    policy = load_policy(device=args.device)
    g, t = args.group, args.steps
    sync = torch.cuda.synchronize if policy.device.type == "cuda" else (lambda: None)
    sde, ode = SamplingConfig(group=g, steps=t), SamplingConfig(group=g, steps=t, noise_level=0.0)

    def noise_draws():
        gen = torch.Generator().manual_seed(0)
        for _ in range(t):
            torch.randn((g, *policy.latent_shape), generator=gen).to(policy.device)

    parts = {"recorded, SDE": lambda: sample_group(policy, PROMPT, sde),
             "recorded, noise level 0": lambda: sample_group(policy, PROMPT, ode),
             "plain diffusers Euler loop": lambda: plain_euler(policy, g, t),
             "the SDE noise draws alone": noise_draws}
    for fn in parts.values():
        fn(), fn()  # warm-up
    times = {name: [] for name in parts}
    names = list(parts)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:  # each part first in turn
            sync()
            start = time.perf_counter()
            parts[name]()
            sync()
            times[name].append(time.perf_counter() - start)
    print(f"{policy.device}, G={g}, T={t}, {torch.get_num_threads()} threads, median of {args.rounds} alternating "
          "rounds")
    plain = statistics.median(times["plain diffusers Euler loop"])
    for name, values in times.items():
        ms = 1000 * statistics.median(values)
        print(f"  {name:28s} {ms:8.1f} ms  ({ms / (1000 * plain):.2f}x the plain loop)")


if __name__ == "__main__":
    main()
