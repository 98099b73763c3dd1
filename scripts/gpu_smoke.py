"""Smoke test of a real fine-tune on one GPU: two iterations of LoRA Chunk-GRPO at 512 px on a local SD3 / FLUX folder.

    python scripts/gpu_smoke.py --model models/stable-diffusion-3.5-medium [--resolution 512] [--out smoke]

Prints seconds per iteration, the trainer / raw-compute ratio (an iteration against the bare sampling forwards
plus one forward and backward over the same trained transitions), peak GPU memory against the estimate of
`workbench train --dry-run`, and writes one sample grid. Without a CUDA GPU it says so and exits 0. Settings:
Flow-GRPO's one-GPU recipe where it applies (10 sampling steps, LoRA r 32, bfloat16) with the chunk_grpo objective,
group 8 and one prompt per iteration so that two iterations finish in minutes.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def smoke_config(model: str, resolution: int):
    from workbench.train import TrainConfig

    return TrainConfig(model=model, resolution=resolution, objective="chunk_grpo", chunks="2,3,4", steps=9,
                       group=8, prompts_per_iteration=1, iterations=2, lora_rank=32, lr=3e-4, dtype="bfloat16",
                       eval_prompts=0, report_to="none", device="cuda", sample_every=1, checkpoint_every=1000)


def raw_seconds(policy, config) -> float:
    """Bare compute of one iteration: the rollout's forwards and one forward + backward of its trained transitions."""
    import torch

    from workbench.flow.sampler import sample_group, transition

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    scfg = config.sampling_config(1)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        group = sample_group(policy, "a photo of a cat", scfg)
        steps = torch.tensor(config.trained_steps(1), device=policy.device)
        x = group.states[:, steps].flatten(0, 1).to(policy.device)  # (G * S, C, H, W)
        x_next = group.states[:, steps + 1].flatten(0, 1).to(policy.device)
        cond = policy.encode(["a photo of a cat"]).repeat(len(x))
        micro = config.micro_batch or len(x)
        for rows in torch.arange(len(x), device=policy.device).split(micro):
            out = transition(policy, x[rows], group.sigmas.to(policy.device), steps.repeat(config.group)[rows],
                             cond.index(rows), scfg, x_next=x_next[rows])
            out.log_prob.sum().backward()
    torch.cuda.synchronize()
    policy.transformer.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="local diffusers SD3 / FLUX folder")
    p.add_argument("--resolution", type=int, default=512, help="image side in pixels (default 512)")
    p.add_argument("--out", default="smoke", help="folder for the run and the sample grid (default smoke/)")
    args = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("gpu_smoke: no CUDA GPU is visible (this PyTorch build "
              f"{'has no CUDA' if torch.version.cuda is None else 'sees no GPU'}); nothing to measure. Run it on a "
              "machine with a GPU; `workbench train --dry-run` prints the memory estimate anywhere.")
        return 0
    from workbench.train import Trainer
    from workbench.train.dry_run import estimate_run

    config = smoke_config(args.model, args.resolution)
    estimate, verdict = estimate_run(config, "cuda")
    print(f"estimate: {verdict}\n{estimate.table()}", flush=True)
    out, grids = Path(args.out), []
    torch.cuda.reset_peak_memory_stats()
    trainer = Trainer(config, out / "run")
    trainer.run(callback=lambda e: grids.append(e.data["grid"]) if e.kind == "samples" else None)
    peak = torch.cuda.max_memory_allocated()
    seconds = [r["time/iteration_s"] for r in trainer.history if "time/iteration_s" in r]
    raw = raw_seconds(trainer.policy, config)
    grid = out / "samples.png"
    grids[-1].save(grid)
    print(f"seconds per iteration: {', '.join(f'{s:.1f}' for s in seconds)}")
    print(f"trainer / raw compute: {seconds[-1] / raw:.2f} (raw {raw:.1f} s)")
    print(f"peak GPU memory: {peak / 1e9:.1f} GB allocated; estimate {estimate.total / 1e9:.1f} GB "
          f"({100 * (estimate.total - peak) / peak:+.0f} %)")
    print(f"sample grid: {grid}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
