"""`workbench bench`: how fast the workbench runs on this machine, printed against the project's targets (no
assertions: read the numbers).

    workbench bench sampling   # recording trajectories vs a plain diffusers Euler loop
    workbench bench credit     # Monte-Carlo credit, one refinement and re-chunking
    workbench bench train      # seconds per fine-tuning iteration of the default config
    workbench bench load       # loading the shipped weights
    workbench bench [all] [--json FILE]   # each of them; --json writes the figures to one file

The project's own benchmarks (the browser's latencies, training next to a busy process, the trainer's overhead over
raw compute, `make test` on a fresh clone) live in bench/ of the repository; bench/all.py gathers them all for
docs/performance.md.
"""

from __future__ import annotations

import copy
import statistics
import sys
import time
from pathlib import Path

import torch

from workbench.core.threads import ThreadGovernor, cpu_count, threads_for
from workbench.flow.trajectory import SamplingConfig

PROMPT = "a large red circle in the top left on a white background"


def machine() -> str:
    """CPU model, memory and system of this machine (from /proc where there is one): a figure means little without
    it, and this machine class comes with two processors about 2x apart (docs/performance.md)."""
    import platform

    cpu, memory = platform.processor() or platform.machine(), ""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
        kb = int(next(line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines()
                      if line.startswith("MemTotal")))
        memory = f", {kb / 2**20:.0f} GiB memory"
    except (OSError, StopIteration, ValueError):
        pass
    return f"{cpu}{memory}, {platform.system()} {platform.release()}"


def _progress(label: str, done: int, total: int) -> None:
    """One progress line on stderr, rewritten in place (the figures go to stdout)."""
    print(f"\r{label}: {done}/{total}", end="\n" if done == total else "", file=sys.stderr, flush=True)


def _timed(fn, repeats: int, label: str = "timing") -> float:
    """Median wall time of fn() over `repeats` runs after one warm-up run."""
    fn()
    times = []
    for i in range(repeats):
        _progress(label, i, repeats)
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    _progress(label, repeats, repeats)
    return statistics.median(times)


def _page_faults(fn) -> int | None:
    """Minor page faults of one fn() call (fresh pages mapped in); None where the OS does not count them."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    fn()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def _timed_pair(a, b, repeats: int, label: str = "timing") -> tuple[list[float], list[float]]:
    """Wall times of a() and b(), run alternately so that machine load hits both alike (after one warm-up), each
    first in every other pair, so that whatever one leaves behind for the next (caches, freed memory) weighs on
    both alike."""
    a(), b()
    ta, tb = [], []
    for i in range(repeats):
        _progress(label, i, repeats)
        for fn, times in ((a, ta), (b, tb))[:: 1 if i % 2 == 0 else -1]:
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    _progress(label, repeats, repeats)
    return ta, tb


@torch.no_grad()
def plain_euler(policy, group: int, steps: int) -> torch.Tensor:
    """`group` images of PROMPT with diffusers' Euler scheduler and nothing recorded: the baseline of the sampling
    figures. Returns the images (G, 3, H, W) on the CPU, where a caller reads them (on a GPU: the wait for them)."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    sched = FlowMatchEulerDiscreteScheduler(shift=policy.default_shift)
    sched.set_timesteps(steps)
    cond = policy.encode([PROMPT]).repeat(group)
    x = torch.randn(group, *policy.latent_shape, device=policy.device)  # on the model's device, as sampling's
    sigmas = sched.sigmas.to(policy.device)
    for i, t in enumerate(sched.timesteps):
        v = policy.denoise(x, sigmas[i].expand(group), cond.embeds, cond.pooled)
        x = sched.step(v, t, x).prev_sample
    return policy.decode(x).cpu()


def _constant_velocity(x: torch.Tensor, sigma, embeds, pooled) -> torch.Tensor:
    """A stand-in for the transformer that costs nothing: v = 0."""
    return torch.zeros_like(x)


