"""The default fine-tune of the embedded model with and without Flow-GRPO's KL term, over seeds.

    .venv/bin/python experiments/defaults.py            # full: 2 KL weights x 3 seeds x 30 iterations
    .venv/bin/python experiments/defaults.py --quick    # a smoke run (2 iterations, 1 seed)

Each run is `TrainConfig()` (the `embedded_demo` preset: Chunk-GRPO [2,3,4,7], adherence reward, 4 prompts
x 8 samples, lr 3e-5) with 48 held-out prompts scored by the unguided ODE at fixed noise, once with no KL
term (the default, as in GCPO) and once with Flow-GRPO's beta 0.04 in the released code's form
(`kl_form="flow_grpo"`, docs/methods.md "KL to the reference"). Writes <out>/defaults.md: held-out
adherence before and after per seed, mean +- std, and the mean time per iteration (time/iteration_s).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import train_and_score

from workbench.core.files import atomic_write
from workbench.train import TrainConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 iterations, 1 seed, 4 eval prompts")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per setting (default 3; quick 1)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    parser.add_argument("--out", default="docs", help="folder for defaults.md (default docs/)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    seeds = args.seeds or (1 if args.quick else 3)
    base = TrainConfig(eval_prompts=4 if args.quick else 48, iterations=2 if args.quick else 30,
                       eval_every=10**6, sample_every=10**6, checkpoint_every=10**6, report_to="none")
    root = Path(tempfile.mkdtemp(prefix="defaults-"))
    results = {}
    for beta in (0.0, 0.04):
        results[beta] = []
        for seed in range(seeds):
            results[beta].append(train_and_score(replace(base, kl_beta=beta, seed=seed), root))
            r = results[beta][-1]
            print(f"kl_beta {beta} seed {seed}: {r['before']:.4f} -> {r['after']:.4f}, "
                  f"{r['s_per_iter']:.2f} s/iteration", flush=True)
    command = "python experiments/defaults.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    lines = ["# The default fine-tune, with and without the KL term", "", f"Reproduce: `{command.strip()}`", "",
             f"`TrainConfig()` ({base.objective} [{base.chunks}], {base.reward_spec(toy_world=True)} reward, "
             f"{base.prompts_per_iteration} prompts x {base.group} samples, lr {base.lr}, {base.iterations} "
             f"iterations, sampler {base.sde} a={base.noise_level}); held-out adherence of {base.eval_prompts} "
             f"prompts (unguided ODE, fixed noise) before and after; KL in the released Flow-GRPO form "
             f"(`kl_form=\"{base.kl_form}\"`); seconds per iteration with {args.threads} torch thread(s) on "
             "this machine.", "",
             "| KL beta | before | after, per seed | after, mean +- std | s / iteration |", "|---|---|---|---|---|"]
    for beta, rs in results.items():
        after = [r["after"] for r in rs]
        lines.append(f"| {beta} | {rs[0]['before']:.4f} | {' / '.join(f'{a:.4f}' for a in after)} | "
                     f"{np.mean(after):.4f} +- {np.std(after):.4f} | "
                     f"{np.mean([r['s_per_iter'] for r in rs]):.2f} |")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    print(f"wrote {atomic_write(Path(args.out) / 'defaults.md', chr(10).join(lines) + chr(10))}")


if __name__ == "__main__":
    main()
