"""How fast this machine runs Python right now: seconds for a fixed loop (median of 5), standard library only.

This machine class's speed moves by up to ~2x between minutes and hours (the same code's fresh-clone `make test`
took 278-563 s within one day), so a timed figure is read beside this probe taken around it
(`scripts/bench_tests.sh` records one before and one after its run; docs/performance.md shows them).
    python3 scripts/speed_probe.py        # prints seconds, e.g. 0.158
"""

from __future__ import annotations

import statistics
import time


def loop_seconds(n: int = 2_000_000) -> float:
    """Seconds for `n` additions in a Python loop (interpreted code, as most of the test suite's CPU is)."""
    start = time.perf_counter()
    total = 0
    for i in range(n):
        total += i
    return time.perf_counter() - start


def probe(repeats: int = 5) -> float:
    """The median of `repeats` loops, scaled to 3,000,000 additions."""
    return statistics.median(loop_seconds() for _ in range(repeats)) * 1.5


if __name__ == "__main__":
    print(f"{probe():.3f}")
