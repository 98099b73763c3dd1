"""Measured peak memory of one training iteration on the CPU, to check `memory.estimate_memory` against.

    python -m workbench.train.memory_probe CONFIG.json [CONFIG.json ...]
        ->  one line per config: {"peak_bytes": ..., "estimate_bytes": ..., "parts": {...}}

Each config runs in a fresh heap, so nothing else lives in it: a child forked after the imports, which then does
what a process of its own would do (the estimate, then the iteration). The tests start one probe for several
configs and pay the imports once; `scripts/calibrate_memory.py` one per config. The parent allocates nothing
else: under glibc's own settings a freed large block would raise its mmap threshold for every later child and
change its peaks (the probe runs with the trainer's settings, `core/heap.py`, which fix the threshold). The
peak is Linux's VmHWM (peak resident set) during model load + trainer setup + one iteration, minus the resident
set before it. A fork does not copy the mapped-in pages of files (the libraries' code): the child maps the
parent's back in first, so its resident set starts where a process of its own would be (measured: the same peaks
as separate processes, within their run-to-run spread). Linux only (/proc, fork).
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import struct
import sys
import traceback
from pathlib import Path

MADV_POPULATE_READ = 22  # Linux >= 5.14: map the pages of a range in, as a read of each would


def _status(key: str) -> int:
    return int(re.search(key + r":\s+(\d+)", Path("/proc/self/status").read_text()).group(1)) * 1024


def peak_of(fn) -> int:
    """Peak resident bytes `fn()` added to the process (VmHWM reset before, current RSS subtracted)."""
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    before = _status("VmRSS")
    fn()
    return _status("VmHWM") - before


def mapped_file_pages() -> list[tuple[int, int]]:
    """(address, length) runs of the file-backed pages mapped into this process (/proc/self/pagemap bit 63).

    Read 4096 entries (32 KB) at a time: a buffer above glibc's 128 KB mmap threshold, once freed, would raise it."""
    page, runs = os.sysconf("SC_PAGE_SIZE"), []
    with open("/proc/self/maps") as maps, open("/proc/self/pagemap", "rb", buffering=0) as pagemap:
        for line in maps:  # "start-end perms offset dev inode path"
            fields = line.split()
            if len(fields) < 6 or not fields[5].startswith("/") or "r" not in fields[1]:
                continue
            low, high = (int(x, 16) for x in fields[0].split("-"))
            start = None
            for first in range(low // page, high // page, 4096):
                pagemap.seek(first * 8)
                count = min(4096, high // page - first)
                for i, entry in enumerate(struct.unpack(f"{count}Q", pagemap.read(count * 8)), first):
                    if entry >> 63 and start is None:
                        start = i
                    elif not entry >> 63 and start is not None:
                        runs.append((start * page, (i - start) * page))
                        start = None
            if start is not None:
                runs.append((start * page, high - start * page))
    return runs


def in_fresh_child(fn) -> str:
    """`fn()` (a str) computed in a forked child that first maps in this process's file pages; its heap is then
    discarded with it."""
    pages = mapped_file_pages()
    sys.stdout.flush()
    sys.stderr.flush()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child reports through the pipe and never returns into the caller
        os.close(read)
        code = 1
        try:
            madvise = ctypes.CDLL(None, use_errno=True).madvise
            for address, length in pages:
                if madvise(ctypes.c_void_p(address), ctypes.c_size_t(length), MADV_POPULATE_READ) != 0:
                    for offset in range(0, length, os.sysconf("SC_PAGE_SIZE")):  # an older kernel: read each page
                        ctypes.string_at(address + offset, 1)
            os.write(write, fn().encode())
            code = 0
        except BaseException:  # noqa: BLE001 - the traceback goes to stderr, the parent raises
            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        value = pipe.read()
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if code != 0 or not value:
        raise RuntimeError(f"the measured iteration failed in its process (exit code {code}; its error is above)")
    return value


def measure(config) -> str:
    """The JSON line of one config: its plan's estimate (and the sizes it is computed from, so that other constants
    can be tried on the same measurement), then the peak of one iteration."""
    from dataclasses import asdict

    from workbench.train import Trainer
    from workbench.train.dry_run import plan_run

    plan = plan_run(config, "cpu", 1)
    peak = peak_of(lambda: Trainer(config, None).run())
    return json.dumps({"peak_bytes": peak, "estimate_bytes": plan.estimate.total, "parts": vars(plan.estimate),
                       "model_sizes": asdict(plan.sizes[0]), "run_sizes": asdict(plan.sizes[1])})


def main(argv: list[str]) -> int:
    from workbench.core.heap import defer_collection, reuse_freed_memory, settle

    reuse_freed_memory()  # the allocator settings `workbench train` runs with (core/heap.py); children inherit them
    defer_collection()  # and its collector's: none during the imports, ...
    import diffusers.models.transformers  # noqa: F401 - what every estimate imports (`dry_run`), once for all
    import torch

    from workbench.train import TrainConfig

    settle()  # ... then the imports' garbage collected and the rest frozen, before the forks share it
    torch.set_num_threads(1)  # before the forks: a child inherits no OpenMP pool
    for path in argv:
        config = TrainConfig.from_dict({**json.loads(Path(path).read_text()), "iterations": 1, "device": "cpu"})
        print(in_fresh_child(lambda config=config: measure(config)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
