"""Compare policy objectives at equal compute on the embedded model (several seeds each).

    .venv/bin/python experiments/objectives.py            # full: 5 objectives x 3 seeds x 30 iterations
    .venv/bin/python experiments/objectives.py --quick    # tiny smoke run (random weights if needed)
    .venv/bin/python experiments/objectives.py --task crosses   # the crosses lesson, + dapo -> docs/
    .venv/bin/python experiments/objectives.py --per-step [--task crosses]  # + ppo, dense_grpo at equal CPU

With --task crosses every run starts from the `crosses` preset (SDE window 0..8, lr, reward shape_match, no KL)
at fewer iterations than the preset, adds DAPO (dynamic sampling, clip-higher, token-level loss) to the list,
trains on one thread and reports held-out cross accuracy without and with CFG, and the CPU time of each run;
it writes <out>/objectives_crosses.md and <out>/objectives_crosses.png.

Every run uses the default TrainConfig (same prompts per iteration, group, steps, minibatches, lr and
iterations) except the KL weight, Flow-GRPO's 0.04 (the trainer's default is 0, as in GCPO), and the clip
range, 2e-5 by default: at the trainer's default (1e-3) no ratio of the
embedded model is ever clipped, and step, chunk and sequence ratios then give the same gradient. Only the
objective (and its chunking / advantage) changes between runs:

    step_grpo            Flow-GRPO per-step ratio
    chunk_grpo temporal  GCPO [2,3,4,7]-style chunks (CHUNKERS 'temporal')
    chunk_grpo uniform   equal chunks of T/4 steps
    gspo                 one sequence ratio
    gpg                  GPG: no ratio, alpha-scaled advantages, one optimizer step per rollout

Writes <out>/objectives.md (mean +- std over seeds of the final held-out ODE reward, and the command)
and <out>/objectives_curves.png (held-out reward vs iteration, mean +- std band). Default out: docs/
(full) or runs/objectives_quick/ (--quick). Run folders go to <runs>/<objective>/seed<k>.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import SPACES, TASK_CLIP, TASK_METRIC, TASK_SIZES, CpuClock, policy_factory

from workbench.core.files import atomic_write
from workbench.rl.chunking import CHUNKERS
from workbench.train import TrainConfig, Trainer
from workbench.train.presets import with_objective
from workbench.train.store import RunStore

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def variants(base: TrainConfig) -> dict[str, TrainConfig]:
    """The compared objectives, all at the compute of `base`."""
    n_steps = len(base.trained_steps(1))
    temporal = ",".join(map(str, CHUNKERS.get("temporal")(n_steps)))
    uniform = ",".join(map(str, CHUNKERS.get("uniform")(n_steps, size=max(1, n_steps // 4))))
    return {  # each objective with its paired advantage and companion settings, from its registration
        "step_grpo": with_objective(base, "step_grpo"),
        f"chunk_grpo temporal [{temporal}]": with_objective(replace(base, chunks=temporal), "chunk_grpo"),
        f"chunk_grpo uniform [{uniform}]": with_objective(replace(base, chunks=uniform), "chunk_grpo"),
        "gspo": with_objective(base, "gspo"),
        "gpg": with_objective(base, "gpg"),  # one update per rollout
    } | ({"dapo": with_objective(base, "dapo")}  # dynamic sampling matters where groups are flat
         if base.task else {})


def run_one(config: TrainConfig, run_dir: Path, policy_factory) -> list[dict]:
    """Train one config into run_dir (fresh) and return its metrics rows."""
    if RunStore(run_dir).holds_run():
        import shutil
        shutil.rmtree(run_dir)
    Trainer(config, run_dir, policy_factory()).run()
    return RunStore(run_dir).metrics()


def eval_curve(rows: list[dict], metric: str = "eval/reward_mean") -> tuple[list[int], list[float]]:
    pts = [(r["iteration"], r[metric]) for r in rows if r.get(metric) is not None]
    return [i for i, _ in pts], [v for _, v in pts]


def plot(curves: dict[str, list[tuple[list[int], list[float]]]], path: Path,
         ylabel: str = "held-out reward (ODE)") -> str:
    """Held-out reward curves, mean +- std over seeds; matplotlib if installed, else a plain PIL drawing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return _plot_pil(curves, path)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (name, seeds), color in zip(curves.items(), COLORS):
        its, values = np.array(seeds[0][0]), np.array([v for _, v in seeds])
        ax.plot(its, values.mean(0), color=color, label=name)
        ax.fill_between(its, values.mean(0) - values.std(0), values.mean(0) + values.std(0), color=color, alpha=0.15)
    ax.set_xlabel("iteration")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return "matplotlib"


