"""What several commands share: the sampling flags and their SamplingConfig, loading the model --model names, and
the memory check before sampling. `main` and `export` both import it (neither imports the other)."""

from __future__ import annotations

import argparse

from workbench.cli.args import add_model_args, limited, ranged_float, seed


def add_sampling_args(p: argparse.ArgumentParser, group_default: int = 8) -> None:
    p.add_argument("--prompt", required=True, help='e.g. "a large red circle in the top left on a white background"')
    p.add_argument("--group", "--num", dest="group", type=limited("group"), default=group_default,
                   help=f"trajectories (images) per prompt, G (default {group_default})")
    p.add_argument("--steps", type=limited("steps"), default=16, help="denoising steps T (default 16)")
    p.add_argument("--noise-level", type=ranged_float("noise_level"), default=0.7,
                   help="SDE noise level a in 0..10; 0 = deterministic Euler ODE (default 0.7, Flow-GRPO)")
    p.add_argument("--sde", default="flow_grpo", help="SDE kind: flow_grpo, dance_grpo or cps (cps log-probs are "
                   "the full Normal density, unlike Flow-GRPO's CPS code: its clip ranges do not carry over)")
    p.add_argument("--shift", type=ranged_float("shift"), default=None, help="schedule shift (default: the model's)")
    p.add_argument("--guidance-scale", type=ranged_float("guidance_scale"), default=None,
                   help="classifier-free guidance, 1 = off (default: 1; for `sample`, the model's default_guidance)")
    p.add_argument("--no-shared-noise", action="store_true", help="independent x_T per trajectory")
    p.add_argument("--seed", type=seed, default=0, help="group seed, 0 .. 2^63 - 1 (default 0)")
    add_model_args(p)


def sampling_config(args: argparse.Namespace, guidance: float = 1.0):
    """The SamplingConfig of the command line; `guidance` is the CFG scale when --guidance-scale is not given."""
    from workbench.flow.trajectory import SamplingConfig

    scale = guidance if args.guidance_scale is None else args.guidance_scale
    return SamplingConfig(group=args.group, steps=args.steps, noise_level=args.noise_level, sde=args.sde,
                          shift=args.shift, guidance_scale=scale,
                          shared_noise=not args.no_shared_noise, seed=args.seed)


def load_model(args: argparse.Namespace, prompt: str | None = None):
    """The policy --model (and --lora) names: a model folder, a base folder with a LoRA adapter, a run (its newest
    complete checkpoint) or one checkpoint.

    With `prompt`, a model of the embedded format (no --model, such a folder, or a run on one) refuses a prompt
    outside its grammar before anything loads: the load imports diffusers, seconds a user waited for "unknown
    word". A diffusers SD3 / FLUX folder takes any text; the loaded policy's own `check_prompt` stays the rule.
    """
    from workbench.train.prompt_sets import is_pipeline_folder
    from workbench.train.sources import load_policy, resolve_source

    source = resolve_source(args.model, getattr(args, "lora", None))
    if prompt is not None and not is_pipeline_folder(source.model):
        from workbench.toyworld.world import parse_prompt

        parse_prompt(prompt)
    options = {} if args.resolution is None else {"resolution": args.resolution}
    named = args.model if source.run is not None else source  # a run: its newest checkpoint as it loads
    return load_policy(named, device=args.device, dtype=args.dtype, **options)


def check_memory(policy, group: int, steps: int, flags: str, prompts: int = 1, continuations: int = 0) -> None:
    """Refuse sizes whose tensors cannot fit on the policy's device (`core.budget`), before any sampling."""
    from workbench.core.budget import check_fits, rollout_bytes

    needed = rollout_bytes(group, steps, policy.latent_shape, prompts=prompts, continuations=continuations)
    check_fits(needed, policy.device, f"G={group} x T={steps}" + (f" x M={continuations}" if continuations else ""),
               f"lower {flags}")
