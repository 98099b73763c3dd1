"""`objectives.py --per-step`: per-step advantages against one advantage per trajectory, at equal CPU.

    .venv/bin/python experiments/objectives.py --per-step                  # default task -> docs/
    .venv/bin/python experiments/objectives.py --per-step --task crosses   # the crosses lesson
    .venv/bin/python experiments/objectives.py --per-step --quick          # smoke run

Methods: step_grpo, chunk_grpo (temporal chunks), gspo, ppo (critic + GAE) and dense_grpo (TP-GRPO look-ahead
gains). Equal CPU: every method's per-iteration process CPU time (critic fitting and look-ahead sampling
included) is measured in a short calibration (2 iterations, no evaluation, seed 1000), and each gets
round(N * c(chunk_grpo) / c(method)) iterations, N being chunk_grpo's. Held-out curves are plotted against
the training CPU seconds of each run (evaluation excluded). Then, on groups sampled from the base model, each
method's per-step advantages are held against the Monte-Carlo credit (`train/step_compare.py`): GRPO's uniform
A_i, ppo with the critic each seed's run ended with, dense_grpo's look-ahead. Seeds run in the outer loop and
the report is rewritten after each, so an interrupted run still reports the seeds it finished (the agreement
is measured after the first seed and again after the last).
Writes <out>/objectives_per_step[_<task>].md and its curve figure.
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from common import TASK_CLIP, TASK_METRIC, TASK_SIZES, policy_factory

from workbench.core.files import atomic_write
from workbench.rl.chunking import CHUNKERS
from workbench.train import TrainConfig, Trainer, preset
from workbench.train.presets import with_objective
from workbench.train.store import RunStore

METHODS = ("step_grpo", "chunk_grpo", "gspo", "ppo", "dense_grpo")
CREDIT_GROUPS, CREDIT_CONTINUATIONS = 2, 4  # base-model groups and MC continuations per state for the agreement


def base_config(args) -> tuple[TrainConfig, str]:
    """The compared runs' shared settings and the held-out metric."""
    common = dict(sample_every=10**6, report_to="none", checkpoint_every=10**6)
    if args.quick:
        quick = dict(group=2, steps=4, chunks="1,1,1,1", eval_prompts=2, eval_every=1, iterations=args.iterations or 2)
        return TrainConfig(**quick, **common, clip_low=2e-5), "reward_mean"
    if args.task:
        sizes = TASK_SIZES | ({"iterations": args.iterations} if args.iterations else {})
        return preset(args.task, **sizes, **common, clip_low=args.clip_low or TASK_CLIP), TASK_METRIC[args.task]
    return TrainConfig(iterations=args.iterations or 20, eval_every=5, **common, clip_low=args.clip_low or 2e-5,
                       kl_beta=0.04 if args.kl_beta is None else args.kl_beta), "reward_mean"


def method_configs(base: TrainConfig) -> dict[str, TrainConfig]:
    n_steps = len(base.trained_steps(1))
    temporal = ",".join(map(str, CHUNKERS.get("temporal")(n_steps)))
    return {name: with_objective(replace(base, chunks=temporal) if name == "chunk_grpo" else base, name)
            for name in METHODS}


def calibrate(configs: dict[str, TrainConfig], factory) -> dict[str, float]:
    """Process CPU seconds per iteration of each method (2 iterations, no evaluation, no run folder)."""
    cost = {}
    for name, config in configs.items():
        trainer = Trainer(replace(config, iterations=2, eval_prompts=0, seed=1000), None, factory())
        start = time.process_time()
        trainer.run()
        cost[name] = (time.process_time() - start) / 2
        print(f"calibration {name:12s} {cost[name]:.2f} CPU-s / iteration", flush=True)
    return cost


