"""How often does step GRPO misattribute credit, once Monte-Carlo noise is separated from measurement?

    python experiments/misattribution.py                       # 6 held-out prompts, G=8, T=16, 3 seeds
    python experiments/misattribution.py --prompts 2 --k-crn 8 --k-independent 4 --seeds 2 --out /tmp/quick
    python experiments/misattribution.py --from-json docs/misattribution.json   # rewrite the report only

For every prompt: sample a group with the Flow-GRPO SDE; measure Monte-Carlo credit (docs/methods.md
"Monte-Carlo credit", "Credit uncertainty") with common random numbers (CRN) and with independent
continuations, each repeated with several continuation seeds on the same group (the rates move with the
seed, not only between trajectories); the first M continuations of a measurement are themselves a
measurement with M, so rates as M grows come from nested subsets. Also: the cheap estimators (ODE
completion, x0 prediction) against the highest-M CRN reference, and chunk schedules re-chunked from that
reference. Writes docs/misattribution.md, .png and .json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import torch

from workbench.flow.dynamics import dynamics_curve
from workbench.flow.sampler import sample_group
from workbench.flow.trajectory import SamplingConfig
from workbench.models.embedded import EmbeddedPolicy
from workbench.rewards import build_reward
from workbench.rl.chunking import CHUNKERS
from workbench.rl.credit import measure_credit
from workbench.rl.credit_estimators import continuation_cost, grid_rows
from workbench.rl.credit_stats import agreement

sys.path.insert(0, str(Path(__file__).resolve().parent))
from misattribution_report import write  # the report lives beside this script

PRECISION = "float32"  # the reference numerics of docs/misattribution.md (docs/methods.md "Continuation numerics")


def schedules(steps: int, l1_rel: torch.Tensor) -> dict[str, list[int]]:
    """The schedules compared: steps alone, uniform, the paper's temporal, ours from the curve, one chunk."""
    return {
        "step (size 1)": [1] * steps,
        "uniform 2": CHUNKERS.get("uniform")(steps, size=2),
        "uniform 4": CHUNKERS.get("uniform")(steps, size=4),
        "temporal [2,3,4,7]": CHUNKERS.get("temporal")(steps),
        "adaptive": CHUNKERS.get("adaptive")(steps, l1_rel),
        "equal L1 mass (4)": CHUNKERS.get("equal_mass")(steps, l1_rel, num_chunks=4),
        "one chunk (GSPO)": [steps],
    }


def first_k(credit, k: int):
    """The measurement made of the first k continuations of every state (nested: no new sampling)."""
    return replace(credit, continuation_rewards=credit.continuation_rewards[..., :k])


def rate_row(credit, z: float) -> dict:
    r = credit.rates(z)
    return {"step": asdict(r.step), "chunk": asdict(r.chunk)}


def ks_upto(k_max: int) -> list[int]:
    ks, k = [], 4
    while k <= k_max:
        ks.append(k)
        k *= 2
    return ks


def determined_overlap(a, b, z: float) -> float:
    """Share of the valid step cells determined in either of two measurements that both determine (Jaccard)."""
    da = (a.step_classes(z) != 0) & a.step_valid
    db = (b.step_classes(z) != 0) & b.step_valid
    union = int((da | db).sum())
    return int((da & db).sum()) / union if union else float("nan")


def seed_rows(policy, reward, group, args, chunks, i: int) -> tuple[list[dict], list, list]:
    """Rates of CRN and independent measurements of the group under each continuation seed; both credits."""
    rows, crns, inds = [], [], []
    for s in range(args.seeds):
        seed = i + 1000 * s
        crn = measure_credit(policy, group, reward, continuations=args.k_crn, chunks=chunks, seed=seed, crn=True,
                             precision=PRECISION)
        ind = measure_credit(policy, group, reward, continuations=args.k_independent, chunks=chunks, seed=seed,
                             crn=False, precision=PRECISION)
        rows.append({"seed": seed, "crn": {k: rate_row(first_k(crn, k), args.z) for k in ks_upto(args.k_crn)},
                     "independent": {k: rate_row(first_k(ind, k), args.z) for k in ks_upto(args.k_independent)},
                     "overlap_with_seed_0": determined_overlap(crn, crns[0], args.z) if crns else 1.0})
        crns.append(crn)
        inds.append(ind)
    return rows, crns, inds


