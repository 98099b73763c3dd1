"""How many CPU threads torch may use on a machine that other processes share.

A learner who starts a fine-tune from the app and keeps exploring other tabs has two processes computing on
the same cores. With torch's default (one OpenMP thread per core, spinning while it waits for work), a
training process that runs 2 threads on 2 cores next to one busy single-threaded process slowed from 1.7 s to
~48 s per iteration (measured on a 2-core machine; docs/performance.md): each parallel region waits for a thread that
the scheduler has parked behind the other process. Two remedies, both here:

- `threads_for`: use only the cores other processes leave free (never fewer than 1), re-measured every
  iteration by `ThreadGovernor` from /proc/stat, so a process that shares cores drops to one thread and takes
  the second back when the other goes quiet;
- `PASSIVE_WAIT`: OpenMP threads that spin only briefly (GOMP_SPINCOUNT 10000) and then sleep while they
  wait, set in the environment before torch loads (`workbench/__init__.py`, and the training processes the app
  starts). Measured with bench/train_threads.py on 2 cores: sleeping at once (spin count 0) cost a quiet iteration
  27 % (2.32 s against 1.83 s spinning); the short spin keeps the quiet speed (1.77 s) and still shares.

The app itself leaves one core to the browser that shows it, except for the batched passes of the credit and of
dense_grpo's look-ahead (`app_threads`).

`python bench/train_threads.py` measures both against a competing single-threaded load.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable

PASSIVE_WAIT = {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "10000"}  # read when torch loads, not after


def cpu_count() -> int:
    """Cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def app_threads(cores: int | None = None, batched: bool = False) -> int:
    """Torch threads of the app's handlers: every core but one, which the browser showing the app needs while
    the app computes (it draws the progress; the app is a page on the same laptop); every core for `batched`
    work: the credit's continuations and dense_grpo's look-ahead (large batched passes, `Workbench.batched_threads`).

    Why (bench/browser.py on 2 cores; figures in docs/performance.md): every core for everything slowed the views
    (credit, Generate and the Objectives tab took 1.2-2x longer on two threads than on one), because an OpenMP team
    waits for its slowest thread and the browser takes a second-core thread's turns. The credit's large batched
    passes gain from the second core all the same (10-20 % faster), hence `batched`."""
    n = cores or cpu_count()
    return n if batched else max(1, n - 1)


def run_threads(threads: int | None) -> int:
    """Fix torch's CPU threads for a fine-tuning run and return the count: `threads`, or torch's count now when None.

    A run keeps its count from start to end, and a resume takes the count its config recorded: with another count
    the same seed gives other numbers (how a CPU kernel splits a sum depends on its threads), so a count chosen from
    the machine's load (`ThreadGovernor`) made a run depend on what else ran beside it."""
    import torch

    count = threads or torch.get_num_threads()
    if torch.get_num_threads() != count:
        torch.set_num_threads(count)
    return count


def threads_for(cores: int, others_busy: float, maximum: int | None = None) -> int:
    """Threads to run: the cores other processes leave free, rounded to the nearest whole core, at least 1.

    threads_for(2, 0.0) == 2; threads_for(2, 1.0) == 1 (one busy neighbour); threads_for(2, 0.3) == 2 (the
    app idling between clicks); threads_for(8, 2.6, maximum=4) == 4.
    """
    free = math.floor(cores - max(others_busy, 0.0) + 0.5)
    return max(1, min(free, maximum or cores))


def _cpu_seconds() -> tuple[float, float] | None:
    """(busy CPU seconds of the whole machine, of this process) so far; None where /proc/stat is missing."""
    try:
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    tick = os.sysconf("SC_CLK_TCK")
    own = os.times()
    return (sum(values[:8]) - idle) / tick, own.user + own.system


class ThreadGovernor:
    """Sets torch's thread count from how busy the other processes were since the last update.

        governor = ThreadGovernor()     # measures from now on
        ... one training iteration ...
        governor.update()               # -> threads for the next iteration (also set in torch)
    """

    def __init__(self, maximum: int | None = None, cores: int | None = None,
                 apply: Callable[[int], None] | None = None):
        import torch

        self.cores, self.maximum = cores or cpu_count(), maximum
        self._apply = apply or torch.set_num_threads
        self.threads = threads_for(self.cores, self.others_busy(0.2), maximum)  # a short look before starting
        self._apply(self.threads)
        self._last = (time.monotonic(), _cpu_seconds())

    @staticmethod
    def others_busy(window_s: float) -> float:
        """Cores other processes kept busy over the next `window_s` seconds (0 where it cannot be measured)."""
        start, t0 = _cpu_seconds(), time.monotonic()
        time.sleep(window_s)
        end = _cpu_seconds()
        if start is None or end is None:
            return 0.0
        return max(0.0, ((end[0] - start[0]) - (end[1] - start[1])) / (time.monotonic() - t0))

    def update(self) -> int:
        """Re-measure the other processes' load since the last update and set the threads (returns them)."""
        now, seconds = time.monotonic(), _cpu_seconds()
        then, before = self._last
        self._last = (now, seconds)
        if seconds is None or before is None or now - then < 0.05:
            return self.threads
        others = ((seconds[0] - before[0]) - (seconds[1] - before[1])) / (now - then)
        threads = threads_for(self.cores, others, self.maximum)
        if threads != self.threads:
            self.threads = threads
            self._apply(threads)
        return threads
