"""`workbench export`: sample a group, measure its credit and write a standalone HTML page of it
(`workbench.viz.page`): images, credit maps, chunk view, the objectives' maps, the numbers with their
errors, the settings and this command. The page opens offline; the app's Export button writes the same page.

    workbench export --prompt "a purple circle" --group 8 --steps 16 --continuations 4 --out group.html
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from workbench.cli.args import limited, non_negative_float
from workbench.cli.common import add_sampling_args, check_memory, load_model, sampling_config
from workbench.core.precision import PRECISIONS


def model_curve(policy, group):
    """The model's L1_rel curve at the group's steps and noise: over 8 spread prompts of the toy world (as the app's
    Chunks tab), else over the group's prompt (the real prompt set's would cost 16 trajectories of a large model)."""
    from dataclasses import replace

    from workbench.flow.dynamics import dynamics_curve
    from workbench.train.prompt_sets import world_prompts

    prompts = world_prompts(True, 8) if getattr(policy, "toy_world", False) else [group.prompt]
    return dynamics_curve(policy, prompts, replace(group.config, group=2 if len(prompts) > 1 else 8))


def cmd_export(args: argparse.Namespace) -> int:
    from workbench.flow.sampler import sample_group
    from workbench.rewards import build_reward, default_reward
    from workbench.rl.advantages import ADVANTAGES
    from workbench.rl.chunking import schedule
    from workbench.rl.credit import measure_credit
    from workbench.rl.credit_estimators import ESTIMATORS
    from workbench.train.sources import resolve_source
    from workbench.viz.page import write_page

    config = sampling_config(args)
    sizes = schedule(args.chunks, config.steps)
    if args.reward is not None:
        build_reward(args.reward)  # a bad spec is refused before the model loads
    policy = load_model(args, args.prompt)
    reward_spec = args.reward or default_reward(policy.toy_world)
    reward = build_reward(reward_spec)
    policy.check_prompt(args.prompt)
    reward.check_images(policy.image_size, [args.prompt], policy.toy_world)  # before any sampling
    check_memory(policy, config.group, config.steps, "--group, --steps or --continuations",
                 continuations=args.continuations if ESTIMATORS.info(args.estimator).continuations else 1)
    group = sample_group(policy, args.prompt, config)
    rewards = reward(group.images, [group.prompt] * group.group_size)
    advantages = ADVANTAGES.get("grpo")(rewards[None]).values[0]
    credit = measure_credit(policy, group, reward, continuations=args.continuations, chunks=sizes,
                            estimator=args.estimator, precision=args.precision)
    settings = {"model": resolve_source(args.model, args.lora).key or "embedded model", "prompt": args.prompt,
                "seed": args.seed, "G": config.group, "T": config.steps, "noise level": config.noise_level,
                "sampler": config.sde, "reward": reward_spec,
                "chunks": ",".join(map(str, sizes)), "continuations": args.continuations,
                "estimator": args.estimator, "precision": credit.precision, "z": args.z}
    out = write_page(policy, group, rewards, advantages, credit, args.z, settings, args.out,
                     curve=model_curve(policy, group))
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB); open it in any browser, no network needed",
          file=sys.stderr)
    return 0


def add_parser(sub) -> None:
    from workbench.rewards import default_note, reward_help
    from workbench.rl.credit_estimators import estimator_help, estimator_names

    p = sub.add_parser("export", help="write a standalone HTML page of a group and its credit",
                       description="Sample a group, measure its credit and write one HTML page (plotly inlined, "
                                   "opens offline) with its images, credit and chunk maps, the objectives' maps, "
                                   "the rates with their errors, the settings and the command that reproduces it.")
    add_sampling_args(p)
    p.add_argument("--continuations", type=limited("continuations"), default=4, metavar="M",
                   help="continuations sampled from every state, M (default 4)")
    p.add_argument("--chunks", default="temporal", help="chunk sizes over the steps, e.g. 2,3,4,7, or a chunker such "
                   "as uniform:size=4 (default: temporal, GCPO's temporal chunking of T)")
    p.add_argument("--reward", default=None, help=f"reward spec, e.g. adherence:1,sharpness:0.5 "
                   f"({default_note()}); rewards: {reward_help()}")
    p.add_argument("--estimator", default="mc", choices=estimator_names(),
                   help="credit estimator (default mc): " + estimator_help())
    p.add_argument("--precision", default="auto", choices=PRECISIONS,
                   help="numerics of the continuations (default auto: bfloat16 where the device has it natively)")
    p.add_argument("--z", type=non_negative_float, default=2.0, help="sets the false-call rate (default 2: 4.6 %%)")
    p.add_argument("--out", type=Path, required=True, help="the HTML file to write, e.g. group.html")
    p.set_defaults(func=cmd_export)
