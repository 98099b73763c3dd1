"""Benchmark the trainer on the embedded model: seconds per Chunk-GRPO iteration and trainer overhead.

    python bench/train_speed.py                              # the default config
    python bench/train_speed.py [--iterations 6] [--threads auto|2] [--random] [--prompts 2] [--kl-beta 0.04]
    python bench/train_speed.py --objectives        # + ppo's critic and dense_grpo's look-ahead costs

Runs the default chunk_grpo config (G=8, T=16, 2 prompts, no eval, no samples) and, after every
iteration, re-times the raw model compute of the same iteration on a copy of the transformer: the
rollout forwards (T + 1 steps on the N x G batch) plus forward/backward/AdamW on the same minibatches
of the same stored transitions (and the KL reference's forward when kl_beta > 0), with none of the
trainer's bookkeeping (rewards, advantages, masks, metrics, store). The ratio trainer / raw is the
overhead. Prints figures and the targets; no asserts. `--threads auto` (the default, as in training) lets
`workbench.core.threads.ThreadGovernor` choose the threads every iteration from the cores other processes
leave free; `--json FILE` also writes the figures.

With --objectives it then times chunk_grpo, ppo and dense_grpo iterations at the defaults (process CPU
seconds per iteration, medians after a warm-up): the critic's share (`time/critic_s`: GAE, its forwards and
its regression) against a chunk_grpo iteration (target <= 25 %), and the look-ahead sampling of dense_grpo
(`time/lookahead_s`, `lookahead/nfe`) per iteration.
"""

# ruff: noqa: I001 - workbench first: it sets OpenMP's wait policy before torch loads (workbench/__init__.py)
from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import workbench  # noqa: F401
import torch

from workbench.core.threads import ThreadGovernor
from workbench.models.embedded import EmbeddedPolicy, build_embedded
from workbench.train import TrainConfig, Trainer

TARGET_SECONDS, TARGET_RATIO = 3.0, 1.15
TARGET_CRITIC = 0.25  # the critic may add at most 25 % to a chunk_grpo iteration


def raw_compute(trainer: Trainer, transformer: torch.nn.Module, optimizer: torch.optim.Optimizer) -> float:
    """Seconds of the model compute of the trainer's last iteration, on `transformer` (a copy)."""
    policy, cfg, groups = copy.copy(trainer.policy), trainer.config, trainer.last_groups
    policy.transformer = transformer
    states = torch.cat([g.states for g in groups])  # (L, T + 1, C, H, W)
    sigmas = groups[0].sigmas
    cond = policy.encode([g.prompt for g in groups]).repeat(cfg.group)  # L rows
    steps = torch.tensor(cfg.trained_steps(trainer.iteration))  # (S,)
    per_mb = cfg.minibatch_size // len(steps)
    t0 = time.perf_counter()
    with torch.no_grad():
        for t in range(cfg.sampling_steps):
            policy.velocity(states[:, t], sigmas[t].expand(len(states)), cond)
    for idx in torch.randperm(len(states)).split(per_mb):
        x = states[idx][:, steps].flatten(0, 1)  # (M * S, C, H, W)
        sigma, rows = sigmas[steps].repeat(len(idx)), cond.index(idx).repeat(len(steps))
        if trainer.reference is not None:  # the KL term's forward of the frozen reference
            with torch.no_grad():
                trainer.reference.velocity(x, sigma, rows)
        v = policy.velocity(x, sigma, rows)
        v.float().square().mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python bench/train_speed.py", description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=6, help="iterations; the first is a warm-up")
    parser.add_argument("--threads", default="auto",
                        help="torch CPU threads: a number, or auto (the default: the cores other processes "
                             "leave free, re-measured every iteration, as training does)")
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    parser.add_argument("--random", action="store_true", help="random-init weights (if the trained ones are missing)")
    parser.add_argument("--prompts", type=int, default=None,
                        help="prompts (groups of G=8) per iteration (default: TrainConfig's, 4; "
                             "the target was set at 2)")
    parser.add_argument("--objectives", action="store_true",
                        help="also time ppo (critic) and dense_grpo (look-ahead) iterations against chunk_grpo")
    parser.add_argument("--kl-beta", type=float, default=0.0,
                        help="KL weight (0.04: Flow-GRPO's; adds the reference's forward to every transition)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    governor = ThreadGovernor() if args.threads == "auto" else None
    if governor is None:
        torch.set_num_threads(int(args.threads))
    policy = EmbeddedPolicy(build_embedded(seed=0)) if args.random else EmbeddedPolicy.load()
    config = TrainConfig(iterations=args.iterations, eval_prompts=0, sample_every=10**6, checkpoint_every=10**6)
    if args.prompts is not None:
        config = replace(config, prompts_per_iteration=args.prompts)
    config = replace(config, kl_beta=args.kl_beta, report_to="none")
    trainer = Trainer(config, Path(tempfile.mkdtemp()) / "bench", policy)
    shadow = copy.deepcopy(policy.transformer)
    shadow_opt = torch.optim.AdamW(shadow.parameters(), lr=1e-12)
    wall, raw, stage, threads = [], [], [], []
    last = [time.perf_counter()]

    def on_event(event) -> None:
        if event.kind != "iteration" or event.iteration == 0:
            last[0] = time.perf_counter()
            return
        wall.append(time.perf_counter() - last[0])  # the trainer's whole iteration, bookkeeping included
        stage.append(event.data)
        raw.append(raw_compute(trainer, shadow, shadow_opt))
        threads.append(torch.get_num_threads())
        if governor is not None:
            governor.update()
        last[0] = time.perf_counter()

    trainer.run(callback=on_event)
    keep = slice(1, None) if len(wall) > 1 else slice(None)
    w, r = statistics.median(wall[keep]), statistics.median(raw[keep])
    parts = {k: statistics.median(d[k] for d in stage[keep]) for k in ("time/rollout_s", "time/reward_s",
                                                                       "time/update_s")}
    print(f"embedded model, chunk_grpo, KL beta {config.kl_beta}, G={config.group}, T={config.steps} (+1 untrained), "
          f"{config.prompts_per_iteration} prompts, {config.minibatch_size} transitions per optimizer step, "
          f"threads {args.threads} (used {'/'.join(map(str, threads[keep]))}), "
          f"{len(wall[keep])} timed iterations (medians)")
    print(f"seconds per iteration:        {w:.3f} s   (target < {TARGET_SECONDS:.1f} s on 2 cores)")
    print("  of which rollout / reward+advantage / update: "
          + " / ".join(f"{v:.3f}" for v in parts.values()) + " s")
    print(f"raw model compute, same work: {r:.3f} s")
    print(f"trainer / raw compute ratio:  {w / r:.3f}     (target <= {TARGET_RATIO})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seconds_per_iteration": w, "raw_seconds": r, "ratio": w / r, "threads": threads[keep],
                       "iterations": wall[keep], **parts}, f)
    if args.objectives:
        objective_costs(config, args.random)


