"""CPU seconds of a start-up with Python's garbage collector running through the imports, against the collector
deferred until they are done (`workbench/core/heap.py` `defer_collection` + `settle`, as the CLI starts).

    .venv/bin/python scripts/bench_startup.py [--rounds 4]

Each round runs both ways in fresh processes, alternating: import what the app imports (torch, diffusers'
transformers, gradio, plotly, the interface) and load the embedded model, then print the process's CPU time, the
collector's counts and the live objects. Prints the medians and every round (the machine's speed drifts: compare
rounds, not single runs).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = """
import gc, json, sys, time
deferred = sys.argv[1] == "deferred"
from workbench.core import heap
if deferred:
    heap.defer_collection()
import torch, diffusers.models.transformers, gradio, plotly.graph_objects
import workbench.ui.layout
from workbench.models.adapters import load_model
load_model(device="cpu")  # the start-up's end: settle() where the collector was deferred (heap.end_start_up)
print(json.dumps({"cpu_s": time.process_time(), "collections": [s["collections"] for s in gc.get_stats()],
                  "objects": len(gc.get_objects()), "frozen": gc.get_freeze_count(), "enabled": gc.isenabled()}))
"""


def run(mode: str) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, cwd=ROOT,
                          env={"GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    if done.returncode != 0:
        sys.exit(f"the {mode} start-up failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=4, help="alternating pairs of start-ups (default 4)")
    args = p.parse_args()
    results: dict[str, list[dict]] = {"collecting": [], "deferred": []}
    for i in range(args.rounds):
        for mode in (("collecting", "deferred") if i % 2 == 0 else ("deferred", "collecting")):
            results[mode].append(run(mode))
            r = results[mode][-1]
            print(f"round {i + 1} {mode:10s} {r['cpu_s']:5.2f} s CPU, collections (young, middle, full) "
                  f"{r['collections']}, {r['objects']:,} objects tracked + {r['frozen']:,} frozen, "
                  f"collector on: {r['enabled']}", flush=True)
    medians = {mode: statistics.median(r["cpu_s"] for r in rows) for mode, rows in results.items()}
    print(f"median CPU of the start-up: {medians['collecting']:.2f} s collecting through the imports, "
          f"{medians['deferred']:.2f} s deferred ({medians['deferred'] - medians['collecting']:+.2f} s, "
          f"{100 * (medians['deferred'] / medians['collecting'] - 1):+.0f} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