def _plot_pil(curves: dict, path: Path) -> str:
    from PIL import Image, ImageDraw

    w, h, pad = 760, 460, 50
    img = Image.new("RGB", (w, h), "white")
    draw = ImageDraw.Draw(img)
    all_its = [i for seeds in curves.values() for i in seeds[0][0]]
    all_vals = [v for seeds in curves.values() for _, vals in seeds for v in vals]
    x0, x1, y0, y1 = min(all_its), max(all_its) or 1, min(all_vals), max(all_vals)
    y1 = y1 if y1 > y0 else y0 + 1e-3

    def xy(i, v):
        return pad + (i - x0) / max(x1 - x0, 1) * (w - 2 * pad), h - pad - (v - y0) / (y1 - y0) * (h - 2 * pad)

    draw.rectangle([pad, pad, w - pad, h - pad], outline="black")
    draw.text((pad, h - pad + 8), f"iteration {x0}..{x1}", fill="black")
    draw.text((pad, 10), f"held-out reward (ODE), {y0:.3f}..{y1:.3f}; mean over seeds (no matplotlib)", fill="black")
    for k, ((name, seeds), color) in enumerate(zip(curves.items(), COLORS)):
        its, mean = seeds[0][0], np.mean([v for _, v in seeds], axis=0)
        draw.line([xy(i, v) for i, v in zip(its, mean)], fill=color, width=2)
        draw.text((w - pad - 230, pad + 8 + 14 * k), name, fill=color)
    img.save(path)
    return "PIL (matplotlib is not installed in the venv)"


