"""Calibration of the activation constants of `workbench.train.memory` on CPU: measured peak memory of one training
iteration (`workbench.train.memory_probe`, each in a fresh process) against the estimate, for the embedded model and
random SD3 transformers 256 wide with 4 and 8 blocks (tiny VAE and CLIPs, 589 tokens), full fine-tuning and LoRA,
with and without gradient checkpointing. Prints one Markdown row per case; docs/methods.md cites the result.
With --repeat N each case is measured N times: the row gives the median peak and the range (the same iteration's
peak moves with the heap's layout from run to run).

    python scripts/calibrate_memory.py     # about 10 minutes on 2 cores
    python scripts/calibrate_memory.py --only "SD3 4 blocks, LoRA 8" --repeat 5
    python scripts/calibrate_memory.py --only "16 px" --repeat 5   # the test's SD3 cases (outside the fit)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

CASES = {  # name -> TrainConfig settings (the SD3 folder is filled in)
    "embedded, full": {},
    "embedded, full, micro_batch 32": {"micro_batch": 32},
    "embedded, full, checkpointing": {"gradient_checkpointing": True},
    "embedded, LoRA 8": {"lora_rank": 8},
    "embedded, LoRA 8, checkpointing": {"lora_rank": 8, "gradient_checkpointing": True},
    "SD3 4 blocks, full": {"model": 4, "lora_rank": 0, "gradient_checkpointing": False},
    "SD3 4 blocks, LoRA 8": {"model": 4, "lora_rank": 8, "gradient_checkpointing": False},
    "SD3 4 blocks, LoRA 8, checkpointing": {"model": 4, "lora_rank": 8},
    "SD3 8 blocks, LoRA 8": {"model": 8, "lora_rank": 8, "gradient_checkpointing": False},
    "SD3 8 blocks, LoRA 8, checkpointing": {"model": 8, "lora_rank": 8},
    # not in the fit: tests/test_memory.py's two SD3 cases, 16 px and 32 T5 tokens (64 image + 109 text tokens)
    "SD3 4 blocks at 16 px, LoRA 8": {"model": 4, "lora_rank": 8, "gradient_checkpointing": False, "resolution": 16,
                                      "max_sequence_length": 32},
    "SD3 4 blocks at 16 px, LoRA 8, checkpointing": {"model": 4, "lora_rank": 8, "resolution": 16,
                                                     "max_sequence_length": 32},
}
# 4 prompts of G = 4, T = 4; 32 px and 256 T5 tokens (the diffusers pipeline's default, which the fit was made with
# before the policy's default became Flow-GRPO's 128): 256 image + 333 text tokens
SD3_RUN = {"group": 4, "steps": 4, "chunks": "4", "max_sequence_length": 256}


def measure(settings: dict, folder: Path) -> dict:
    file = folder / "config.json"
    file.write_text(json.dumps({"eval_prompts": 0, "report_to": "none", **settings}))  # 4 prompts: 4 minibatches
    done = subprocess.run([sys.executable, "-m", "workbench.train.memory_probe", str(file)], capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    from tiny_pipelines import save_tiny_sd3

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="measure only the cases whose name contains this text")
    parser.add_argument("--repeat", type=int, default=1, help="measurements per case (median and range)")
    args = parser.parse_args()
    cases = {name: settings for name, settings in CASES.items() if args.only in name}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        models = {n: str(save_tiny_sd3(root / f"sd3-{n}", layers=n, heads=8, head_dim=32)) for n in (4, 8)}
        spread = " (range)" if args.repeat > 1 else ""
        print(f"| case | measured peak MB{spread} | estimate MB | estimate / measured |\n|---|---|---|---|")
        for name, settings in cases.items():
            if "model" in settings:
                settings = {**SD3_RUN, **settings, "model": models[settings["model"]]}
            runs = [measure(settings, root) for _ in range(args.repeat)]
            peaks = sorted(r["peak_bytes"] / 1e6 for r in runs)
            peak, estimate = statistics.median(peaks), runs[0]["estimate_bytes"] / 1e6
            measured = f"{peak:.0f}" + (f" ({peaks[0]:.0f}-{peaks[-1]:.0f})" if args.repeat > 1 else "")
            print(f"| {name} | {measured} | {estimate:.0f} | {estimate / peak:.2f} |", flush=True)


if __name__ == "__main__":
    main()
