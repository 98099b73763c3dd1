"""Calibration of the memory estimate (`workbench.train.memory`) on CPU: the measured peak memory of one training
iteration (`workbench.train.memory_probe`: the resident set's peak in a fresh heap) against the estimate, over
resolutions 32-128 px (256 to 4096 image tokens), with and without gradient checkpointing, micro-batches of 1 to
the whole minibatch, LoRA and full fine-tuning, bfloat16 (the real-model default) and float32, on random SD3
transformers 256 wide with 4 and 8 blocks (tiny VAE and CLIPs, 32 T5 tokens: 109 text tokens) and on the embedded
model. docs/methods.md "Memory estimate" shows the table and the constants fitted to it (the measurements:
docs/memory_calibration.json).

    python scripts/calibrate_memory.py --out docs/memory_calibration.json   # measure every case (about an hour
                                                                            # on 2 shared cores), then the table
    python scripts/calibrate_memory.py --table docs/memory_calibration.json # the table with the current constants
    python scripts/calibrate_memory.py --fit docs/memory_calibration.json   # the constants that fit every case best
    python scripts/calibrate_memory.py --only "64 px" --out /tmp/part.json  # some cases (names containing the text)

The measurements keep the sizes the estimate is computed from, so --table and --fit try other constants on the same
peaks without measuring again. What is measured is the CPU (glibc's heap, the CPU attention kernels); on a GPU the
constants are estimates until scripts/gpu_smoke.py measures them there.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from dataclasses import fields
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

SD3 = {"group": 4, "steps": 4, "chunks": "4", "prompts_per_iteration": 4, "max_sequence_length": 32,
       "lora_rank": 8}  # 4 prompts of G = 4, T = 4: minibatches of 16 transitions, 4 of them (the heap's churn)
SMALL = {"group": 2, "steps": 2, "chunks": "2", "prompts_per_iteration": 2}  # 128 px: 4096 tokens cost CPU minutes
CASES = {  # name -> TrainConfig settings ("model": blocks of the random SD3, filled in with its folder)
    "embedded, full, float32": {},
    "embedded, full, micro_batch 32": {"micro_batch": 32},
    "embedded, full, checkpointing": {"gradient_checkpointing": True},
    "embedded, LoRA 8": {"lora_rank": 8},
    "embedded, LoRA 8, checkpointing": {"lora_rank": 8, "gradient_checkpointing": True},
    "SD3 4 blocks, 32 px": {"model": 4, **SD3, "resolution": 32, "gradient_checkpointing": False},
    "SD3 4 blocks, 32 px, checkpointing": {"model": 4, **SD3, "resolution": 32},
    "SD3 4 blocks, 32 px, full fine-tuning": {"model": 4, **SD3, "resolution": 32, "lora_rank": 0,
                                              "gradient_checkpointing": False},
    "SD3 4 blocks, 32 px, float32": {"model": 4, **SD3, "resolution": 32, "dtype": "float32",
                                     "gradient_checkpointing": False},
    "SD3 4 blocks, 64 px, micro_batch 4": {"model": 4, **SD3, "resolution": 64, "micro_batch": 4,
                                           "gradient_checkpointing": False},
    "SD3 4 blocks, 64 px, checkpointing": {"model": 4, **SD3, "resolution": 64},
    "SD3 4 blocks, 64 px, checkpointing, micro_batch 4": {"model": 4, **SD3, "resolution": 64, "micro_batch": 4},
    "SD3 8 blocks, 64 px, micro_batch 4": {"model": 8, **SD3, "resolution": 64, "micro_batch": 4,
                                           "gradient_checkpointing": False},
    "SD3 8 blocks, 64 px, checkpointing": {"model": 8, **SD3, "resolution": 64},
    "SD3 4 blocks, 128 px, micro_batch 1": {"model": 4, **SD3, **SMALL, "resolution": 128, "micro_batch": 1,
                                            "gradient_checkpointing": False},
    "SD3 4 blocks, 128 px, checkpointing": {"model": 4, **SD3, **SMALL, "resolution": 128},
    "SD3 4 blocks, 128 px, checkpointing, micro_batch 2": {"model": 4, **SD3, **SMALL, "resolution": 128,
                                                           "micro_batch": 2},
}


def measure(settings: dict, folder: Path) -> dict:
    file = folder / "config.json"
    file.write_text(json.dumps({"eval_prompts": 0, "report_to": "none", **settings}))
    done = subprocess.run([sys.executable, "-m", "workbench.train.memory_probe", str(file)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise SystemExit(f"the probe failed on {settings}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def estimate(result: dict, constants: dict | None = None) -> float:
    """The estimate of a measured case with the module's constants (or `constants`, for the fit)."""
    from workbench.train import memory

    saved = {k: getattr(memory, k) for k in (constants or {})}
    try:
        for k, v in (constants or {}).items():
            setattr(memory, k, v)
        names = {f.name for f in fields(memory.ModelSizes)}
        model = memory.ModelSizes(**{k: v for k, v in result["model_sizes"].items() if k in names})
        return memory.estimate_memory(model, memory.RunSizes(**result["run_sizes"])).total
    finally:
        for k, v in saved.items():
            setattr(memory, k, v)


