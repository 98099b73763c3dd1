"""What sharing the continuations' evaluations saves (docs/methods.md "Monte-Carlo credit", *Cost*): the same group's
credit at the defaults (G=8, T=16, M=4, embedded model, precision auto) measured alternately with the sharing and
without it (`distinct_states` replaced by one that calls every row distinct), in one process on one thread. Prints the
medians, their ratio, the evaluations of each, and whether the rewards came out the same.

    .venv/bin/python scripts/bench_credit_sharing.py [--rounds 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import workbench.rl.credit_estimators as estimators
from workbench.core.heap import reuse_freed_memory
from workbench.flow.sampler import sample_group
from workbench.flow.trajectory import SamplingConfig
from workbench.models.embedded import EmbeddedPolicy
from workbench.rewards import build_reward
from workbench.rl.credit import measure_credit
from workbench.rl.credit_estimators import grid_rows


def every_row_distinct(held: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    rows = torch.arange(len(held))
    return rows, rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=8, help="measurements of each kind, alternated (default 8)")
    args = p.parse_args()
    reuse_freed_memory()
    torch.set_num_threads(1)
    policy = EmbeddedPolicy.load()
    group = sample_group(policy, "a red circle", SamplingConfig(group=8, steps=16, noise_level=0.7, seed=0))
    reward = build_reward("adherence")
    shared = estimators.distinct_states
    measure_credit(policy, group, reward, continuations=4)  # warm-up
    seconds, rewards = {"shared": [], "every row": []}, {}
    for i in range(args.rounds):
        kinds = [("shared", shared), ("every row", every_row_distinct)]
        for name, fn in kinds if i % 2 == 0 else kinds[::-1]:
            estimators.distinct_states = fn
            start = time.perf_counter()
            credit = measure_credit(policy, group, reward, continuations=4)
            seconds[name].append(time.perf_counter() - start)
            rewards[name] = credit.continuation_rewards
    estimators.distinct_states = shared
    for name, values in seconds.items():
        print(f"{name:9s}  median {statistics.median(values):.2f} s  ({', '.join(f'{v:.2f}' for v in values)})")
    ratio = statistics.median(seconds["shared"]) / statistics.median(seconds["every row"])
    t = group.num_steps
    every_row = int((t - grid_rows(group.group_size, range(1, t), range(4))[:, 1]).sum())  # a row from s runs T - s
    print(f"shared / every row: {ratio:.2f}x in time; evaluations counted {credit.cost['nfe']} (every row evaluated: "
          f"{every_row}); rewards identical: "
          f"{bool(torch.equal(rewards['shared'], rewards['every row']))} ({credit.precision})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
