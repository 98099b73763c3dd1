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

from workbench.cli.args import Parser, device, integer, negative_values_inline, number, run_command, seed
from workbench.core.errors import WorkbenchError, shorten


def _window(text: str) -> tuple[int, int]:
    try:
        start, end = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected START,END such as 0,8, got {text!r}") from None
    return start, end


def _threads(text: str) -> str:
    if text == "auto" or (text.isdigit() and int(text) > 0):
        return text
    raise argparse.ArgumentTypeError(f"expected auto or a positive whole number, got {text!r}")


def _integer_or_auto(text: str) -> int | str:
    return text if text == "auto" else integer(text)


def _gigabytes(text: str) -> float:
    value = number(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of GB, got {text!r}")
    return value


_TYPES = {"int": integer, "float": number, "str": str, "tuple[int, int]": _window,
          "int | str": _integer_or_auto}  # TrainConfig annotations
_FIELD_TYPES = {"seed": seed, "device": device}  # fields whose flags check more than their annotation


def _help(doc: str) -> str:
    """A field's docstring as argparse help (% escaped)."""
    return doc.replace("%", "%%")


def _registered() -> dict[str, list[str]]:
    """The names a field takes from a registry, listed in its flag's help (checked by TrainConfig)."""
    from workbench.rl.advantages import ADVANTAGES
    from workbench.rl.chunking import chunker_names
    from workbench.rl.credit_estimators import lookahead_names
    from workbench.rl.objectives import OBJECTIVES

    return {"objective": OBJECTIVES.names(), "advantage": ADVANTAGES.names(), "lookahead": lookahead_names(),
            "chunks": [*chunker_names(menu=True, without_curve=True), "or sizes"]}


def register(subparsers) -> None:
    """Add the `train` command: its flags are TrainConfig's fields (names, types and help from the dataclass)."""
    from workbench.core.fields import field_docs
    from workbench.train import TrainConfig

    p = subparsers.add_parser("train", help="RL fine-tune a model (Chunk-GRPO, Flow-GRPO, ...) into a run folder",
                              description="Fine-tune with a registered objective; writes runs/<id>/ (config, "
                                          "metrics.jsonl, status, samples, checkpoints). Every setting flag "
                                          "defaults to the preset's (or TrainConfig's) value.")
    p.add_argument("--preset", default=None,
                   help="start from a named preset (crosses: the lesson; embedded_demo, gcpo, flow_grpo, ...)")
    p.add_argument("--config", default=None, metavar="FILE", help="start from a TrainConfig saved as JSON")
    p.add_argument("--out", default=None, help="run folder (default: runs/<date-time>)")
    p.add_argument("--resume", default=None, metavar="RUN_DIR", help="continue a run from its latest checkpoint")
    p.add_argument("--stop", default=None, metavar="RUN_DIR", help="ask a running run to stop and exit")
    p.add_argument("--dry-run", action="store_true",
                   help="print the run's plan: every setting resolved ('auto' ones chosen for the model and device), "
                        "the memory estimate of an iteration part by part (docs/methods.md) and whether it fits; "
                        "loads no weights and starts nothing. --model meta:sd3.5-medium (sd3.5-large, flux.1-dev) "
                        "plans with a published architecture's shapes, no folder needed")
    p.add_argument("--gpu-memory", type=_gigabytes, default=None, metavar="GB",
                   help="--dry-run: plan for a CUDA GPU with this many GB free (e.g. 80), on any machine")
    p.add_argument("--processes", type=integer, default=None, metavar="N",
                   help="--dry-run: plan for N processes (GPUs) of `accelerate launch` (default: this launch's)")
    docs, registered = field_docs(TrainConfig), _registered()
    for f in fields(TrainConfig):  # every flag defaults to None = "keep the preset's value"
        kind, flag, text = f.type.removesuffix(" | None"), "--" + f.name.replace("_", "-"), _help(docs[f.name])
        if f.name in registered:
            text += f" Registered: {', '.join(registered[f.name])}."
        if f.name == "prompts":
            p.add_argument("--prompt", dest="prompts", action="append", help="a training prompt (repeatable)")
        elif kind in ("bool", "bool | str") and f.default in (None, "auto"):  # unset = the automatic choice
            p.add_argument(flag, action="store_const", const=True, default=None, help=text)
            p.add_argument(f"--no-{f.name.replace('_', '-')}", dest=f.name, action="store_const", const=False,
                           default=None, help="turn off (see above)")
        elif kind == "bool" and f.default:
            p.add_argument(f"--no-{f.name.replace('_', '-')}", dest=f.name, action="store_const", const=False,
                           default=None, help=f"turn off: {text}")
        elif kind == "bool":
            p.add_argument(flag, action="store_const", const=True, default=None, help=text)
        else:
            p.add_argument(flag, type=_FIELD_TYPES.get(f.name, _TYPES[kind]), default=None, help=text)
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
    task = "".join(f"  {k} {v:.2f}" for k, v in d.items() if k.startswith("eval") and k.endswith("_accuracy"))
    if event.iteration == 0:
        return f"iter 0/{total}  eval {d.get('eval/reward_mean', float('nan')):.4f} (base model){task}"
    line = (f"iter {event.iteration}/{total}  reward {d.get('reward/mean', float('nan')):.4f} "
            f"+- {d.get('reward/std', float('nan')):.4f}  clip {d.get('policy/clip_frac') or 0:.3f}  "
            f"approx_kl {d.get('policy/approx_kl') or 0:.2e}  {d.get('time/iteration_s', 0):.2f}s")
    if (d.get("rollout/rounds") or 1) > 1:  # DAPO / GPG sampled more rounds to replace zero-variance groups
        line += f"  rounds {int(d['rollout/rounds'])} (kept {int(d.get('rollout/kept_groups') or 0)} groups)"
    return line + (f"  eval {d['eval/reward_mean']:.4f}" if d.get("eval/reward_mean") is not None else "") + task


def cmd_train(args: argparse.Namespace) -> int:
    from workbench.core.files import clean_json
    from workbench.train import Trainer
    from workbench.train.store import RunStore

    overrides = config_overrides(args)
    if args.stop:
        store = RunStore.open(args.stop)
        if store.request_stop() is None:
            print(f"{store.path} is not running ({store.info().state}); nothing to stop")
        else:
            print(f"stop requested: {store.path} saves a checkpoint and stops within one iteration")
        return 0
    if args.dry_run:
        return dry_run(args, overrides)
    if args.gpu_memory is not None or args.processes is not None:
        raise WorkbenchError("--gpu-memory and --processes plan a run (--dry-run); `accelerate launch "
                             "--num_processes N` starts N processes")
    if args.resume:
        extra = sorted(set(overrides) - {"iterations"}) + (["--preset"] if args.preset else []) \
            + (["--config"] if args.config else []) + (["--out"] if args.out else [])
        if extra:
            raise WorkbenchError(f"--resume continues a run with its saved settings; only --iterations may change "
                                 f"(drop {', '.join(extra)})")
        trainer = Trainer.resume(args.resume, iterations=overrides.get("iterations"))
        if trainer.dist.main:
            print(resume_note(trainer.store, trainer.resumed_from), flush=True)
    else:
        config = new_config(args, overrides)
        check_trainable(config)
        trainer = Trainer(config, new_store(args.out))
    total = trainer.config.iterations

    def show(event) -> None:
        line = progress_line(event, total)
        if line:
            print(line, flush=True)

    summary = trainer.run(callback=show)
    if trainer.dist.main:
        print(json.dumps(clean_json(summary.to_dict()), allow_nan=False), flush=True)
    _close_distributed()
    return 0


def dry_run(args: argparse.Namespace, overrides: dict) -> int:
    """--dry-run: the plan (resolved settings, the estimate part by part, the verdict); nothing loads or starts.
    Exits 0 when the run fits (or the free memory is unknown), 1 when it does not."""
    from workbench.train import TrainConfig
    from workbench.train.dry_run import plan_run
    from workbench.train.store import RunStore

    if args.resume:
        config = TrainConfig.from_dict({**RunStore.open(args.resume).config(), **overrides})
    else:
        config = new_config(args, overrides)
    device, free = ("cuda", int(args.gpu_memory * 1e9)) if args.gpu_memory else (None, None)
    plan = plan_run(config, device, args.processes, free)
    print(plan.text())
    return 1 if plan.fits is False else 0


def new_config(args: argparse.Namespace, overrides: dict):
    """The TrainConfig of a fresh run: --config FILE or --preset NAME (or the defaults), then the flags."""
    from workbench.core.files import read_json
    from workbench.train import TrainConfig, preset

    if args.preset and args.config:
        raise WorkbenchError("give --preset or --config, not both")
    if not args.config:
        return preset(args.preset, **overrides) if args.preset else TrainConfig(**overrides)
    try:
        return TrainConfig.from_dict({**read_json(args.config), **overrides})
    except WorkbenchError as err:
        raise WorkbenchError(f"--config {args.config}: {err}") from None


def check_trainable(config) -> None:
    """Refuse a model that only plans (`meta:NAME`) before the run folder is made."""
    from workbench.models.architectures import meta_architecture

    if meta_architecture(config.model) is not None:
        raise WorkbenchError(f"--model {config.model} is an architecture's shapes without weights: it plans a run "
                             "(workbench train --dry-run); give a model folder to train")


def new_store(out: str | None):
    """The run folder of a fresh run, checked and created before the model loads: a file, a run, a non-empty
    folder or an unwritable path is refused before any work."""
    from workbench.train.lock import RunLock
    from workbench.train.store import RunStore

    store = RunStore.create() if out is None else RunStore(out)
    if store.path.is_dir():
        RunLock.acquire(store.path).release()  # a folder another process writes names its holder
    store.check_fresh()
    try:
        store.path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise WorkbenchError(f"--out {store.path}: cannot create the run folder ({err.strerror or err}); "
                             "choose a writable folder") from None
    return store


def resume_note(store, iteration: int) -> str:
    """Which checkpoint a resume continues from, and why, when checkpoints/latest.json did not lead to it."""
    from workbench.core.files import read_json

    folder = f"iter_{iteration:04d}"
    note = f"resuming {store.path} from checkpoint {folder} (iteration {iteration})"
    pointer = store.path / "checkpoints" / "latest.json"
    try:
        named = read_json(pointer).get("dir")
    except WorkbenchError:
        named = None
    if named == folder:
        return note
    if isinstance(named, str):
        return note + f"; latest.json names {shorten(named)}, which is not a complete checkpoint of this run"
    return note + "; latest.json is missing or unreadable, so the newest complete checkpoint was used"


def _close_distributed() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    """`python -m workbench.cli.train [flags]`: the train command on its own (for torchrun -m)."""
    from workbench.core.heap import defer_collection, resume_collection, reuse_freed_memory

    reuse_freed_memory()  # as `python -m workbench` (cli/main.py): the allocator and collector settings of the CLI
    defer_collection()
    parser = Parser(prog="workbench")
    register(parser.add_subparsers(dest="command", required=True))
    argv = sys.argv[1:] if argv is None else argv
    try:
        return run_command(parser.parse_args(negative_values_inline(["train", *argv])))
    finally:
        resume_collection()


if __name__ == "__main__":
    sys.exit(main())
