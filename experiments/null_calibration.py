"""False calls of the credit classification under a null reward (docs/methods.md "False-call rate").

    OMP_NUM_THREADS=1 python experiments/null_calibration.py            # ~1 CPU-minute; prints a Markdown table

Rewards are drawn independently of the state, so no cell that ends before the image has credit; under CRN
the k-th continuations of a trajectory share a component (as shared noise would give). For M = 2, 4, 16,
CRN and independent, over `--seeds` draws of `--group` trajectories with T = 4: the share of null cells
called determined at z = 2 (nominal 4.6 %) by the workbench's test, by a normal z test, and, for the cells
next to the group-mean start, by plain Welch-Satterthwaite instead of Hsu's bound; then after refinement,
with and without the correction for repeated looks. Goes through `Credit.classify` and `refine_with`.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import replace

import torch

from workbench.rl.credit import Credit, refine_with
from workbench.rl.significance import determined, false_call_rate, welch_dof

T = 4  # steps 0..2 end before the image


def null_credit(k: int, crn: bool, gen: torch.Generator, g: int):
    """A credit of state-independent rewards (G trajectories, M continuations) and its continuation sampler."""
    common = torch.randn(g, 1, 64, generator=gen) if crn else torch.zeros(g, 1, 64)  # (G, 1, K_max)

    def draw(rows: torch.Tensor, spent: int = 0) -> torch.Tensor:
        return common[rows[:, 0], 0, rows[:, 2]] + torch.randn(len(rows), generator=gen)

    rows = torch.cartesian_prod(torch.arange(g), torch.arange(1, T), torch.arange(k))
    rewards = torch.randn(g, generator=gen) * math.sqrt(2 if crn else 1)
    return Credit("null", rewards, rewards - rewards.mean(), draw(rows).view(g, T - 1, k), [2, T - 2], crn=crn), draw


def shares(credit: Credit, z: float) -> dict[str, float]:
    """Determined share of the null step cells (0: from the start, 1-2: between states) and of chunk 0."""
    c = credit.classify(z)
    step, se = credit.step_credit, credit.step_se
    out = {"step 0 (from x_T)": float((c.step[:, 0] != 0).double().mean()),
           "steps 1-2": float((c.step[:, 1:T - 1] != 0).double().mean()),
           "chunk 0 (x_T to state 2)": float((c.chunk[:, 0] != 0).double().mean()),
           "normal z, steps 0-2": float(((step / se)[:, : T - 1].abs() > z).double().mean())}
    g, k = credit.rewards.shape[0], credit.continuation_rewards.shape[-1]
    start_var = (credit.rewards.var() / g).expand(g)
    v1 = credit.continuation_rewards[:, 0].var(-1) / k  # (G,)
    nu = welch_dof(start_var.double(), torch.full((g,), g - 1.0), v1.double(), torch.full((g,), k - 1.0))
    out["plain Welch, step 0"] = float(determined(step[:, 0], se[:, 0], nu, z).double().mean())
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--group", type=int, default=1500)
    p.add_argument("--seeds", type=int, default=6)
    p.add_argument("--z", type=float, default=2.0)
    args = p.parse_args()
    torch.set_num_threads(1)
    print(f"Nominal false-call rate at z = {args.z:g}: {100 * false_call_rate(args.z):.2f} %; "
          f"{args.seeds} seeds x {args.group} trajectories\n")
    rows = []
    for k in (2, 4, 16):
        for crn in (True, False):
            acc: dict[str, float] = {}
            for s in range(args.seeds):
                credit, _ = null_credit(k, crn, torch.Generator().manual_seed(1000 * k + 10 * s + crn), args.group)
                for key, v in shares(credit, args.z).items():
                    acc[key] = acc.get(key, 0.0) + v / args.seeds
            rows.append((f"M={k} {'CRN' if crn else 'independent'}", acc))
    for crn in (True, False):
        acc = {}
        for s in range(args.seeds):
            gen = torch.Generator().manual_seed(77 + 10 * s + crn)
            credit, draw = null_credit(4, crn, gen, args.group // 3)
            last = list(refine_with(credit, draw, budget=args.group // 3 * (T - 1) * 12, z=args.z))[-1]
            for key, c in (("refined, alpha / looks", last), ("refined, no correction", replace(last, looks=None))):
                acc[key] = acc.get(key, 0.0) + _null(c, args.z) / args.seeds
        rows.append((f"M=4 then refined to <= {int(last.counts.max())}, {'CRN' if crn else 'independent'}", acc))
    keys = list(dict.fromkeys(key for _, acc in rows for key in acc))
    print("| case | " + " | ".join(keys) + " |")
    print("|---|" + "---|" * len(keys))
    for name, acc in rows:
        print(f"| {name} | " + " | ".join(f"{100 * acc[key]:.1f} %" if key in acc else "" for key in keys) + " |")


def _null(credit: Credit, z: float) -> float:
    c = credit.classify(z)
    return float(torch.cat([c.step[:, : T - 1].flatten(), c.chunk[:, 0]]).ne(0).double().mean())


if __name__ == "__main__":
    main()