def cpu_per_iteration(config: TrainConfig, random: bool) -> tuple[float, dict[str, float]]:
    """(median process CPU seconds per iteration after the first, median of each time/* and lookahead/* metric)."""
    policy = EmbeddedPolicy(build_embedded(seed=0)) if random else EmbeddedPolicy.load()
    cpu, rows, last = [], [], [time.process_time()]

    def on_event(event) -> None:
        if event.kind == "iteration" and event.iteration > 0:
            cpu.append(time.process_time() - last[0])
            rows.append(event.data)
        last[0] = time.process_time()

    Trainer(config, None, policy).run(callback=on_event)
    keys = {k for r in rows for k in r if k.startswith(("time/", "lookahead/"))}
    return statistics.median(cpu[1:] or cpu), {k: statistics.median(r[k] for r in rows[1:] or rows) for k in keys}


def objective_costs(base: TrainConfig, random: bool) -> None:
    """The per-step objectives' extra cost per iteration against chunk_grpo at the same settings."""
    chunk, _ = cpu_per_iteration(base, random)
    ppo, ppo_parts = cpu_per_iteration(replace(base, objective="ppo"), random)
    dense, dense_parts = cpu_per_iteration(replace(base, objective="dense_grpo"), random)
    critic = ppo_parts["time/critic_cpu_s"]
    print(f"CPU seconds per iteration (median): chunk_grpo {chunk:.3f}, ppo {ppo:.3f}, dense_grpo {dense:.3f}")
    print(f"ppo's critic (GAE, forwards, {base.critic_epochs} regression passes): {critic:.3f} CPU-s = "
          f"{100 * critic / chunk:.1f} % of a chunk_grpo iteration (target <= {100 * TARGET_CRITIC:.0f} %); "
          f"ppo / chunk_grpo = {ppo / chunk:.2f}")
    print(f"dense_grpo ({base.lookahead} look-ahead): {dense_parts['lookahead/nfe']:.0f} transformer evaluations and "
          f"{dense_parts['time/lookahead_cpu_s']:.2f} CPU-s of look-ahead per iteration; dense_grpo / chunk_grpo = "
          f"{dense / chunk:.2f}")


if __name__ == "__main__":
    main()