def table(results: dict[str, dict], constants: dict | None = None) -> str:
    rows = ["| case | tokens | transitions per pass | measured peak MB | estimate MB | estimate / measured |",
            "|---|---|---|---|---|---|"]
    for name, r in results.items():
        e, peak = estimate(r, constants), r["peak_bytes"]
        rows.append(f"| {name} | {r['model_sizes']['tokens']} | {r['run_sizes']['transitions_per_pass']} | "
                    f"{peak / 1e6:.0f} | {e / 1e6:.0f} | {e / peak:.2f} |")
    return "\n".join(rows)


def fit(results: dict[str, dict]) -> dict:
    """The activation constants that make the worst |log(estimate / measured)| smallest (a grid search)."""
    best, plain = None, [n for n, r in results.items() if not r["run_sizes"]["checkpointing"]]
    for per_block in [x / 2 for x in range(20, 121)]:  # without checkpointing: 10 .. 60
        worst = max(abs(math.log(estimate(results[n], {"ACT_PER_BLOCK": per_block}) / results[n]["peak_bytes"]))
                    for n in plain)
        best = min(best or (worst, per_block), (worst, per_block))
    out, grid = {"ACT_PER_BLOCK": best[1]}, None
    checkpointed = [n for n in results if n not in plain]
    for per_block in [x / 4 for x in range(0, 61)]:  # with it: 0 .. 15 per block, 0 .. 80 once
        for fixed in range(0, 81, 2):
            c = {"CHECKPOINT_PER_BLOCK": per_block, "CHECKPOINT_FIXED": float(fixed)}
            worst = max(abs(math.log(estimate(results[n], c) / results[n]["peak_bytes"])) for n in checkpointed)
            grid = min(grid or (worst, c), (worst, c), key=lambda t: t[0])
    return out | grid[1]


def main() -> None:
    from tiny_pipelines import save_tiny_sd3

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="measure the cases and write them to this JSON file")
    parser.add_argument("--table", help="print the table of a JSON file of measurements (current constants)")
    parser.add_argument("--fit", help="print the constants that fit a JSON file of measurements best")
    parser.add_argument("--only", default="", help="measure only the cases whose name contains this text")
    args = parser.parse_args()
    if args.table or args.fit:
        results = json.loads(Path(args.table or args.fit).read_text())
        print(table(results) if args.table else json.dumps(fit(results)))
        return
    if not args.out:
        parser.error("give --out FILE to measure, or --table / --fit FILE to read measurements")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        models = {n: str(save_tiny_sd3(root / f"sd3-{n}", layers=n, heads=8, head_dim=32)) for n in (4, 8)}
        for name, settings in CASES.items():
            if args.only in name:
                settings = {**settings, "model": models[settings["model"]]} if "model" in settings else settings
                results[name] = measure(settings, root)
                print(f"{name}: {results[name]['peak_bytes'] / 1e6:.0f} MB measured, "
                      f"{estimate(results[name]) / 1e6:.0f} MB estimated", flush=True)
                Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    print(table(results))


if __name__ == "__main__":
    main()
