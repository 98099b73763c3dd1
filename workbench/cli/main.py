"""Command line: `python -m workbench <command>` (also installed as `workbench`).

Every command has --help. Bad input ends with a one-line `error: ...` on stderr and exit status 2,
never a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from workbench.cli import export
from workbench.cli.args import (
    Parser,
    add_model_args,
    limited,
    negative_values_inline,
    non_negative_float,
    positive_int,
    ranged_float,
    run_command,
    seed,
)
from workbench.cli.common import add_sampling_args, check_memory, load_model, sampling_config
from workbench.cli.train import register as register_train
from workbench.core.errors import WorkbenchError
from workbench.core.heap import defer_collection, resume_collection, reuse_freed_memory
from workbench.core.precision import PRECISIONS

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp")  # `sample --out` with one of these writes one grid image


def to_json(obj) -> str:
    """Strict JSON on one line: NaN and inf become null, never a bare NaN token."""
    from workbench.core.files import clean_json

    return json.dumps(clean_json(obj), allow_nan=False)


def image_out(out: Path) -> bool:
    """Whether `sample --out` names one image file (else a folder for the whole group); refuses other suffixes."""
    suffix = out.suffix.lower()
    if suffix in IMAGE_SUFFIXES:
        return True
    if suffix and not out.is_dir() and suffix[1:].isalpha():
        raise WorkbenchError(f"--out {out}: '{suffix}' is not an image type ({', '.join(IMAGE_SUFFIXES)}); give an "
                             "image path or a folder for the whole group")
    return False


def cmd_sample(args: argparse.Namespace) -> int:
    from workbench.core.imaging import grid, save_image
    from workbench.flow.dynamics import relative_change
    from workbench.flow.pictures import x0_filmstrip
    from workbench.flow.sampler import sample_group

    sampling_config(args)  # validates the arguments before the model loads
    out = Path(args.out)
    as_image = image_out(out)
    if as_image and args.json:
        raise WorkbenchError("--json needs --out to be a folder (the group is saved there), not an image file")
    policy = load_model(args, args.prompt)
    config = sampling_config(args, policy.default_guidance)
    policy.check_prompt(args.prompt)
    check_memory(policy, config.group, config.steps, "--num or --steps")
    group = sample_group(policy, args.prompt, config)
    if as_image:
        print(f"wrote {save_image(grid(group.images), out)}")
        return 0
    group.save(out)
    files = {"group": str(out / "group.safetensors"), "meta": str(out / "group.json"),
             "grid": str(save_image(grid(group.images), out / "grid.png")),
             "filmstrip": str(save_image(x0_filmstrip(policy, group), out / "filmstrip.png"))}
    if args.json:
        print(to_json({"prompt": group.prompt, "group": group.group_size, "steps": group.num_steps,
                       "sigmas": _round(group.sigmas.tolist()), "log_prob": _round(group.log_probs.tolist()),
                       "l1_rel": _round(relative_change(group.states).tolist()), "files": files}))
    else:
        print(f"wrote {len(files)} files to {out}: " + ", ".join(Path(f).name for f in files.values()))
    return 0


def _round(x, digits: int = 6):
    return [_round(v, digits) for v in x] if isinstance(x, list) else round(float(x), digits)


def _round_or_none(x, digits: int = 6):
    """Like _round, with None for a missing or NaN number (JSON has no NaN)."""
    if isinstance(x, list):
        return [_round_or_none(v, digits) for v in x]
    return None if x is None or x != x else round(float(x), digits)


def cmd_attribute(args: argparse.Namespace) -> int:
    from workbench.flow.sampler import sample_group
    from workbench.rewards import build_reward, default_reward
    from workbench.rl.chunking import schedule
    from workbench.rl.credit import measure_credit
    from workbench.rl.credit_estimators import ESTIMATORS
    from workbench.rl.significance import false_call_rate
    from workbench.viz.credit_view import last_step_text

    config, info = sampling_config(args), ESTIMATORS.info(args.estimator)
    try:
        sizes = schedule(args.chunks, config.steps)  # before any sampling
    except WorkbenchError as err:
        raise WorkbenchError(f"--chunks: {err}") from None
    if args.reward is not None:
        build_reward(args.reward)  # a bad spec is refused before the model loads
    policy = load_model(args, args.prompt)
    policy.check_prompt(args.prompt)
    reward = build_reward(args.reward or default_reward(policy.toy_world))
    reward.check_images(policy.image_size, [args.prompt], policy.toy_world)
    check_memory(policy, config.group, config.steps, "--group, --steps or --continuations",
                 continuations=args.continuations if info.continuations else 1)  # else one look-ahead
    group = sample_group(policy, args.prompt, config)
    credit = measure_credit(policy, group, reward, continuations=args.continuations, chunks=sizes,
                            advantage=args.advantage, seed=args.seed, progress=_progress("continuations"),
                            estimator=args.estimator, crn=not args.no_crn, precision=args.precision,
                            rescore=args.rescore)
    summary = credit.summary(args.z)
    if args.json:
        print(to_json({k: _round_or_none(v) if isinstance(v, (list, float)) and k != "chunks"
                       and not k.endswith("_classes") else v for k, v in summary.items()}))
        return 0
    k = f"M={args.continuations}" if info.continuations else "one look-ahead per state"
    numerics = f", in {credit.precision}" if info.transformer else ""  # x0 evaluates no transformer
    print(f"{args.prompt!r}: G={group.group_size} T={group.num_steps} estimator {args.estimator} ({k}, "
          f"{'independent' if args.no_crn else 'common random numbers'}{numerics}) chunks {credit.sizes}, z={args.z:g}")
    rate = 100 * false_call_rate(args.z)
    print(f"  steps: x misattributed, + aligned, ? undetermined (not significant at a {rate:.1f} % false-call rate, "
          "Student t, or exact where rewards tie), - not counted")
    classes, valid = credit.step_classes(args.z).tolist(), credit.step_valid.tolist()
    for i, a in enumerate(credit.advantages.tolist()):
        marks = "".join("-" if not v else "x+?"[[-1, 1, 0].index(c)] for c, v in zip(classes[i], valid[i]))
        print(f"  traj {i}: reward {credit.rewards[i]:.3f}  A {a:+.2f}  steps {marks}")
    for unit in ("step", "chunk"):
        s = {key[len(unit) + 1:]: v for key, v in summary.items() if key.startswith(unit + "_")}
        print(f"{unit:5s} misattributed among determined {_figure(s, 'misattributed')}  determined "
              f"{_figure(s, 'determined')}  mass against A {_figure(s, 'mass_against')}  plain sign rate "
              f"{_figure(s, 'misattribution')}")
    if credit.rates(args.z).chunk.by_construction:
        print("chunk rates are fixed by construction: a chunk from the shared x_T to the image has credit r - mean r, "
              "the raw advantage, so it never disagrees with A")
    print("+- is over trajectories; measuring the same group with other continuation noise moves the rates by "
          "several points more (docs/misattribution.md)")
    print(last_step_text(credit))
    return 0


def _figure(summary: dict, key: str) -> str:
    """'0.250 +- 0.031', or why the figure is not defined (a rate among determined cells when none is)."""
    value, se = summary[key], summary[key + "_se"]
    if isinstance(value, float) and not math.isfinite(value):
        return "not defined (no cell is determined: raise --continuations or lower --z)"
    return f"{value:.3f} +- {se:.3f}" if isinstance(se, float) and math.isfinite(se) else f"{value:.3f}"


def cmd_chunks(args: argparse.Namespace) -> int:
    from workbench.flow.dynamics import dynamics_curve
    from workbench.flow.trajectory import SamplingConfig
    from workbench.rl.chunking import CHUNKERS, chunker_info
    from workbench.train.prompt_sets import world_prompts

    chunker = CHUNKERS.get(args.method)
    options = {o.name: getattr(args, o.name) for o in chunker_info(args.method).options
               if getattr(args, o.name, None) is not None}  # the flags of the chunker's ChunkOptions
    policy = load_model(args)
    prompts = world_prompts(policy.toy_world, args.prompts)  # the model's world: toy scenes or real prompts
    config = SamplingConfig(group=args.group, steps=args.steps, noise_level=args.noise_level, seed=args.seed)
    check_memory(policy, config.group, config.steps, "--group or --steps", prompts=min(len(prompts), 16))
    curve = dynamics_curve(policy, prompts, config, metric=args.metric, progress=_progress("trajectories"))
    sizes = chunker(args.steps, curve.mean, **options)
    if args.json:
        print(to_json({"method": args.method, "steps": args.steps, "sizes": sizes, "metric": args.metric,
                       "l1_rel": _round(curve.mean.tolist()), "l1_rel_std": _round(curve.std.tolist()),
                       "prompts": len(prompts)}))
    else:
        print(f"{args.method} chunks over {args.steps} steps: {sizes}")
        print("mean " + args.metric + "_rel per step: " + " ".join(f"{v:.3f}" for v in curve.mean.tolist()))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from workbench.cli.bench import run

    run(args.which, load_model(args) if args.which in ("sampling", "credit", "all") else None, args.json,
        group=args.group, steps=args.steps, continuations=args.continuations, repeats=args.repeats)
    return 0


def _progress(label: str):
    def report(done: int, total: int) -> None:
        end = "\n" if done == total else ""
        print(f"\r{label}: {done}/{total}", end=end, file=sys.stderr, flush=True)
    return report


def add_chunker_options(p: argparse.ArgumentParser) -> None:
    """One flag per chunker option (`ChunkerInfo.options`), shared by the chunkers that take it."""
    from workbench.rl.chunking import chunker_info, chunker_names

    takers: dict[str, list] = {}
    for name in chunker_names():
        for option in chunker_info(name).options:
            takers.setdefault(option.name, []).append((name, option))
    for key, users in takers.items():
        kind = users[0][1].kind
        p.add_argument("--" + key.replace("_", "-"), type=positive_int if kind is int else kind, default=None,
                       help="; ".join(f"{option.label} for {name}" for name, option in users))


def build_parser() -> argparse.ArgumentParser:
    from workbench.rewards import default_note, reward_help
    from workbench.rl.advantages import ADVANTAGES
    from workbench.rl.chunking import chunker_info, chunker_names
    from workbench.rl.credit_estimators import estimator_help, estimator_names

    parser = Parser(prog="workbench", description="Chunk-GRPO Workbench command line.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="command")
    p = sub.add_parser("sample", help="sample a group of trajectories and save images",
                       description="Sample G trajectories of one prompt with the Flow-GRPO SDE and save them.")
    add_sampling_args(p, group_default=4)
    p.add_argument("--out", required=True, help="an image path (grid.png) or a folder for the whole group")
    p.add_argument("--json", action="store_true", help="print a JSON summary (needs a folder --out)")
    p.set_defaults(func=cmd_sample)

    p = sub.add_parser("attribute", help="measure step vs chunk advantage misattribution (Monte-Carlo credit)",
                       description="Sample a group, run M continuations from every state, and compare "
                                   "each step's measured credit with the uniform GRPO advantage.")
    add_sampling_args(p)
    p.add_argument("--continuations", type=limited("continuations"), default=4, metavar="M",
                   help="continuations sampled from every state, M (default 4)")
    p.add_argument("--chunks", default="2,3,4,7", help="chunk sizes over the steps, or a chunker such as temporal or "
                   "uniform:size=4 (default 2,3,4,7)")
    p.add_argument("--reward", default=None, help=f"reward spec, e.g. adherence:1,sharpness:0.5 "
                   f"({default_note()}); rewards: {reward_help()}")
    p.add_argument("--advantage", default="grpo", help=f"advantage estimator ({', '.join(ADVANTAGES.names())})")
    p.add_argument("--estimator", default="mc", choices=estimator_names(), help="credit estimator: " + estimator_help())
    p.add_argument("--z", type=non_negative_float, default=2.0,
                   help="sets the false-call rate P(|N(0,1)| > z) of a cell without credit (default 2: 4.6 %%); "
                        "cells are tested with Student-t quantiles (M - 1 degrees of freedom under CRN)")
    p.add_argument("--no-crn", action="store_true",
                   help="independent continuations instead of common random numbers across a trajectory's states")
    p.add_argument("--rescore", type=positive_int, default=0, metavar="R",
                   help="score every final image R more times and value it by the mean (for a stochastic reward, "
                        "whose noise the last step's credit would hold otherwise; default: scored once)")
    p.add_argument("--precision", default="auto", choices=PRECISIONS,
                   help="numerics of the continuations (default auto: bfloat16 where the device has it natively, "
                        "about 2x faster, else float32; docs/methods.md 'Continuation numerics')")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_attribute)

    export.add_parser(sub)

    p = sub.add_parser("chunks", help="chunk boundaries from the temporal-dynamics curve",
                       description="Sample trajectories over many prompts, average their L1_rel curve, and cut "
                                   "chunks with a registered chunker.")
    p.add_argument("--steps", type=limited("steps"), default=16, help="denoising steps T (default 16)")
    p.add_argument("--method", default="adaptive",  # no choices: an unknown name's message lists the chunkers
                   help="chunker: " + ", ".join(f"{n} ({chunker_info(n).label})" for n in chunker_names()))
    p.add_argument("--prompts", type=positive_int, default=32,
                   help="prompts to average over: the toy world's scenes, or the shipped real prompts for SD3 / FLUX "
                        "(default 32)")
    p.add_argument("--group", type=limited("group"), default=2, help="trajectories per prompt (default 2)")
    p.add_argument("--noise-level", type=ranged_float("noise_level"), default=0.7, help="SDE noise level (default 0.7)")
    p.add_argument("--metric", default="l1", help="l1, l2 or cosine (default l1)")
    add_chunker_options(p)
    p.add_argument("--seed", type=seed, default=0, help="seed, 0 .. 2^63 - 1 (default 0)")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_model_args(p)
    p.set_defaults(func=cmd_chunks)

    p = sub.add_parser("bench", help="how fast sampling, credit and training run on this machine",
                       description="Time sampling, credit, a training iteration and loading the weights on this "
                                   "machine and print the figures against the project's targets.")
    p.add_argument("which", nargs="?", default="all", choices=["load", "sampling", "credit", "train", "all"])
    p.add_argument("--json", default=None, metavar="FILE", help="also write every figure to FILE")
    p.add_argument("--group", type=positive_int, default=None, help="G of sampling / credit (default 16 / 8)")
    p.add_argument("--steps", type=positive_int, default=16, help="denoising steps T (default 16)")
    p.add_argument("--continuations", type=positive_int, default=4, metavar="M",
                   help="credit continuations per state, M (default 4)")
    p.add_argument("--repeats", type=positive_int, default=None,
                   help="timed repeats (default 9 sampling, 2 credit); progress goes to stderr")
    add_model_args(p)
    p.set_defaults(func=cmd_bench)

    register_train(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    reuse_freed_memory()  # tensors' temporaries come back from the heap instead of fresh pages (core/heap.py)
    defer_collection()  # no garbage collection while torch & co. import: resumed once the model loads (core/heap.py)
    try:
        return run_command(build_parser().parse_args(negative_values_inline(argv)))
    finally:
        resume_collection()
