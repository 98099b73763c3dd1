"""`workbench export`: sample a group, measure its credit and write a standalone HTML page of it
(`workbench.viz.page`): images, credit maps, chunk view, the objectives' maps, the numbers with their
errors, the settings and this command. The page opens offline; the app's Export button writes the same page.

    workbench export --prompt "a purple circle" --group 8 --steps 16 --continuations 4 --out group.html
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from workbench.cli.args import RenamedFlag, limited, non_negative_float
from workbench.core.precision import PRECISIONS


def model_curve(policy, group):
    """The model's L1_rel curve at the group's steps and noise: over 8 spread prompts of the toy world (as the app's
    Chunks tab), else over the group's prompt."""
    from dataclasses import replace

    from workbench.flow.dynamics import dynamics_curve
    from workbench.toyworld.world import spread_prompts

    prompts = spread_prompts(8) if getattr(policy, "toy_world", False) else [group.prompt]
    return dynamics_curve(policy, prompts, replace(group.config, group=2 if len(prompts) > 1 else 8))


def cmd_export(args: argparse.Namespace) -> int:
    from workbench.cli.main import check_memory, load_model, sampling_config
    from workbench.flow.sampler import sample_group
    from workbench.rewards import build_reward
    from workbench.rl.advantages import ADVANTAGES
    from workbench.rl.chunking import CHUNKERS, parse_chunk_spec
    from workbench.rl.credit import measure_credit
    from workbench.viz.page import write_page

    policy = load_model(args, args.prompt)
    config = sampling_config(args)
    temporal = args.chunks.strip() == "temporal"
    sizes = CHUNKERS.get("temporal")(config.steps) if temporal else parse_chunk_spec(args.chunks, config.steps)
    reward = build_reward(args.reward)
    policy.check_prompt(args.prompt)
    check_memory(policy, config.group, config.steps, "--group, --steps or --continuations",
                 continuations=args.continuations if args.estimator == "mc" else 1)
    group = sample_group(policy, args.prompt, config)
    rewards = reward(group.images, [group.prompt] * group.group_size)
    advantages = ADVANTAGES.get("grpo")(rewards[None]).values[0]
    credit = measure_credit(policy, group, reward, continuations=args.continuations, chunks=sizes,
                            estimator=args.estimator, precision=args.precision)
    settings = {"model": args.model or "embedded model", "prompt": args.prompt, "seed": args.seed, "G": config.group,
                "T": config.steps, "noise level": config.noise_level, "sampler": config.sde, "reward": args.reward,
                "chunks": ",".join(map(str, sizes)), "continuations": args.continuations,
                "estimator": args.estimator, "precision": credit.precision, "z": args.z}
    out = write_page(policy, group, rewards, advantages, credit, args.z, settings, args.out,
                     curve=model_curve(policy, group))
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB); open it in any browser, no network needed",
          file=sys.stderr)
    return 0


def add_parser(sub) -> None:
    from workbench.cli.main import add_sampling_args

    p = sub.add_parser("export", help="write a standalone HTML page of a group and its credit",
                       description="Sample a group, measure its credit and write one HTML page (plotly inlined, "
                                   "opens offline) with its images, credit and chunk maps, the objectives' maps, "
                                   "the rates with their errors, the settings and the command that reproduces it.")
    add_sampling_args(p)
    p.add_argument("--continuations", type=limited("continuations"), default=4, metavar="M",
                   help="continuations sampled from every state, M (default 4)")
    p.add_argument("--branches", type=limited("continuations"), dest="continuations", action=RenamedFlag,
                   new="--continuations",
                   metavar="M", help="old name of --continuations")
    p.add_argument("--chunks", default="temporal", help="chunk sizes over the steps, e.g. 2,3,4,7 "
                   "(default: GCPO's temporal chunking of T)")
    p.add_argument("--reward", default="adherence", help="reward spec, e.g. adherence:1,sharpness:0.5")
    p.add_argument("--estimator", default="mc", choices=["mc", "ode", "x0"], help="credit estimator (default mc)")
    p.add_argument("--precision", default="auto", choices=PRECISIONS,
                   help="numerics of the continuations (default auto: bfloat16 where the device has it natively)")
    p.add_argument("--z", type=non_negative_float, default=2.0, help="sets the false-call rate (default 2: 4.6 %%)")
    p.add_argument("--out", type=Path, required=True, help="the HTML file to write, e.g. group.html")
    p.set_defaults(func=cmd_export)
