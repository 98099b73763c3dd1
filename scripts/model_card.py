"""Figures and numbers for the README's model card, from the shipped weights.

    python scripts/model_card.py      # writes docs/pretrain_loss.png, docs/samples.png; prints the accuracies

The loss curve comes from the training record stored in the weights' config.json; the accuracies are
re-measured now on the 200 held-out prompts (Euler ODE, 16 steps, at the model's default CFG scale and
without CFG), with the same attribute checks the rewards use. The sample grid uses the default CFG scale.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from workbench.core.imaging import grid, save_image
from workbench.flow.sampler import ode_sample
from workbench.models.embedded import (
    DEFAULT_WEIGHTS,
    EmbeddedPolicy,
    load_embedded,
)
from workbench.models.pretrain import evaluate
from workbench.toyworld.world import split_scenes

DOCS = Path(__file__).resolve().parent.parent / "docs"


def main() -> None:
    start = time.perf_counter()
    model = load_embedded()
    load_s = time.perf_counter() - start
    record = model.config.training
    loss = record["loss_every_10"]
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.plot([10 * i for i in range(len(loss))], loss)
    ax.set_yscale("log")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("rectified-flow loss (MSE)")
    ax.set_title("Pretraining loss of the embedded model")
    fig.tight_layout()
    DOCS.mkdir(exist_ok=True)
    fig.savefig(DOCS / "pretrain_loss.png", dpi=110)
    policy = EmbeddedPolicy(model)
    _, heldout = split_scenes()
    shown = heldout[:32]
    save_image(grid(ode_sample(policy, [s.prompt() for s in shown], steps=16, seed=0,
                               guidance_scale=policy.default_guidance), ncol=8, scale=3), DOCS / "samples.png")
    (DOCS / "samples.txt").write_text("\n".join(f"{i:2d}: {s.prompt()}" for i, s in enumerate(shown)) + "\n")
    accuracy = evaluate(policy, heldout, steps=16, seed=0)  # at the model's default CFG scale
    unguided = evaluate(policy, heldout, steps=16, seed=0, guidance_scale=1.0)
    size_mb = sum(f.stat().st_size for f in DEFAULT_WEIGHTS.iterdir()) / 1e6
    print(json.dumps({"heldout_accuracy": accuracy, "heldout_accuracy_unguided": unguided,
                      "load_seconds": round(load_s, 2), "weights_mb": round(size_mb, 2),
                      "train_minutes": record["minutes"], "steps": record["config"]["steps"],
                      "final_loss": loss[-1]}, indent=1))


if __name__ == "__main__":
    main()
