"""False calls of the credit classification under null rewards (docs/methods.md "False-call rate").

    OMP_NUM_THREADS=1 python experiments/null_calibration.py               # synthetic groups, ~80 CPU-s
    OMP_NUM_THREADS=1 python experiments/null_calibration.py --embedded    # the embedded model, ~6 CPU-minutes

A null reward does not depend on the state, so no cell that ends before the image has credit, and the share
of them called determined is the test's false-call rate (nominal P(|N(0, 1)| > z), 4.55 % at z = 2). Every
measurement goes through `Credit.classify` (and `refine_with`), on groups of G = 8 trajectories (the app's)
with T = 4 steps and chunks 2,2: step 0 from the group-mean start x_T, steps 1-2 between continued states,
chunk 0 from x_T to state 2 ("interior": these four cells). Rewards are Gaussian, or 0/1 (Bernoulli 1/2, a
Gaussian's sign, as a few-valued reward such as shape_match gives); under common random numbers the k-th
continuations of a trajectory share a component, as shared noise would give. Columns: the workbench's test,
and the Student t alone (zero-spread cells "determined" by an infinite t, as before the exact test).

The last step and the last chunk end at the image, whose reward is taken as exact. Under a stochastic reward
(here pure noise: another draw each time an image is scored) their credit holds that noise; the second table
measures them as measured and with the image re-scored (`measure_credit(rescore=R)`). The third: cells
refined from M = 4, tested at alpha / (1 + rounds that grew either end state), at alpha / (1 + looks_a +
looks_b) (a round that grows both ends counted twice), and without correction.

--embedded draws the continuations with the embedded model (`measure_credit`, float32) under a pure-noise
reward, fewer groups: the same pipeline end to end.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import replace

import torch

from workbench.rl.credit import Credit, measure_credit, refine_with
from workbench.rl.credit_stats import UNDETERMINED, classify, credit_dof
from workbench.rl.significance import false_call_rate

G, T, SIZES = 8, 4, [2, 2]  # a group of the app's size; steps 0..2 end before the image
MS = (2, 4, 16)
RESCORE = 4


def _reward(latent: torch.Tensor, kind: str) -> torch.Tensor:
    return latent if kind == "gaussian" else (latent > 0).float()


def synthetic_credit(kind: str, m: int, crn: bool, gen: torch.Generator, noise_only: bool = False,
                     rescore: int = 0) -> tuple[Credit, object]:
    """One null group and its continuation sampler `draw(rows, spent)` (for refinement). noise_only: a reward
    that is pure noise (no component shared by continuations; the image's re-scores are fresh draws)."""
    shared = crn and not noise_only
    common = torch.randn(G, 1, 1024, generator=gen) if shared else torch.zeros(G, 1, 1024)  # (G, 1, K_max)
    spread = math.sqrt(2 if shared else 1)  # a final reward spreads like a continuation's

    def draw(rows: torch.Tensor, spent: int = 0) -> torch.Tensor:
        return _reward(common[rows[:, 0], 0, rows[:, 2]] + torch.randn(len(rows), generator=gen), kind)

    rows = torch.cartesian_prod(torch.arange(G), torch.arange(1, T), torch.arange(m))
    scores = _reward(torch.randn(G, 1 + rescore, generator=gen) * spread, kind)  # (G, 1 + R)
    if not noise_only:
        scores = scores[:, :1].expand(-1, 1 + rescore)  # the image's reward: the same number every time
    rewards = scores.mean(1)
    credit = Credit("null", rewards, rewards - rewards.mean(), draw(rows).view(G, T - 1, m), SIZES, crn=crn,
                    final_scores=scores if rescore else None)
    return credit, draw


def _count(classes: torch.Tensor, valid: torch.Tensor) -> tuple[float, float]:
    """(determined cells, cells) among the valid ones (A_i != 0: a cell of a trajectory without advantage
    counts in no rate)."""
    return float(((classes != UNDETERMINED) & valid).sum()), float(valid.sum())


def _interior(step: torch.Tensor, chunk: torch.Tensor) -> torch.Tensor:
    return torch.cat([step[:, : T - 1], chunk[:, :1]], 1)  # (G, 4): steps 0-2 and chunk 0


def interior_counts(credit: Credit, z: float) -> dict[str, tuple[float, float]]:
    """Determined and counted null cells that end before the image: by the workbench's test, and by the
    Student t alone (the test before exact p-values: a zero spread gives an infinite t)."""
    c, valid = credit.classify(z), credit.step_valid
    start_var = (credit.rewards.var() / G).expand(G)  # the group-mean start's
    alone = [classify(d, se, credit.advantages, z,
                      credit_dof(credit.continuation_rewards, start_var, G - 1.0, edges, credit.crn))
             for d, se, edges in ((credit.step_credit, credit.step_se, list(range(T + 1))),
                                  (credit.chunk_credit, credit.chunk_se, [0, 2, T]))]
    chunk_valid = credit.chunk_valid
    return {"step 0 (from x_T)": _count(c.step[:, :1], valid[:, :1]),
            "steps 1-2": _count(c.step[:, 1:T - 1], valid[:, 1:T - 1]),
            "chunk 0 (x_T to state 2)": _count(c.chunk[:, :1], chunk_valid[:, :1]),
            "interior": _count(_interior(c.step, c.chunk), _interior(valid, chunk_valid)),
            "t test alone: steps 1-2": _count(alone[0][:, 1:T - 1], valid[:, 1:T - 1]),
            "t test alone: interior": _count(_interior(*alone), _interior(valid, chunk_valid))}


def last_counts(credit: Credit, z: float, label: str) -> dict[str, tuple[float, float]]:
    c = credit.classify(z)
    return {f"last step, {label}": _count(c.step[:, -1:], credit.step_valid[:, -1:]),
            f"last chunk, {label}": _count(c.chunk[:, -1:], credit.chunk_valid[:, -1:])}


def refined_counts(credit: Credit, draw, z: float) -> dict[str, tuple[float, float]]:
    """The interior null cells after refinement from M = 4 (budget 12 continuations per state), with three
    counts of the looks."""
    last = credit
    for last in refine_with(credit, draw, budget=G * (T - 1) * 12, z=z):  # noqa: B007
        pass
    out = {}
    for key, c in (("alpha / (1 + rounds either end grew)", last),
                   ("alpha / (1 + looks_a + looks_b)", replace(last, look_rounds=None)),
                   ("no correction", replace(last, looks=None, look_rounds=None))):
        cls = c.classify(z)
        out[key] = _count(_interior(cls.step, cls.chunk), _interior(c.step_valid, c.chunk_valid))
    out["M reached (mean)"] = (float(last.counts.double().mean()), 1.0)
    return out


def _add(total: dict, part: dict) -> None:
    for key, (hits, cells) in part.items():
        h, c = total.get(key, (0.0, 0.0))
        total[key] = (h + hits, c + cells)


def table(rows: list[tuple[str, dict]]) -> str:
    """Markdown: one row per case, a share in per cent per key (a mean where the key says so)."""
    keys = list(dict.fromkeys(key for _, acc in rows for key in acc))

    def cell(acc: dict, key: str) -> str:
        if key not in acc:
            return ""
        hits, cells = acc[key]
        return f"{hits / cells:.1f}" if "mean" in key else f"{100 * hits / max(cells, 1):.1f} %"
    lines = ["| case | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
    lines += [f"| {name} | " + " | ".join(cell(acc, key) for key in keys) + " |" for name, acc in rows]
    return "\n".join(lines)


def synthetic(args) -> None:
    n = args.groups
    rows, last_rows, refine_rows = [], [], []
    for r, kind in enumerate(("gaussian", "bernoulli")):
        for m in MS:
            for crn in (True, False):
                gen, acc = torch.Generator().manual_seed(100 * m + 10 * r + crn), {}
                for _ in range(n):
                    _add(acc, interior_counts(synthetic_credit(kind, m, crn, gen)[0], args.z))
                rows.append((f"{kind} M={m} {'CRN' if crn else 'independent'}", acc))
            gen, acc = torch.Generator().manual_seed(100 * m + 10 * r + 5), {}
            for _ in range(n):
                for label, extra in (("as measured", 0), (f"rescore={RESCORE}", RESCORE)):
                    _add(acc, last_counts(synthetic_credit(kind, m, True, gen, True, extra)[0], args.z, label))
            last_rows.append((f"{kind} M={m}", acc))
        for crn in (True, False):
            gen, acc = torch.Generator().manual_seed(7 + 10 * r + crn), {}
            for _ in range(args.refine_groups):
                _add(acc, refined_counts(*synthetic_credit(kind, 4, crn, gen), args.z))
            refine_rows.append((f"{kind} M=4 refined, {'CRN' if crn else 'independent'}", acc))
    print(f"Synthetic null groups: {n} groups of G={G}, T={T} per row ({n * G} trajectories); shares of null cells "
          f"called determined at z = {args.z:g} (nominal {100 * false_call_rate(args.z):.2f} %).\n")
    print(table(rows) + "\n\nThe cells that end at the image, under a reward that is pure noise:\n")
    print(table(last_rows) + f"\n\nRefinement from M = 4 ({args.refine_groups} groups per row; interior cells):\n")
    print(table(refine_rows))


def embedded(args) -> None:
    from workbench.flow.sampler import sample_group
    from workbench.flow.trajectory import SamplingConfig
    from workbench.models.embedded import EmbeddedPolicy

    policy = EmbeddedPolicy.load()
    prompt = "a large red circle in the center on a white background"
    gen = torch.Generator().manual_seed(0)
    noise = lambda images, prompts: torch.randn(len(prompts), generator=gen)  # noqa: E731  ignores the image
    rows, last_rows = [], []
    for m in MS:
        for crn in (True, False):
            acc = {"gaussian": {}, "bernoulli": {}}
            for k in range(args.groups):
                group = sample_group(policy, prompt, SamplingConfig(group=G, steps=T, seed=1000 * m + k))
                credit = measure_credit(policy, group, noise, m, chunks=SIZES, seed=k, crn=crn, precision="float32",
                                        rescore=RESCORE)
                for kind in acc:
                    scores = _reward(credit.final_scores, kind)  # (G, 1 + R)
                    c = replace(credit, continuation_rewards=_reward(credit.continuation_rewards, kind),
                                final_scores=scores, rewards=scores.mean(1), advantages=scores.mean(1) - scores.mean())
                    once = replace(c, final_scores=None, rewards=scores[:, 0],
                                   advantages=scores[:, 0] - scores[:, 0].mean())
                    _add(acc[kind], interior_counts(once, args.z) | last_counts(once, args.z, "as measured")
                         | last_counts(c, args.z, f"rescore={RESCORE}"))
            for kind, a in acc.items():
                rows.append((f"{kind} M={m} {'CRN' if crn else 'independent'}",
                             {k: v for k, v in a.items() if not k.startswith("last")}))
                last_rows.append((f"{kind} M={m} {'CRN' if crn else 'independent'}",
                                  {k: v for k, v in a.items() if k.startswith("last")}))
    print(f"Embedded model, a pure-noise reward: {args.groups} groups of G={G}, T={T} per row; shares of null cells "
          f"called determined at z = {args.z:g} (nominal {100 * false_call_rate(args.z):.2f} %).\n")
    print(table(rows) + "\n\nThe cells that end at the image:\n")
    print(table(last_rows))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--groups", type=int, default=None, help="groups per row (default 250; --embedded 40)")
    p.add_argument("--refine-groups", type=int, default=60, help="groups per refinement row (default 60)")
    p.add_argument("--z", type=float, default=2.0)
    p.add_argument("--embedded", action="store_true", help="continuations from the embedded model (slower)")
    args = p.parse_args()
    args.groups = args.groups or (40 if args.embedded else 250)
    torch.set_num_threads(1)
    start = time.process_time()
    (embedded if args.embedded else synthetic)(args)
    print(f"\n({time.process_time() - start:.0f} CPU-s)")


if __name__ == "__main__":
    main()
