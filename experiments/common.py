"""What several experiments share: the CPU clock of a training run, the curve it records, running one config on
one thread (reusing a finished run with the same settings), the policy a run starts from, a plain fine-tune scored
before and after, and the settings of the task experiments. The experiments import this module; it imports none of
them (each runs as `python experiments/NAME.py`, which puts this folder on sys.path)."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workbench.models.embedded import EmbeddedPolicy
from workbench.train import TrainConfig, Trainer
from workbench.train.model_settings import model_defaults
from workbench.train.store import RunStore

SPACES = {"eval": "no CFG", "eval_cfg": "CFG 4"}  # the held-out evaluations: unguided and at CFG 4
BUDGET_S = 300.0  # the crosses lesson's budget: 5 minutes of training CPU on one thread (issue 16)
TASK_CLIP = 5e-6  # crosses preset: per-step ratios move ~4e-6 per update (window 0..8), so this clips some units
TASK_SIZES = dict(iterations=24, eval_every=8)  # 24 of the preset's 80 iterations: 6 objectives x 3 seeds x ~100
# CPU-s = ~30 CPU minutes in all (budget 50); 16 iterations of 4 prompts left every objective near 0 held-out
TASK_METRIC = {"crosses": "cross_accuracy"}  # the held-out metric of each task


@dataclass
class Curve:
    """One run's evaluations: iteration, CPU seconds (training only and total) and cross accuracy per space."""

    iterations: list[int] = field(default_factory=list)
    train_cpu: list[float] = field(default_factory=list)
    total_cpu: list[float] = field(default_factory=list)
    accuracy: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in SPACES})
    source: str = ""  # the run folder whose curve this is

    def at_budget(self, space: str, budget: float = BUDGET_S) -> float:
        """Accuracy of the last evaluation whose training CPU time is within budget."""
        inside = [a for a, t in zip(self.accuracy[space], self.train_cpu) if t <= budget]
        return inside[-1] if inside else float("nan")


class CpuClock:
    """Trainer subscriber: process CPU time at each evaluated iteration, with and without the evaluations."""

    def __init__(self):
        self.curve, self.start, self.eval_cpu = Curve(), None, 0.0

    def __call__(self, event) -> None:
        if event.kind == "started":
            self.start = time.process_time()
        if event.kind != "iteration" or "time/eval_cpu_s" not in event.data:
            return
        total = time.process_time() - self.start
        self.eval_cpu += event.data["time/eval_cpu_s"]
        c = self.curve
        c.iterations.append(event.iteration)
        c.total_cpu.append(total)
        c.train_cpu.append(total - self.eval_cpu)
        for space in SPACES:
            c.accuracy[space].append(event.data.get(f"{space}/cross_accuracy", float("nan")))


CURVE_FILE = "cpu_curve.json"  # beside each run: its evaluations with the CPU seconds measured during the run


def reusable(config: TrainConfig, run_dir: Path) -> Curve | None:
    """The curve of a finished run in run_dir with the same settings and at least as many iterations, cut at
    config.iterations (everything random derives from (seed, iteration), so its first evaluations are this run's)."""
    store = RunStore(run_dir)
    if not (store.holds_run() and (run_dir / CURVE_FILE).is_file() and store.info().state == "finished"):
        return None
    saved = TrainConfig.from_dict(store.config())  # as the run stored it: its 'auto' settings resolved
    if saved.iterations < config.iterations or replace(saved, iterations=config.iterations) != model_defaults(config):
        return None
    data = json.loads((run_dir / CURVE_FILE).read_text())
    keep = [k for k, it in enumerate(data["iterations"]) if it <= config.iterations]
    return Curve([data["iterations"][k] for k in keep], [data["train_cpu"][k] for k in keep],
                 [data["total_cpu"][k] for k in keep], {s: [data["accuracy"][s][k] for k in keep] for s in SPACES},
                 f"{run_dir} ({saved.iterations} iterations)" if saved.iterations > config.iterations else "")


def run_one(config: TrainConfig, run_dir: Path, policy_factory, reuse: bool = False) -> Curve:
    """Train config into a fresh run_dir on one thread (or reuse a finished one); print and return its curve."""
    c = reusable(config, run_dir) if reuse else None
    if c is None:
        if RunStore(run_dir).holds_run():
            shutil.rmtree(run_dir)
        clock = CpuClock()
        Trainer(config, run_dir, policy_factory(), subscribers=[clock]).run()
        c = clock.curve
        (run_dir / CURVE_FILE).write_text(json.dumps(asdict(c) | {"source": ""}))
    else:
        print(f"  seed {config.seed}: reusing the finished run in {run_dir}")
    for k, it in enumerate(c.iterations):
        print(f"  seed {config.seed} it {it:4d}  train {c.train_cpu[k]:6.1f}s  total {c.total_cpu[k]:6.1f}s  "
              + "  ".join(f"{SPACES[s]} {c.accuracy[s][k]:.2f}" for s in SPACES), flush=True)
    return c


def policy_factory(quick: bool):
    from workbench.models.embedded import EmbeddedPolicy, build_embedded

    trained = Path(__file__).resolve().parents[1] / "workbench" / "weights" / "embedded" / "model.safetensors"
    if quick and not trained.is_file():
        return lambda: EmbeddedPolicy(build_embedded())
    return EmbeddedPolicy.load


def train_and_score(config: TrainConfig, root: Path) -> dict:
    """Train one config in a fresh folder; held-out reward before/after and the mean seconds per iteration."""
    run_dir = Path(tempfile.mkdtemp(dir=root)) / "run"
    Trainer(config, run_dir, EmbeddedPolicy.load()).run()
    rows = RunStore(run_dir).metrics()
    evals = [r["eval/reward_mean"] for r in rows if r.get("eval/reward_mean") is not None]
    seconds = [r["time/iteration_s"] for r in rows if r.get("time/iteration_s") is not None]
    return {"before": evals[0], "after": evals[-1], "s_per_iter": float(np.mean(seconds))}
