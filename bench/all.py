"""Every figure of docs/performance.md in one JSON file: `workbench bench`'s (loading, sampling, credit), the model
picker's switch to a run, the trainer against raw compute (bench/train_speed.py), training next to a busy process
(bench/train_threads.py), the browser's figures (bench/browser.py, where chromium is installed) and, with --tests,
`make test` on a fresh clone (bench/tests.sh).

    .venv/bin/python bench/all.py --json /tmp/bench.json [--tests]    # ~15 minutes on 2 quiet cores
    .venv/bin/python bench/report.py /tmp/bench.json                   # -> docs/performance.md

Figures taken while other work runs on the machine are not comparable.
"""

# ruff: noqa: I001 - workbench first: it sets OpenMP's wait policy before torch loads (workbench/__init__.py)
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import workbench  # noqa: F401
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from train_threads import bench_threads, report  # noqa: E402 - this folder is on sys.path when a script runs

from workbench.cli import bench  # noqa: E402
from workbench.train.sources import load_policy  # noqa: E402


def bench_switch(repeats: int = 3) -> dict:
    """Seconds to switch the app's model picker to a run of the embedded model: its checkpoint (weights + an Adam
    state of the same size) read and copied into a fresh base model (target < 2 s)."""
    from workbench.core.files import write_json
    from workbench.train import TrainConfig
    from workbench.train.store import CONFIG, RunStore

    with tempfile.TemporaryDirectory() as root:
        store = RunStore.create(root, "bench")
        write_json(store.path / CONFIG, TrainConfig().to_dict())
        params = dict(load_policy(device="cpu").transformer.named_parameters())
        adam = {"state": {n: {"exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
                          for n, p in enumerate(params.values())}, "param_groups": []}
        store.save_checkpoint(1, params, adam)
        return {"switch_s": bench._timed(lambda: load_policy(store.path, device="cpu"), repeats)}


def train_speed() -> dict:
    """bench/train_speed.py at its defaults, in a fresh process (OpenMP reads its wait policy when torch loads)."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, str(HERE / "train_speed.py"), "--json", f"{tmp}/train.json"], check=True)
        return json.loads(Path(f"{tmp}/train.json").read_text())


def browser_and_tests(tests: bool) -> dict:
    """The browser figures and, with `tests`, `make test` on a fresh clone; the browser's are skipped without
    /usr/bin/chromium."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        if Path("/usr/bin/chromium").exists():
            subprocess.run([sys.executable, str(HERE / "browser.py"), "--json", f"{tmp}/app.json"], check=True)
            out["app"] = json.loads(Path(f"{tmp}/app.json").read_text())
        else:
            print("app       skipped: needs /usr/bin/chromium")
        if tests:
            # a failing suite is a figure too (its exit code and summary): the other figures are not thrown away
            subprocess.run(["bash", str(HERE / "tests.sh"), f"{tmp}/tests.json"], check=False)
            if Path(f"{tmp}/tests.json").is_file():
                out["tests"] = json.loads(Path(f"{tmp}/tests.json").read_text())
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", required=True, metavar="FILE", help="the file to write every figure to")
    p.add_argument("--tests", action="store_true", help="also time `make test` on a fresh clone (minutes)")
    args = p.parse_args()
    figures = bench.run(("load", "sampling", "credit"), load_policy())
    figures["load"] |= bench_switch()
    print(f"switch    the model picker to a run's checkpoint: {figures['load']['switch_s']:.2f} s (target < 2 s)")
    figures["train"] = train_speed()
    figures["threads"] = bench_threads()
    report(figures["threads"])
    figures |= browser_and_tests(args.tests)
    Path(args.json).write_text(json.dumps(figures, indent=1, default=str))
    print(f"figures written to {args.json}")


if __name__ == "__main__":
    main()
