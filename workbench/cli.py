"""Command line: `python -m workbench <command>` (also installed as `workbench`).

Every command has --help. Bad input ends with a one-line `error: ...` on stderr and exit status 2,
never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from workbench.errors import WorkbenchError


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="local model folder (diffusers SD3/FLUX or embedded format); "
                   "default: the embedded model")
    p.add_argument("--device", default=None, help="cuda, mps or cpu (default: the best available)")


def add_sampling_args(p: argparse.ArgumentParser, group_default: int = 8) -> None:
    p.add_argument("--prompt", required=True, help='e.g. "a large red circle in the top left on a white background"')
    p.add_argument("--group", "--num", dest="group", type=positive_int, default=group_default,
                   help=f"trajectories (images) per prompt, G (default {group_default})")
    p.add_argument("--steps", type=positive_int, default=16, help="denoising steps T (default 16)")
    p.add_argument("--noise-level", type=non_negative_float, default=0.7,
                   help="SDE noise level a; 0 = deterministic Euler ODE (default 0.7, Flow-GRPO)")
    p.add_argument("--sde", default="flow_grpo", help="SDE kind: flow_grpo, dance_grpo or cps")
    p.add_argument("--shift", type=float, default=None, help="schedule shift (default: the model's)")
    p.add_argument("--guidance-scale", type=float, default=1.0, help="classifier-free guidance (1 = off)")
    p.add_argument("--no-shared-noise", action="store_true", help="independent x_T per trajectory")
    p.add_argument("--seed", type=int, default=0, help="group seed (default 0)")
    add_model_args(p)


def sampling_config(args: argparse.Namespace):
    from workbench.trajectory import SamplingConfig

    return SamplingConfig(group=args.group, steps=args.steps, noise_level=args.noise_level, sde=args.sde,
                          shift=args.shift, guidance_scale=args.guidance_scale,
                          shared_noise=not args.no_shared_noise, seed=args.seed)


def load_model(args: argparse.Namespace):
    from workbench.adapters import load_policy

    return load_policy(args.model, device=args.device)


def cmd_sample(args: argparse.Namespace) -> int:
    from workbench.dynamics import relative_change
    from workbench.imaging import filmstrip, grid, save_image
    from workbench.sampler import sample_group

    config = sampling_config(args)
    out = Path(args.out)
    if out.suffix.lower() in (".png", ".jpg", ".jpeg") and args.json:
        raise WorkbenchError("--json needs --out to be a folder (the group is saved there), not an image file")
    policy = load_model(args)
    policy.check_prompt(args.prompt)
    group = sample_group(policy, args.prompt, config)
    if out.suffix.lower() in (".png", ".jpg", ".jpeg"):
        print(f"wrote {save_image(grid(group.images), out)}")
        return 0
    group.save(out)
    files = {"group": str(out / "group.safetensors"), "meta": str(out / "group.json"),
             "grid": str(save_image(grid(group.images), out / "grid.png")),
             "filmstrip": str(save_image(filmstrip(policy.decode(group.x0_preds.flatten(0, 1))
                                                   .unflatten(0, group.x0_preds.shape[:2])), out / "filmstrip.png"))}
    if args.json:
        print(json.dumps({"prompt": group.prompt, "group": group.group_size, "steps": group.num_steps,
                          "sigmas": _round(group.sigmas.tolist()), "log_prob": _round(group.log_probs.tolist()),
                          "l1_rel": _round(relative_change(group.states).tolist()), "files": files}))
    else:
        print(f"wrote {len(files)} files to {out}: " + ", ".join(Path(f).name for f in files.values()))
    return 0


def _round(x, digits: int = 6):
    return [_round(v, digits) for v in x] if isinstance(x, list) else round(float(x), digits)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="workbench", description="Chunk-GRPO Workbench command line.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="command")
    p = sub.add_parser("sample", help="sample a group of trajectories and save images",
                       description="Sample G trajectories of one prompt with the Flow-GRPO SDE and save them.")
    add_sampling_args(p, group_default=4)
    p.add_argument("--out", required=True, help="an image path (grid.png) or a folder for the whole group")
    p.add_argument("--json", action="store_true", help="print a JSON summary (needs a folder --out)")
    p.set_defaults(func=cmd_sample)
    for register in _EXTRA_COMMANDS:
        register(sub)
    return parser


_EXTRA_COMMANDS: list = []  # later commands add themselves here (attribute, chunks, train, bench)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except WorkbenchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