def equal_cpu(configs: dict[str, TrainConfig], cost: dict[str, float]) -> dict[str, TrainConfig]:
    ref = configs["chunk_grpo"]
    evals = max(1, ref.iterations // ref.eval_every)
    out = {}
    for name, config in configs.items():
        its = max(2, round(ref.iterations * cost["chunk_grpo"] / cost[name]))
        out[name] = replace(config, iterations=its, eval_every=max(1, round(its / evals)))
    return out


class Clock:
    """Trainer subscriber: (iteration, training CPU s, held-out metrics) at every evaluation."""

    def __init__(self, metric: str):
        self.metric, self.start, self.eval_cpu, self.points = metric, None, 0.0, []

    def __call__(self, event) -> None:
        if event.kind == "started":
            self.start = time.process_time()
        if event.kind != "iteration" or "time/eval_cpu_s" not in event.data:
            return
        self.eval_cpu += event.data["time/eval_cpu_s"]
        train = time.process_time() - self.start - self.eval_cpu
        values = {k: v for k, v in event.data.items() if k.endswith(f"/{self.metric}")}
        self.points.append({"iteration": event.iteration, "train_cpu": train, **values})


def agreement_rows(configs: dict[str, TrainConfig], run_dirs: dict[str, list[Path]], factory, seed: int = 0
                   ) -> list[dict]:
    """Per-step advantage agreement with the MC credit on CREDIT_GROUPS base-model groups (one per seed's ppo
    critic), averaged over groups and critics."""
    from workbench.flow.sampler import sample_groups
    from workbench.rewards import build_reward
    from workbench.rl.credit import measure_credit
    from workbench.train.step_compare import compare_step_advantages

    policy, config = factory(), configs["ppo"]
    reward_fn = build_reward(config.reward, **config.reward_folders())
    pool, scfg = config.held_out_prompts() or config.prompt_pool(), config.sampling_config(1)
    chunks = ",".join(map(str, config.credit_chunks()))
    critics = [RunStore(d).latest_checkpoint() for d in run_dirs.get("ppo", [])]
    critics = [c.critic for c in critics if c is not None and c.critic is not None] or [None]
    rows: dict[str, list[dict]] = {}
    for k in range(CREDIT_GROUPS):
        group = sample_groups(policy, [pool[k % len(pool)]], replace(scfg, seed=100 + k), [100 + k])[0]
        credit = measure_credit(policy, group, reward_fn, CREDIT_CONTINUATIONS, chunks=chunks, seed=seed + k,
                                precision="float32")  # the reference numerics of the documented figures
        for critic in critics:
            for row in compare_step_advantages(policy, group, reward_fn, credit, config, critic).table():
                rows.setdefault(row["method"], []).append(row)
    return [{"method": m, **{key: float(np.nanmean([r[key] for r in rs])) for key in
                            ("sign_agreement", "sign_agreement_determined", "correlation", "determined_cells",
                             "cells")}, "source": rs[0]["source"], "n": len(rs)} for m, rs in rows.items()]


def plot(curves: dict[str, list[list[dict]]], key: str, path: Path, ylabel: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, seeds in curves.items():
        cpu = np.mean([[p["train_cpu"] for p in s] for s in seeds], axis=0)
        vals = np.array([[p.get(key, np.nan) for p in s] for s in seeds])
        line, = ax.plot(cpu, vals.mean(0), marker="o", ms=3, label=name)
        ax.fill_between(cpu, vals.mean(0) - vals.std(0), vals.mean(0) + vals.std(0), color=line.get_color(),
                        alpha=0.15)
    ax.set_xlabel("training CPU seconds (one thread; evaluation excluded)")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(path: Path, figure: str, base: TrainConfig, metric: str, configs: dict, cost: dict,
                 results: dict, agreement: list[dict], seeds: int, command: str, keys: list[str]) -> Path:
    task = f"the `{base.task}` lesson" if base.task else "the default task (world scenes, reward adherence)"
    lines = [f"# Per-step advantages at equal CPU on {task}", "",
             f"Every run: {base.prompts_per_iteration} prompts x {base.group} samples per iteration, lr {base.lr}, "
             f"clip {base.clip_low}, KL beta {base.kl_beta}; chunk_grpo trains {configs['chunk_grpo'].iterations} "
             f"iterations and every other method as many as fit in the same CPU time (calibrated per-iteration "
             f"CPU in brackets, critic fitting and look-ahead sampling included). {seeds} seed(s); held-out "
             f"`{metric}` on {base.eval_prompts} prompts (deterministic ODE), final value mean +- std over seeds "
             "(per seed in brackets). One thread.", "",
             "| method | iterations (CPU-s / it) | " + " | ".join(keys) + " | training CPU-s / run |",
             "|---|---|" + "---|" * len(keys) + "---|"]
    for name, res in results.items():
        if not res["curves"]:
            continue
        cells = []
        for key in keys:
            finals = [c[-1].get(key, float("nan")) for c in res["curves"]]
            cells.append(f"{np.mean(finals):.3f} +- {np.std(finals):.3f} [{', '.join(f'{v:.3f}' for v in finals)}]")
        cpu = np.mean([c[-1]["train_cpu"] for c in res["curves"]])
        lines.append(f"| {name} | {configs[name].iterations} ({cost[name]:.2f}) | " + " | ".join(cells)
                     + f" | {cpu:.0f} |")
    lines += ["", f"![held-out curves]({figure})", ""]
    if agreement:
        lines += ["Per-step advantage against the Monte-Carlo credit d_{i,t} (base-model groups, K = "
                  f"{CREDIT_CONTINUATIONS} continuations per state; cells: trained steps with A_i != 0), mean over "
                  "groups x ppo critics:", "",
                  "| advantage | sign agreement, all cells | sign agreement, determined cells | correlation | "
                  "determined / cells | source |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['method']} | {r['sign_agreement']:.3f} | {r['sign_agreement_determined']:.3f} | "
                  f"{r['correlation']:.3f} | {r['determined_cells']:.1f} / {r['cells']:.0f} | {r['source']} |"
                  for r in agreement]
    lines += ["", "Reproduce:", "", "```", command, "```", ""]
    return atomic_write(path, "\n".join(lines))


def per_step_experiment(args) -> None:

    torch.set_num_threads(1)
    base, metric = base_config(args)
    factory, seeds = policy_factory(args.quick), args.seeds or (2 if args.quick else 3)
    out = Path(args.out or ("runs/objectives_quick" if args.quick else "docs"))
    root = Path(args.runs or f"runs/objectives_per_step{'_' + base.task if base.task else ''}")
    out.mkdir(parents=True, exist_ok=True)
    stem = f"objectives_per_step{'_' + base.task if base.task else ''}"
    configs = method_configs(base)
    saved = out / f"{stem}_calibration.json"
    if args.reuse_calibration and saved.is_file():  # the CPU per iteration measured by an earlier run
        cost = json.loads(saved.read_text())
    else:
        cost = calibrate(configs, factory)
        saved.write_text(json.dumps(cost, indent=1))
    configs = equal_cpu(configs, cost)
    results = {name: {"curves": [], "dirs": []} for name in configs}
    command = "python experiments/objectives.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    keys = ["eval/" + metric] + (["eval_cfg/" + metric] if base.eval_cfg else [])
    agreement: list[dict] = []
    for seed in range(seeds):
        for name, config in configs.items():
            run_dir = root / name / f"seed{seed}"
            if RunStore(run_dir).holds_run():
                shutil.rmtree(run_dir)
            clock = Clock(metric)
            Trainer(replace(config, seed=seed, checkpoint_every=config.iterations), run_dir, factory(),
                    subscribers=[clock]).run()
            results[name]["curves"].append(clock.points)
            results[name]["dirs"].append(run_dir)
            print(f"{name:12s} seed {seed}: " + "  ".join(f"{k} {clock.points[0].get(k, float('nan')):.3f} -> "
                                                         f"{clock.points[-1].get(k, float('nan')):.3f}" for k in keys)
                  + f"  ({clock.points[-1]['train_cpu']:.0f} training CPU-s)", flush=True)
        for key in keys:
            plot({n: r["curves"] for n, r in results.items()}, key, out / f"{stem}_{key.split('/')[0]}.png",
                 f"held-out {metric.replace('_', ' ')} ({key.split('/')[0]})")
        if seed in (0, seeds - 1):  # after the first seed (its critic), again with every seed's critic at the end
            agreement = agreement_rows(configs, {n: r["dirs"] for n, r in results.items()}, factory)
        report = write_report(out / f"{stem}.md", f"{stem}_eval.png", base, metric, configs, cost, results,
                              agreement, seed + 1, command.strip(), keys)
        print(f"wrote {report}", flush=True)
