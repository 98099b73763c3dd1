"""CPU-seconds of every process that ran during a command, grouped by kind (chromium, the tests' xdist workers,
notebook kernels, the memory probe, other Python, the rest). Linux only: it reads /proc every 0.3 s, so a process
that lives less than that may be missed; a process's figure is its own user + system time (not its children's).

    python3 scripts/cpu_by_process.py [--json OUT.json] -- COMMAND [ARGS ...]
    python3 scripts/cpu_by_process.py -- bash scripts/bench_tests.sh    # where a test run's CPU goes
    python3 scripts/cpu_by_process.py --detail 30 -- bash scripts/test.sh  # and its 30 costliest processes

Used for docs/perf-data/epyc/README.md (chromium-headless-shell against chromium in a whole `make test`).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import time

# The first needle found in a process's command line names its kind; "other" includes the kernel's threads.
KINDS = (("chromium", "chrom"), ("notebook kernels", "ipykernel_launcher"), ("xdist workers", "exec(eval("),
         ("memory probe", "workbench.train.memory_probe"), ("other python", "python"))


def kind(command: str) -> str:
    return next((name for name, needle in KINDS if needle in command), "other")


def sample(seen: dict, tick: float) -> None:
    """Record (cpu seconds, command) of every process now in /proc, keyed by (pid, start time)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        key = (pid, fields[19])  # pid and start time: a reused pid is another process
        old = seen.get(key)
        seen[key] = ((int(fields[11]) + int(fields[12])) / tick, command or (old[1] if old else ""))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="also write the totals to this file")
    parser.add_argument("--detail", type=int, default=0, help="also list the N processes that used the most CPU")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS ...]")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    tick = os.sysconf("SC_CLK_TCK")
    before: dict = {}
    sample(before, tick)  # processes already running: only their CPU during the command counts
    seen: dict = {}
    start = time.time()
    process = subprocess.Popen(command)
    while process.poll() is None:
        sample(seen, tick)
        time.sleep(0.3)
    wall = time.time() - start
    totals, counts, each = collections.Counter(), collections.Counter(), []
    for key, (cpu, cmd) in seen.items():
        if key[0] == str(os.getpid()):  # the sampler itself
            continue
        cpu -= before.get(key, (0.0, ""))[0]
        if cpu > 0:
            totals[kind(cmd)] += cpu
            counts[kind(cmd)] += 1
            each.append((cpu, kind(cmd), cmd))
    for cpu, name, cmd in sorted(each, reverse=True)[:args.detail]:
        print(f"{cpu:7.1f} CPU-s  {name:17s} {cmd[:150]}")
    for name, cpu in totals.most_common():
        print(f"{name:17s} {cpu:7.1f} CPU-s in {counts[name]} processes")
    print(f"{'all':17s} {sum(totals.values()):7.1f} CPU-s over {wall:.0f} s of wall time ({os.cpu_count()} cores); "
          f"command exit {process.returncode}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu_s": dict(totals), "processes": dict(counts), "wall_s": wall, "command": command,
                       "exit": process.returncode}, f, indent=1)
    return process.returncode


if __name__ == "__main__":
    sys.exit(main())
