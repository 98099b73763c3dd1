"""`workbench train`: run, resume or stop a fine-tune from the command line.

    python -m workbench train --objective chunk_grpo --chunks 2,3,4,7 --reward adherence \
        --group 8 --steps 16 --iterations 30 --out runs/demo
    python -m workbench train --resume runs/demo --iterations 60
    python -m workbench train --stop runs/demo

One progress line per iteration, then one JSON line with run_dir, state, first/last reward means and
the held-out eval rewards. Under `torchrun` only rank 0 prints. `python -m workbench.cli.train ...`
takes the same flags (useful with `torchrun -m`).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields

from workbench.cli.args import integer, non_negative_float, non_negative_int, number, positive_int, run_command
from workbench.core.errors import WorkbenchError

# flag destinations that are TrainConfig fields; every one defaults to None = "keep the preset's value"
_BOOL_FLAGS = {"mixgrpo": "MixGRPO's sliding 4-step SDE window", "train_last_step": "also train the last transition",
               "noise_aware": "TempFlow-GRPO noise-aware step weights",
               "dynamic_sampling": "DAPO: replace groups with zero reward variance by sampling more"}


def _window(text: str) -> tuple[int, int]:
    try:
        start, end = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected START,END such as 0,8, got {text!r}") from None
    return start, end


def register(subparsers) -> None:
    """Add the `train` command to an argparse subparsers object."""
    p = subparsers.add_parser("train", help="RL fine-tune a model (Chunk-GRPO, Flow-GRPO, ...) into a run folder",
                              description="Fine-tune with a registered objective; writes runs/<id>/ (config, "
                                          "metrics.jsonl, status, samples, checkpoints).")
    p.add_argument("--preset", default=None, help="start from a named preset (embedded_demo, gcpo, flow_grpo, ...)")
    p.add_argument("--out", default=None, help="run folder (default: runs/<date-time>)")
    p.add_argument("--resume", default=None, metavar="RUN_DIR", help="continue a run from its latest checkpoint")
    p.add_argument("--stop", default=None, metavar="RUN_DIR", help="ask a running run to stop and exit")
    p.add_argument("--objective", help="chunk_grpo, step_grpo, gspo, gpg, dapo, dr_grpo, gfpo")
    p.add_argument("--chunks", help="chunk sizes over the trained steps, e.g. 2,3,4,7")
    p.add_argument("--reward", help="reward spec, e.g. adherence or adherence:1,sharpness:0.5")
    p.add_argument("--advantage", help="grpo, dr_grpo, gpg or gfpo")
    p.add_argument("--prompt", dest="prompts", action="append", help="a training prompt (repeatable)")
    p.add_argument("--prompt-file", help="text file with one training prompt per line")
    for name, kind, text in (
            ("eval-prompts", integer, "held-out prompts for eval/reward_mean (0 = none)"),
            ("eval-every", positive_int, "evaluate every N iterations"),
            ("prompts-per-iteration", positive_int, "prompts (groups) per iteration, N"),
            ("group", positive_int, "trajectories per prompt, G"), ("steps", positive_int, "trained transitions T"),
            ("noise-level", non_negative_float, "SDE noise level a"), ("sde", str, "flow_grpo, dance_grpo or cps"),
            ("shift", number, "schedule shift"), ("guidance-scale", number, "CFG scale during rollouts"),
            ("window", _window, "SDE/training window START,END over the T steps"),
            ("iterations", positive_int, "training iterations"), ("lr", number, "AdamW learning rate"),
            ("weight-decay", non_negative_float, "AdamW weight decay"),
            ("inner-epochs", positive_int, "passes over each iteration's transitions"),
            ("minibatch", non_negative_int, "transitions per optimizer step (whole trajectories; 0 = all)"),
            ("grad-accum", positive_int, "minibatches per optimizer step"),
            ("max-grad-norm", number, "gradient-norm clip"), ("clip-low", number, "PPO clip range below 1"),
            ("clip-high", number, "PPO clip range above 1"), ("kl-beta", non_negative_float, "KL weight"),
            ("chunk-fraction", number, "GCPO weighted chunk sampling fraction"),
            ("gfpo-metric", str, "GFPO filter reward spec"), ("gfpo-keep", positive_int, "GFPO samples kept"),
            ("gpg-threshold", number, "GPG: resample while fewer groups than this fraction have variance"),
            ("max-sample-rounds", positive_int, "most rollout rounds per iteration for DAPO / GPG refills"),
            ("clip-path", str, "local CLIP folder for the clip_score reward"),
            ("pickscore-path", str, "local PickScore folder for the pickscore reward"),
            ("seed", integer, "run seed"), ("dtype", str, "float32 or bfloat16"), ("device", str, "cuda, mps or cpu"),
            ("model", str, "local model folder (default: the embedded model)"),
            ("lora-rank", integer, "LoRA rank (0 = full fine-tuning)"), ("lora-alpha", number, "LoRA alpha"),
            ("sample-every", positive_int, "save rollout images every N iterations"),
            ("checkpoint-every", positive_int, "save a checkpoint every N iterations")):
        p.add_argument(f"--{name}", type=kind, default=None, help=text)
    for name, text in _BOOL_FLAGS.items():
        p.add_argument(f"--{name.replace('_', '-')}", action="store_const", const=True, default=None, help=text)
    p.add_argument("--no-shared-noise", dest="shared_noise", action="store_const", const=False, default=None,
                   help="independent x_T per trajectory")
    p.set_defaults(func=cmd_train)


def config_overrides(args: argparse.Namespace) -> dict:
    """The TrainConfig fields given on the command line."""
    from workbench.train import TrainConfig

    return {f.name: getattr(args, f.name) for f in fields(TrainConfig)
            if getattr(args, f.name, None) is not None}


def progress_line(event, total: int) -> str | None:
    """One line per iteration event: reward, eval, clip fraction, approx KL, time."""
    d = event.data
    if event.kind != "iteration":
        return None
    if event.iteration == 0:
        return f"iter 0/{total}  eval {d.get('eval/reward_mean', float('nan')):.4f} (base model)"
    line = (f"iter {event.iteration}/{total}  reward {d.get('reward/mean', float('nan')):.4f} "
            f"+- {d.get('reward/std', float('nan')):.4f}  clip {d.get('policy/clip_frac') or 0:.3f}  "
            f"approx_kl {d.get('policy/approx_kl') or 0:.2e}  {d.get('time/iteration_s', 0):.2f}s")
    if (d.get("rollout/rounds") or 1) > 1:  # DAPO / GPG sampled more rounds to replace zero-variance groups
        line += f"  rounds {int(d['rollout/rounds'])} (kept {int(d.get('rollout/kept_groups') or 0)} groups)"
    return line + (f"  eval {d['eval/reward_mean']:.4f}" if d.get("eval/reward_mean") is not None else "")


def cmd_train(args: argparse.Namespace) -> int:
    from workbench.train import TrainConfig, Trainer, preset
    from workbench.train import store as runs

    overrides = config_overrides(args)
    if args.stop:
        print(f"stop requested: {runs.request_stop(args.stop)}")
        return 0
    if args.resume:
        extra = sorted(set(overrides) - {"iterations"}) + (["--preset"] if args.preset else []) \
            + (["--out"] if args.out else [])
        if extra:
            raise WorkbenchError(f"--resume continues a run with its saved settings; only --iterations may change "
                                 f"(drop {', '.join(extra)})")
        trainer = Trainer.resume(args.resume, iterations=overrides.get("iterations"))
    else:
        config = preset(args.preset, **overrides) if args.preset else TrainConfig(**overrides)
        trainer = Trainer(config, runs.new_run_dir() if args.out is None else args.out)
    total = trainer.config.iterations

    def show(event) -> None:
        line = progress_line(event, total)
        if line:
            print(line, flush=True)

    summary = trainer.run(callback=show)
    if trainer.dist.main:
        print(json.dumps(summary.to_dict()), flush=True)
    _close_distributed()
    return 0


def _close_distributed() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    """`python -m workbench.cli.train [flags]`: the train command on its own (for torchrun -m)."""
    parser = argparse.ArgumentParser(prog="workbench")
    register(parser.add_subparsers(dest="command", required=True))
    return run_command(parser.parse_args(["train", *(sys.argv[1:] if argv is None else argv)]))


if __name__ == "__main__":
    sys.exit(main())
