"""Reward hacking against the crosses lesson's settings: which settings teach crosses and hold the checkerboard back.

    .venv/bin/python experiments/lesson_settings.py                          # every setting, seed 0 -> a table
    .venv/bin/python experiments/lesson_settings.py --only 1 --only 2        # some of them (two processes on 2 cores)
    .venv/bin/python experiments/lesson_settings.py --reuse                  # the table from the finished runs

Each setting is the `crosses` preset with its iterations, KL beta (Flow-GRPO's released KL form) and learning rate
set, trained with seed 0 on one thread (process CPU time, `common.run_one`). A setting with fewer iterations than
another of the same KL and lr reads the first evaluations of the longer run (everything random derives from
(seed, iteration)). Per setting: the held-out checkerboard share (`core.imaging.checkerboard_share`) at the last
evaluation and its peak, the held-out cross accuracy at the last evaluation, without CFG and with the model's CFG,
and the verdict of `train.hacking.run_verdict` in each. A setting holds the texture back when neither verdict flags
it and the last share stays below 0.10 in both (`train.hacking.texture_held_back`, docs/methods.md "Reward hacking").
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import SPACES, policy_factory, run_one

from workbench.train import preset
from workbench.train.hacking import run_verdict, texture_held_back
from workbench.train.store import RunStore

# (iterations, KL beta, lr) of each row, in table order
SETTINGS = [dict(iterations=80, kl_beta=0.0, lr=5e-5),  # the lesson's settings before reward hacking was measured
            dict(iterations=40, kl_beta=0.0, lr=5e-5),  # fewer iterations: the same run's earlier evaluations
            dict(iterations=20, kl_beta=0.0, lr=5e-5),
            dict(iterations=30, kl_beta=0.04, lr=5e-5),  # Flow-GRPO's GenEval beta
            dict(iterations=10, kl_beta=10.0, lr=5e-5),
            dict(iterations=80, kl_beta=1.0, lr=5e-5),
            dict(iterations=80, kl_beta=2.0, lr=5e-5),
            dict(iterations=80, kl_beta=3.0, lr=5e-5),  # the lesson's default
            dict(iterations=80, kl_beta=5.0, lr=5e-5)]


def run_name(setting: dict) -> str:
    """The folder of the longest run with this setting's KL beta and lr."""
    return f"kl{setting['kl_beta']:g}_lr{setting['lr']:g}"


def row(setting: dict, runs: Path, reuse: bool) -> str:
    """One table row: train (or reuse) the setting's longest run and read its evaluations up to its iterations."""
    longest = max(s["iterations"] for s in SETTINGS if run_name(s) == run_name(setting))
    folder = runs / run_name(setting)
    config = preset("crosses", **(setting | {"iterations": longest}), seed=0, threads=1)
    curve = run_one(config, folder, policy_factory(False), reuse=True if setting["iterations"] < longest else reuse)
    rows = [r for r in RunStore(folder).metrics() if r["iteration"] <= setting["iterations"]]
    evals = [r for r in rows if "eval/checkerboard" in r]
    cells = []
    for space in SPACES:
        shares = [r[f"{space}/checkerboard"] for r in evals]
        verdict = run_verdict(rows, space)
        cells.append(f"{shares[-1]:.3f} / {max(shares):.3f} | {evals[-1][f'{space}/cross_accuracy']:.2f} | "
                     f"{'flagged ' + str(verdict.start) + '-' + str(verdict.end) if verdict.flagged else 'no'}")
    held = texture_held_back(rows, tuple(SPACES))
    cpu = curve.train_cpu[curve.iterations.index(evals[-1]["iteration"])]
    return (f"| {setting['iterations']} | {setting['kl_beta']:g} | {setting['lr']:g} | " + " | ".join(cells)
            + f" | {'yes' if held else 'no'} | {cpu:.0f} s |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", type=int, action="append", help="run only these settings (1 = the first row)")
    parser.add_argument("--runs", default="runs/lesson_settings", help="folder for the run folders")
    parser.add_argument("--reuse", action="store_true", help="keep finished runs with the same settings")
    args = parser.parse_args()
    torch.set_num_threads(1)
    chosen = [SETTINGS[k - 1] for k in args.only] if args.only else SETTINGS
    lines = ["| iterations | KL beta | lr | checkerboard last / peak, no CFG | accuracy, no CFG | flagged, no CFG "
             "| checkerboard last / peak, CFG | accuracy, CFG | flagged, CFG | held back | training CPU |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [row(s, Path(args.runs), args.reuse) for s in chosen]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
