"""Calibration of the activation constants of `workbench.train.memory` on CPU: measured peak memory of one training
iteration (`workbench.train.memory_probe`, each in a fresh process) against the estimate, for the embedded model and
random SD3 transformers 256 wide with 4 and 8 blocks (tiny VAE and CLIPs, 589 tokens), full fine-tuning and LoRA,
with and without gradient checkpointing. Prints one Markdown row per case; docs/methods.md cites the result.

    python scripts/calibrate_memory.py     # about 10 minutes on 2 cores
"""

from __future__ import annotations

import json
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
}
SD3_RUN = {"group": 4, "steps": 4, "chunks": "4"}


def measure(settings: dict, folder: Path) -> dict:
    file = folder / "config.json"
    file.write_text(json.dumps({"eval_prompts": 0, "report_to": "none", **settings}))  # 4 prompts: 4 minibatches
    done = subprocess.run([sys.executable, "-m", "workbench.train.memory_probe", str(file)], capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    from tiny_pipelines import save_tiny_sd3

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        models = {n: str(save_tiny_sd3(root / f"sd3-{n}", layers=n, heads=8, head_dim=32)) for n in (4, 8)}
        print("| case | measured peak MB | estimate MB | estimate / measured |\n|---|---|---|---|")
        for name, settings in CASES.items():
            if "model" in settings:
                settings = {**settings, **SD3_RUN, "model": models[settings["model"]]}
            r = measure(settings, root)
            print(f"| {name} | {r['peak_bytes'] / 1e6:.0f} | {r['estimate_bytes'] / 1e6:.0f} | "
                  f"{r['estimate_bytes'] / r['peak_bytes']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