def bench_sampling(policy, group: int = 16, steps: int = 16, repeats: int = 21) -> dict:
    """Trajectories per second: our recording SDE sampler vs a plain Euler loop with diffusers' scheduler.

    The overhead of each alternating pair moves by several points with the machine's load (docs/performance.md),
    so the loops also run with the transformer replaced by v = 0 (`_constant_velocity`): what is left of their
    difference is the recorder's own work (noise draws, the step's log-prob, the stored states), per step and as a
    share of the plain loop's time with the model, a figure the load moves far less.
    """
    from workbench.flow.sampler import sample_group

    config = SamplingConfig(group=group, steps=steps)

    def loops(sampler):
        return (lambda: sample_group(sampler, PROMPT, config)), (lambda: plain_euler(sampler, group, steps))

    recs, plains = _timed_pair(*loops(policy), repeats, f"sampling G={group} T={steps}, repeats")
    t_rec, t_plain = statistics.median(recs), statistics.median(plains)
    pairs = sorted(r / p - 1 for r, p in zip(recs, plains))  # the overhead of each alternating pair
    # Both loops again without the transformer, on a shallow copy: the policy itself is never touched (an
    # instance attribute left on it would follow it into every `with_transformer` copy, bound to the old weights).
    bare = copy.copy(policy)
    bare.denoise = _constant_velocity
    bare_rec, bare_plain = _timed_pair(*loops(bare), 5 * repeats, "sampling without the model, repeats")
    own = statistics.median(bare_rec) - statistics.median(bare_plain)  # seconds the recorder adds per group
    return {"group": group, "steps": steps, "repeats": repeats, "recorded_traj_per_s": group / t_rec,
            "plain_traj_per_s": group / t_plain, "overhead": statistics.median(pairs),
            "overhead_quartiles": (pairs[len(pairs) // 4], pairs[(3 * len(pairs)) // 4]), "target_overhead": 0.05,
            "order": "alternating",  # each first in every other pair (`_timed_pair`); before 53fc09e: recorded first
            "recorder_ms_per_step": 1000 * own / steps, "recorder_share": own / t_plain,
            "pair_overheads": pairs}  # every pair's, sorted: scripts/performance_report.py pools several runs


def bench_credit(policy, group: int = 8, steps: int = 16, continuations: int = 4, repeats: int = 2) -> dict:
    """Seconds for the default credit measurement and one refinement pass, milliseconds to re-chunk with
    errors and classes, and the share of determined step cells before and after the refinement."""
    from workbench.flow.sampler import sample_group
    from workbench.rewards import build_reward, default_reward
    from workbench.rl.credit import measure_credit, refine

    reward = build_reward(default_reward(policy.toy_world))
    g = sample_group(policy, PROMPT, SamplingConfig(group=group, steps=steps))
    holder = {}

    def credit():
        holder["c"] = measure_credit(policy, g, reward, continuations=continuations, chunks=f"{steps}")

    t_credit = _timed(credit, repeats, f"credit G={group} T={steps} M={continuations}, repeats")
    faults = _page_faults(credit)  # fresh pages the allocator asked for (core/heap.py: reuse_freed_memory)
    budget = group * (steps - 1) * continuations  # the default measurement's continuations (the app's default)
    start = time.perf_counter()
    refined = refine(holder["c"], policy, g, reward, budget)
    t_refine = time.perf_counter() - start
    specs = ["2,3,4,7", "4,4,4,4", "1" + ",1" * (steps - 1), f"{steps}"] if steps == 16 else [f"{steps}"]

    def rechunk():
        for spec in specs:
            c = refined.rechunk(spec)
            c.rates(), c.chunk_classes()

    t_rechunk = _timed(rechunk, 5, "re-chunk, repeats") / len(specs)
    odes = {name: measure_credit(policy, g, reward, chunks=f"{steps}", estimator=name).cost["seconds"]
            for name in ("ode", "x0")}
    return {"group": group, "steps": steps, "continuations": continuations, "credit_s": t_credit,
            "precision": holder["c"].precision, "credit_page_faults": faults,
            "target_credit_s": 10.0,
            "budget": budget, "refine_s": t_refine, "target_refine_s": 20.0,
            "rechunk_ms": 1000 * t_rechunk, "target_rechunk_ms": 10.0,
            "determined_before": holder["c"].rates().step.determined,
            "determined_after": refined.rates().step.determined,
            "k_after": (int(refined.counts.min()), int(refined.counts.max())), "ode_s": odes["ode"], "x0_s": odes["x0"]}


def bench_load(repeats: int = 3) -> dict:
    """Seconds to load the shipped embedded weights (target < 2 s)."""
    from workbench.models.embedded import load_embedded

    return {"load_s": _timed(load_embedded, repeats), "target_load_s": 2.0}


def bench_train(iterations: int = 4) -> dict:
    """Seconds per iteration of the default fine-tune (`TrainConfig()`: chunk_grpo on the embedded model, 4 prompts
    x G=8, T=16) without evaluations, samples or checkpoints: the median after a warm-up iteration (target < 3 s
    on 2 cores)."""
    from workbench.models.embedded import EmbeddedPolicy
    from workbench.train import TrainConfig, Trainer

    config = TrainConfig(iterations=iterations, eval_prompts=0, sample_every=10**6, checkpoint_every=10**6,
                         report_to="none")
    seconds, last = [], [time.perf_counter()]

    def on_event(event) -> None:
        if event.kind == "iteration" and event.iteration > 0:
            seconds.append(time.perf_counter() - last[0])
            _progress("train, iterations", len(seconds), iterations)
        last[0] = time.perf_counter()

    Trainer(config, None, EmbeddedPolicy.load()).run(callback=on_event)
    return {"iterations": iterations, "prompts": config.prompts_per_iteration, "group": config.group,
            "steps": config.steps, "seconds_per_iteration": statistics.median(seconds[1:] or seconds),
            "target_seconds": 3.0}


BENCHMARKS = ("load", "sampling", "credit", "train")


def run(which: str | tuple[str, ...], policy, json_path: str | None = None, group: int | None = None,
        steps: int = 16, continuations: int = 4, repeats: int | None = None) -> dict:
    """Run the benchmarks `which` names and print their figures (sizes default to each benchmark's own: G 16
    sampling, G 8 credit, T 16); `which` is one of BENCHMARKS, "all", or several names. With json_path also write
    the figures to one file."""
    import json

    selected = BENCHMARKS if which == "all" else (which,) if isinstance(which, str) else which

    others = ThreadGovernor.others_busy(0.5)  # never oversubscribe: take only the cores other processes leave
    torch.set_num_threads(threads_for(cpu_count(), others))
    figures = {"torch": torch.__version__, "threads": torch.get_num_threads(), "cores": cpu_count(),
               "others_busy_cores": others, "machine": machine(), "date": time.strftime("%Y-%m-%d")}
    print(f"{figures['machine']}; torch {torch.__version__}, {torch.get_num_threads()} threads ({cpu_count()} cores, "
          f"{others:.1f} kept busy by other processes)")
    if "load" in selected:
        r = figures["load"] = bench_load()
        print(f"load      embedded weights: {r['load_s']:.2f} s (target < {r['target_load_s']:.0f} s)")
    if "sampling" in selected:
        r = figures["sampling"] = bench_sampling(policy, group or 16, steps, repeats or 21)
        print(f"sampling  G={r['group']} T={r['steps']}: recorded {r['recorded_traj_per_s']:.1f} traj/s, "
              f"plain diffusers Euler {r['plain_traj_per_s']:.1f} traj/s, recording overhead "
              f"{100 * r['overhead']:+.1f} % (median of {r['repeats']} alternating pairs, quartiles "
              f"{100 * r['overhead_quartiles'][0]:+.1f} / {100 * r['overhead_quartiles'][1]:+.1f} %; "
              f"target <= {100 * r['target_overhead']:.0f} %); the recorder's own work without the model "
              f"{r['recorder_ms_per_step']:.2f} ms per step, {100 * r['recorder_share']:.1f} % of the plain loop")
    if "credit" in selected:
        r = figures["credit"] = bench_credit(policy, group or 8, steps, continuations, repeats or 2)
        print(f"credit    G={r['group']} T={r['steps']} M={r['continuations']}: {r['credit_s']:.2f} s in "
              f"{r['precision']}, {r['credit_page_faults']} page faults "
              f"(target < {r['target_credit_s']:.0f} s); one refinement of {r['budget']} continuations "
              f"{r['refine_s']:.2f} s (target < {r['target_refine_s']:.0f} s, M now {r['k_after'][0]}.."
              f"{r['k_after'][1]}); re-chunk with errors and classes {r['rechunk_ms']:.2f} ms "
              f"(target < {r['target_rechunk_ms']:.0f} ms)")
        print(f"          determined step cells at z=2: {100 * r['determined_before']:.0f} % "
              f"at M={r['continuations']}, "
              f"{100 * r['determined_after']:.0f} % after one refinement; ode estimator {r['ode_s']:.2f} s, "
              f"x0 estimator {r['x0_s']:.2f} s")
    if "train" in selected:
        r = figures["train"] = bench_train()
        print(f"train     {r['prompts']} prompts x G={r['group']}, T={r['steps']}: {r['seconds_per_iteration']:.2f} s "
              f"per iteration (target < {r['target_seconds']:.0f} s on 2 cores)")
    if json_path:
        Path(json_path).write_text(json.dumps(figures, indent=1, default=str))
        print(f"figures written to {json_path}")
    return figures
