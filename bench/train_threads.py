"""Benchmark training next to a competing process: seconds per iteration quiet and with one busy neighbour.

    python bench/train_threads.py [--iterations 4] [--no-old] [--json FILE]

Each case is a fresh `bench/train_speed.py` process (OpenMP reads its wait policy when torch loads):

- quiet, auto:        the training default (threads from the free cores, OpenMP threads that spin briefly and
                      then sleep: `PASSIVE_WAIT`);
- busy, auto:         the same next to one single-threaded process that computes all the time;
- quiet, 2 spinning:  the old default (as many threads as cores, OpenMP threads spinning while they wait);
- busy, 2 spinning:   the old default next to the busy process (the 28x collapse of issue 24).

Target: busy/quiet <= 2 for the auto policy. Prints figures; no asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from workbench.core.threads import PASSIVE_WAIT, cpu_count

TARGET_SLOWDOWN = 2.0
BUSY = "while True: pass"  # one single-threaded competing load
CASES = (("quiet", "auto", "PASSIVE"), ("busy", "auto", "PASSIVE"),
         ("quiet", "cores", "ACTIVE"), ("busy", "cores", "ACTIVE"))


def run_case(load: str, threads: str, wait: str, iterations: int, timeout: float) -> dict:
    """One bench/train_speed.py process under `load` ('quiet' or 'busy'); its figures, or {'timed_out': True}."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(PASSIVE_WAIT if wait == "PASSIVE" else {"OMP_WAIT_POLICY": wait})
    neighbour = subprocess.Popen([sys.executable, "-c", BUSY]) if load == "busy" else None
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "figures.json"
        argv = [sys.executable, str(Path(__file__).with_name("train_speed.py")), "--iterations", str(iterations),
                "--threads", str(cpu_count()) if threads == "cores" else threads, "--json", str(out)]
        try:
            subprocess.run(argv, env=env, check=True, timeout=timeout, stdout=subprocess.DEVNULL)
            figures = json.loads(out.read_text())
        except subprocess.TimeoutExpired:
            figures = {"timed_out": True, "seconds_per_iteration": None}
        finally:
            if neighbour is not None:
                neighbour.kill()
                neighbour.wait()
    return {**figures, "load": load, "policy": threads, "wait": wait}  # figures["threads"]: those it used


def bench_threads(iterations: int = 4, timeout: float = 300.0, old: bool = True) -> dict:
    """The cases above (the old default's only when `old`), and the auto policy's busy/quiet slowdown."""
    cases = []
    for case in (c for c in CASES if old or c[1] == "auto"):
        print(f"  running: {' '.join(case)} ...", flush=True)
        cases.append(run_case(*case, iterations, timeout))
    per = {f"{c['load']}_{c['policy']}": c["seconds_per_iteration"] for c in cases}
    slow = per["busy_auto"] / per["quiet_auto"] if per.get("busy_auto") and per.get("quiet_auto") else None
    return {"cores": cpu_count(), "cases": cases, "seconds_per_iteration": per, "slowdown_auto": slow,
            "target_slowdown": TARGET_SLOWDOWN}


def report(r: dict) -> None:
    print(f"training next to one busy single-threaded process, {r['cores']} cores (median s per iteration)")
    for c in r["cases"]:
        s = c["seconds_per_iteration"]
        used = "/".join(map(str, c.get("threads", []))) if isinstance(c.get("threads"), list) else ""
        label = "auto" if c["policy"] == "auto" else f"{r['cores']} threads"
        print(f"  {c['load']:5s} {label:10s} OpenMP {c['wait'].lower():7s} "
              + ("timed out" if s is None else f"{s:6.2f} s") + (f"  (threads used {used})" if used else ""))
    slow = r["slowdown_auto"]
    print("  auto policy busy / quiet: " + ("n/a" if slow is None else f"{slow:.2f}x")
          + f"   (target <= {r['target_slowdown']:.0f}x)")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python bench/train_threads.py", description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=4, help="iterations per case; the first is a warm-up")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds before a case counts as timed out")
    p.add_argument("--no-old", dest="old", action="store_false", help="skip the old default's two cases")
    p.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    r = bench_threads(args.iterations, args.timeout, args.old)
    report(r)
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=1))


if __name__ == "__main__":
    main()