def per_prompt(policy, reward, group, args, plans, i: int) -> dict:
    """Everything measured on one group (rates and schedules of seed 0; `seeds` holds every seed's rates)."""
    chunks = CHUNKERS.get("temporal")(args.steps)
    seeds, crns, inds = seed_rows(policy, reward, group, args, chunks, i)
    crn, ind = crns[0], inds[0]
    out = {"prompt": group.prompt, "rewards": crn.rewards.tolist(), "cost_crn": crn.cost, "cost_ind": ind.cost,
           "crn": {}, "independent": {}, "se_ratio": {}, "estimators": {}, "schedules": {}, "seeds": seeds}
    for k in ks_upto(args.k_crn):
        out["crn"][k] = rate_row(first_k(crn, k), args.z)
    for k in ks_upto(args.k_independent):
        a, b = first_k(ind, k), first_k(crn, k)
        out["independent"][k] = rate_row(a, args.z)
        valid = a.step_valid & ~a.step_se.isnan() & (b.step_se > 0)
        cv = a.chunk_valid & ~a.chunk_se.isnan() & (b.chunk_se > 0)
        out["se_ratio"][k] = {"step": float((a.step_se[valid] / b.step_se[valid]).median()),
                              "chunk": float((a.chunk_se[cv] / b.chunk_se[cv]).median())}
    ref_det = crn.step_classes(args.z) != 0
    ref_chunk_det = crn.chunk_classes(args.z) != 0
    for name in ("ode", "x0"):
        est = measure_credit(policy, group, reward, chunks=chunks, seed=i, estimator=name, precision=PRECISION)
        out["estimators"][name] = {
            "cost": est.cost, "step": agreement(est.step_credit, crn.step_credit, crn.step_valid, ref_det),
            "chunk": agreement(est.chunk_credit, crn.chunk_credit, crn.chunk_valid, ref_chunk_det),
            "rates": rate_row(est, args.z)}
    k4 = first_k(crn, 4)  # the app's default measurement, against the same reference
    nfe4 = continuation_cost(grid_rows(group.group_size, range(1, group.num_steps), range(4)), group.num_steps,
                             group.config.sde_mask())  # what M = 4 alone would run (not 4 / M of it: shared steps)
    out["estimators"]["mc K=4"] = {  # key kept as docs/misattribution.json has it (K was M then)
        "cost": {"nfe": nfe4, "seconds": crn.cost["seconds"] * nfe4 / crn.cost["nfe"]},
        "step": agreement(k4.step_credit, crn.step_credit, crn.step_valid, ref_det),
        "chunk": agreement(k4.chunk_credit, crn.chunk_credit, crn.chunk_valid, ref_chunk_det),
        "rates": rate_row(k4, args.z)}
    for name, sizes in plans.items():
        out["schedules"][name] = rate_row(crn.rechunk(sizes), args.z)["chunk"]
    return out


def run(args) -> dict:
    torch.set_num_threads(1)
    policy = EmbeddedPolicy.load()
    from workbench.toyworld.world import split_scenes
    _, heldout = split_scenes()
    prompts = [s.prompt() for s in heldout[: args.prompts]]
    config = SamplingConfig(group=args.group, steps=args.steps, noise_level=args.noise_level)
    curve = dynamics_curve(policy, prompts, SamplingConfig(group=2, steps=args.steps, noise_level=args.noise_level))
    plans = schedules(args.steps, curve.mean)
    reward = build_reward(args.reward)
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    result = {"settings": settings, "l1_rel": curve.mean.tolist(), "plans": plans, "prompts": []}
    start = time.time()
    for i, prompt in enumerate(prompts):
        group = sample_group(policy, prompt, replace(config, seed=args.seed + i))
        row = per_prompt(policy, reward, group, args, plans, i)
        if np.std(row["rewards"]) == 0:
            print(f"  {prompt!r}: all rewards equal, skipped", file=sys.stderr)
            continue
        result["prompts"].append(row)
        print(f"  [{i + 1}/{len(prompts)}] {time.time() - start:5.0f} s  {prompt}", file=sys.stderr)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "misattribution.json").write_text(json.dumps(result, indent=1))  # partial results survive
    result["seconds"] = time.time() - start
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", type=int, default=6)
    p.add_argument("--seeds", type=int, default=3, help="continuation seeds per prompt (same group)")
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--k-crn", type=int, default=16, help="continuations per state with CRN (nested 4, 8, ...)")
    p.add_argument("--k-independent", type=int, default=8, help="continuations per state without CRN")
    p.add_argument("--z", type=float, default=2.0, help="sets the false-call rate P(|N(0,1)| > z) (2: 4.6 %%)")
    p.add_argument("--noise-level", type=float, default=0.7)
    p.add_argument("--reward", default="adherence")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("docs"))
    p.add_argument("--from-json", type=Path, default=None, help="only rewrite the report from a saved result")
    args = p.parse_args()
    if args.from_json is not None:
        result = json.loads(args.from_json.read_text())
    else:
        result = json.loads(json.dumps(run(args)))  # the keys as the saved file has them
        (args.out / "misattribution.json").write_text(json.dumps(result, indent=1))
    write(result, args.out)


if __name__ == "__main__":
    main()
