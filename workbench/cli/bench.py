"""Benchmarks that print figures against the project's targets (no assertions: read the numbers).

    python -m workbench bench sampling   # recording trajectories vs a plain diffusers Euler loop
    python -m workbench bench credit     # Monte-Carlo credit and re-chunking
    python -m workbench bench train      # fine-tuning iterations (workbench.cli.bench_train)
    python -m workbench bench load       # loading the shipped weights
    python -m workbench bench all
"""

from __future__ import annotations

import statistics
import time

import torch

from workbench.flow.trajectory import SamplingConfig

PROMPT = "a large red circle in the top left on a white background"


def _timed(fn, repeats: int) -> float:
    """Median wall time of fn() over `repeats` runs after one warm-up run."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _timed_pair(a, b, repeats: int) -> tuple[float, float]:
    """Median wall times of a() and b(), run alternately so that machine load hits both alike."""
    a(), b()
    ta, tb = [], []
    for _ in range(repeats):
        for fn, times in ((a, ta), (b, tb)):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return statistics.median(ta), statistics.median(tb)


def bench_sampling(policy, group: int = 16, steps: int = 16, repeats: int = 9) -> dict:
    """Trajectories per second: our recording SDE sampler vs a plain Euler loop with diffusers' scheduler."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    from workbench.flow.sampler import sample_group

    config = SamplingConfig(group=group, steps=steps)

    def recorded():
        sample_group(policy, PROMPT, config)

    @torch.no_grad()
    def plain():
        sched = FlowMatchEulerDiscreteScheduler(shift=policy.default_shift)
        sched.set_timesteps(steps)
        cond = policy.encode([PROMPT]).repeat(group)
        x = torch.randn(group, *policy.latent_shape)
        for i, t in enumerate(sched.timesteps):
            v = policy.denoise(x, sched.sigmas[i].expand(group), cond.embeds, cond.pooled)
            x = sched.step(v, t, x).prev_sample
        policy.decode(x)

    t_rec, t_plain = _timed_pair(recorded, plain, repeats)
    return {"group": group, "steps": steps, "recorded_traj_per_s": group / t_rec,
            "plain_traj_per_s": group / t_plain, "overhead": t_rec / t_plain - 1, "target_overhead": 0.10}


def bench_credit(policy, group: int = 8, steps: int = 16, continuations: int = 4, repeats: int = 2) -> dict:
    """Seconds for the default credit measurement and one refinement pass, milliseconds to re-chunk with
    errors and classes, and the share of determined step cells before and after the refinement."""
    from workbench.flow.sampler import sample_group
    from workbench.rewards import build_reward
    from workbench.rl.credit import measure_credit, refine

    reward = build_reward("adherence")
    g = sample_group(policy, PROMPT, SamplingConfig(group=group, steps=steps))
    holder = {}

    def credit():
        holder["c"] = measure_credit(policy, g, reward, continuations=continuations, chunks=f"{steps}")

    t_credit = _timed(credit, repeats)
    budget = group * (steps - 1) * continuations  # the default measurement's continuations (the app's default)
    start = time.perf_counter()
    refined = refine(holder["c"], policy, g, reward, budget)
    t_refine = time.perf_counter() - start
    specs = ["2,3,4,7", "4,4,4,4", "1" + ",1" * (steps - 1), f"{steps}"] if steps == 16 else [f"{steps}"]

    def rechunk():
        for spec in specs:
            c = refined.rechunk(spec)
            c.rates(), c.chunk_classes()

    t_rechunk = _timed(rechunk, 5) / len(specs)
    odes = {name: measure_credit(policy, g, reward, chunks=f"{steps}", estimator=name).cost["seconds"]
            for name in ("ode", "x0")}
    return {"group": group, "steps": steps, "continuations": continuations, "credit_s": t_credit,
            "target_credit_s": 10.0,
            "budget": budget, "refine_s": t_refine, "target_refine_s": 20.0,
            "rechunk_ms": 1000 * t_rechunk, "target_rechunk_ms": 10.0,
            "determined_before": holder["c"].rates().step.determined,
            "determined_after": refined.rates().step.determined,
            "k_after": (int(refined.counts.min()), int(refined.counts.max())), "ode_s": odes["ode"], "x0_s": odes["x0"]}


def bench_load(repeats: int = 3) -> dict:
    """Seconds to load the shipped embedded weights, and to switch the app's model picker to a run of it: its
    checkpoint (weights + an Adam state of the same size) read and copied into a fresh base model (target < 2 s)."""
    import tempfile

    from workbench.core.files import write_json
    from workbench.models.embedded import load_embedded
    from workbench.train import TrainConfig
    from workbench.train.sources import load_policy
    from workbench.train.store import CONFIG, RunStore

    with tempfile.TemporaryDirectory() as root:
        store = RunStore.create(root, "bench")
        write_json(store.path / CONFIG, TrainConfig().to_dict())
        params = dict(load_policy(device="cpu").transformer.named_parameters())
        adam = {"state": {n: {"exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
                          for n, p in enumerate(params.values())}, "param_groups": []}
        store.save_checkpoint(1, params, adam)
        switch = _timed(lambda: load_policy(store.path, device="cpu"), repeats)
    return {"load_s": _timed(load_embedded, repeats), "target_load_s": 2.0, "switch_s": switch}


def bench_train() -> None:
    from workbench.cli.bench_train import main

    main([])


def run(which: str, policy) -> None:
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    if which in ("load", "all"):
        r = bench_load()
        print(f"load      embedded weights: {r['load_s']:.2f} s; a run's checkpoint of it (the model picker's "
              f"switch): {r['switch_s']:.2f} s (target < {r['target_load_s']:.0f} s each)")
    if which in ("sampling", "all"):
        r = bench_sampling(policy)
        print(f"sampling  G={r['group']} T={r['steps']}: recorded {r['recorded_traj_per_s']:.1f} traj/s, "
              f"plain diffusers Euler {r['plain_traj_per_s']:.1f} traj/s, recording overhead "
              f"{100 * r['overhead']:+.1f} % (target <= {100 * r['target_overhead']:.0f} %)")
    if which in ("credit", "all"):
        r = bench_credit(policy)
        print(f"credit    G={r['group']} T={r['steps']} M={r['continuations']}: {r['credit_s']:.2f} s "
              f"(target < {r['target_credit_s']:.0f} s); one refinement of {r['budget']} continuations "
              f"{r['refine_s']:.2f} s (target < {r['target_refine_s']:.0f} s, M now {r['k_after'][0]}.."
              f"{r['k_after'][1]}); re-chunk with errors and classes {r['rechunk_ms']:.2f} ms "
              f"(target < {r['target_rechunk_ms']:.0f} ms)")
        print(f"          determined step cells at z=2: {100 * r['determined_before']:.0f} % "
              f"at M={r['continuations']}, "
              f"{100 * r['determined_after']:.0f} % after one refinement; ode estimator {r['ode_s']:.2f} s, "
              f"x0 estimator {r['x0_s']:.2f} s")
    if which in ("train", "all"):
        bench_train()