def write_report(out: Path, table: list[tuple[str, list[float], float]], base: float | None, command: str,
                 config: TrainConfig, seeds: int, plotter: str) -> Path:
    lines = ["# Objectives at equal compute (embedded model)", "",
             f"Final held-out reward (`eval/reward_mean`, {config.eval_prompts} held-out prompts, deterministic "
             f"ODE, fixed noise) after {config.iterations} iterations of {config.prompts_per_iteration} prompts x "
             f"{config.group} samples, T={config.steps} trained steps, lr {config.lr}, clip {config.clip_low}, "
             f"KL beta {config.kl_beta}; "
             f"mean +- std over {seeds} seeds." + (f" Base model: {base:.4f}." if base is not None else ""), "",
             "| objective | final held-out reward | change vs base | mean clip fraction |", "|---|---|---|---|"]
    for name, finals, clip_frac in table:
        mean, std = float(np.mean(finals)), float(np.std(finals))
        delta = f"{mean - base:+.4f}" if base is not None else "n/a"
        lines.append(f"| {name} | {mean:.4f} +- {std:.4f} | {delta} | {clip_frac:.3f} |")
    lines += ["", "![held-out reward curves](objectives_curves.png)", "",
              f"Curves drawn with {plotter}.", "", "Reproduce:", "", "```", command, "```", ""]
    return atomic_write(out / "objectives.md", "\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny run to check the script works")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per objective (default 3; quick 2)")
    parser.add_argument("--iterations", type=int, default=None, help="iterations per run (default: TrainConfig's)")
    parser.add_argument("--clip-low", type=float, default=None,
                        help="clip range for every run (default 2e-5: clipping active on ~5%% of units; --task "
                             f"crosses: {TASK_CLIP}, its ratios move less)")
    parser.add_argument("--kl-beta", type=float, default=None,
                        help="KL weight for every run (default 0.04, Flow-GRPO's; docs/objectives.md was run with it; "
                             "--task crosses: the preset's, 3; docs/objectives_crosses.md was run with 0, before the "
                             "lesson had a KL term)")
    parser.add_argument("--task", default=None, choices=["crosses"],
                        help="compare on a lesson (its preset, held-out accuracy, + dapo) instead of the defaults")
    parser.add_argument("--per-step", action="store_true",
                        help="step_grpo, chunk_grpo, gspo, ppo and dense_grpo at equal CPU time, with per-step "
                             "advantage agreement with the credit (experiments/objectives_per_step.py)")
    parser.add_argument("--reuse-calibration", action="store_true",
                        help="--per-step: take the CPU per iteration from <out>/objectives_per_step*_calibration.json")
    parser.add_argument("--out", default=None, help="folder for objectives.md and the curves")
    parser.add_argument("--runs", default=None, help="folder for the run folders")
    args = parser.parse_args()
    from workbench.models.embedded import EmbeddedPolicy, build_embedded

    if args.per_step:
        from objectives_per_step import per_step_experiment
        return per_step_experiment(args)
    if args.task:
        return task_experiment(args)
    args.clip_low = 2e-5 if args.clip_low is None else args.clip_low
    args.kl_beta = 0.04 if args.kl_beta is None else args.kl_beta
    if args.quick:
        base = TrainConfig(group=2, steps=4, iterations=args.iterations or 2, eval_prompts=4, eval_every=1,
                           chunks="1,1,1,1", sample_every=10**6, clip_low=args.clip_low)
        seeds, out = args.seeds or 2, Path(args.out or "runs/objectives_quick")
        trained = Path(__file__).resolve().parents[1] / "workbench" / "weights" / "embedded" / "model.safetensors"
        factory = (lambda: EmbeddedPolicy.load()) if trained.is_file() else (lambda: EmbeddedPolicy(build_embedded()))
    else:
        base = TrainConfig(iterations=args.iterations or TrainConfig().iterations, sample_every=10**6,
                           clip_low=args.clip_low, kl_beta=args.kl_beta)
        seeds, out, factory = args.seeds or 3, Path(args.out or "docs"), (lambda: EmbeddedPolicy.load())
    run_root = Path(args.runs or ("runs/objectives_quick" if args.quick else "runs/objectives"))
    out.mkdir(parents=True, exist_ok=True)
    curves, table, base_evals = {}, [], []
    for name, config in variants(base).items():
        per_seed, clip_fracs = [], []
        for seed in range(seeds):
            rows = run_one(replace(config, seed=seed), run_root / name.split(" [")[0].replace(" ", "_") / f"seed{seed}",
                           factory)
            per_seed.append(eval_curve(rows))
            clip_fracs += [r["policy/clip_frac"] for r in rows if r.get("policy/clip_frac") is not None]
            base_evals.append(per_seed[-1][1][0])
            print(f"{name:32s} seed {seed}: held-out {per_seed[-1][1][0]:.4f} -> {per_seed[-1][1][-1]:.4f}",
                  flush=True)
        curves[name] = per_seed
        table.append((name, [vals[-1] for _, vals in per_seed], float(np.nanmean(clip_fracs))))
    plotter = plot(curves, out / "objectives_curves.png")
    command = "python experiments/objectives.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    report = write_report(out, table, float(np.mean(base_evals)), command.strip(), base, seeds, plotter)
    print(f"wrote {report} and {out / 'objectives_curves.png'} ({plotter})")


def task_experiment(args) -> None:
    """Every objective on a lesson (`--task crosses`): held-out accuracy curves and a table with spread and CPU.

    Seeds run in the outer loop and the report is rewritten after each round, so an interrupted experiment
    still leaves every objective compared on the seeds it finished."""
    import torch

    from workbench.train import preset

    torch.set_num_threads(1)
    quick = dict(group=2, steps=4, window=(0, 2), chunks="1,1", eval_prompts=4, eval_every=1, iterations=2)
    sizes = (quick if args.quick else TASK_SIZES) | ({"iterations": args.iterations} if args.iterations else {})
    base = preset(args.task, **sizes, sample_every=10**6, clip_low=args.clip_low or TASK_CLIP,
                  **({} if args.kl_beta is None else {"kl_beta": args.kl_beta}))
    seeds, out = args.seeds or (2 if args.quick else 3), Path(args.out or ("runs/objectives_quick" if args.quick
                                                                            else "docs"))
    run_root = Path(args.runs or f"runs/objectives_{args.task}")
    out.mkdir(parents=True, exist_ok=True)
    factory, metric, configs = policy_factory(args.quick), TASK_METRIC[args.task], variants(base)
    results = {name: {"curves": {s: [] for s in SPACES}, "cpu": [], "clip": [], "flat": []} for name in configs}
    command = "python experiments/objectives.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    for seed in range(seeds):
        for name, config in configs.items():
            run_dir = run_root / name.split(" [")[0].replace(" ", "_") / f"seed{seed}"
            if RunStore(run_dir).holds_run():
                import shutil
                shutil.rmtree(run_dir)
            clock, res = CpuClock(), results[name]
            Trainer(replace(config, seed=seed), run_dir, factory(), subscribers=[clock]).run()
            rows = RunStore(run_dir).metrics()
            for space in SPACES:
                res["curves"][space].append(eval_curve(rows, f"{space}/{metric}"))
            res["cpu"].append(clock.curve.total_cpu[-1])
            res["clip"] += [r["policy/clip_frac"] for r in rows if r.get("policy/clip_frac") is not None]
            res["flat"] += [r["adv/zero_std_frac"] for r in rows if r.get("adv/zero_std_frac") is not None]
            print(f"{name:32s} seed {seed}: " + "  ".join(
                f"{SPACES[s]} {res['curves'][s][-1][1][0]:.2f} -> {res['curves'][s][-1][1][-1]:.2f}" for s in SPACES)
                + f"  ({res['cpu'][-1]:.0f} CPU-s)", flush=True)
        for space in SPACES:
            plot({n: r["curves"][space] for n, r in results.items()}, out / f"objectives_{args.task}_{space}.png",
                 ylabel=f"held-out {metric.replace('_', ' ')} ({SPACES[space]})")
        table = [(n, {s: [v[-1] for _, v in r["curves"][s]] for s in SPACES}, float(np.nanmean(r["clip"])),
                  float(np.mean(r["flat"])), r["cpu"]) for n, r in results.items()]
        print(f"wrote {write_task_report(out, args.task, table, base, seed + 1, command.strip())}", flush=True)


def write_task_report(out: Path, task: str, table: list, config: TrainConfig, seeds: int, command: str) -> Path:
    from workbench.train import preset

    metric = TASK_METRIC[task]
    lines = [f"# Objectives at equal compute on the {task} lesson", "",
             f"Every run: the `{task}` preset (reward `{config.reward}`, SDE and training on steps "
             f"{config.window[0]}..{config.window[1] - 1} of {config.steps}, lr {config.lr}, KL beta {config.kl_beta}) "
             f"for {config.iterations} iterations of {config.prompts_per_iteration} prompts x {config.group} samples "
             f"(the preset: {preset(task).prompts_per_iteration} prompts, {preset(task).iterations} iterations; "
             f"fewer here to fit the budget), clip {config.clip_low}; "
             f"{seeds} seed(s). Held-out `{metric}` over {config.eval_prompts} prompts (deterministic ODE, fixed "
             "noise), final value mean +- std over seeds (per seed in brackets). One thread; CPU seconds per run "
             "include the evaluations.", "",
             "| objective | no CFG | CFG 4 | clip fraction | flat groups | CPU s / run |", "|---|---|---|---|---|---|"]
    for name, finals, clip_frac, flat, cpu in table:
        cells = [f"{np.mean(finals[s]):.2f} +- {np.std(finals[s]):.2f} "
                 f"[{', '.join(f'{v:.2f}' for v in finals[s])}]" for s in SPACES]
        lines.append(f"| {name} | {cells[0]} | {cells[1]} | {clip_frac:.3f} | {flat:.2f} | {np.mean(cpu):.0f} |")
    lines += ["", f"![no CFG](objectives_{task}_eval.png)", f"![CFG 4](objectives_{task}_eval_cfg.png)", "",
              "Reproduce:", "", "```", command, "```", ""]
    return atomic_write(out / f"objectives_{task}.md", "\n".join(lines))


if __name__ == "__main__":
    main()
