"""Measured peak memory of one training iteration on the CPU, to check `memory.estimate_memory` against.

    python -m workbench.train.memory_probe CONFIG.json   ->  prints {"peak_bytes": ..., "estimate_bytes": ...}

Runs in its own process (the test and `scripts/calibrate_memory.py` start it), so nothing else lives in the
heap: the peak is Linux's VmHWM (peak resident set) during model load + trainer setup + one iteration, minus
the resident set after the imports. Linux only (/proc/self/status, /proc/self/clear_refs).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path


def _status(key: str) -> int:
    return int(re.search(key + r":\s+(\d+)", Path("/proc/self/status").read_text()).group(1)) * 1024


def peak_of(fn) -> int:
    """Peak resident bytes `fn()` added to the process (VmHWM reset before, current RSS subtracted)."""
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    before = _status("VmRSS")
    fn()
    return _status("VmHWM") - before


def main(argv: list[str]) -> int:
    import torch

    from workbench.core.heap import reuse_freed_memory
    from workbench.train import TrainConfig, Trainer
    from workbench.train.dry_run import estimate_run

    reuse_freed_memory()  # the allocator settings `workbench train` runs with (core/heap.py)
    torch.set_num_threads(1)
    config = TrainConfig.from_dict({**json.loads(Path(argv[0]).read_text()), "iterations": 1, "device": "cpu"})
    estimate = estimate_run(config, "cpu")[0]
    peak = peak_of(lambda: Trainer(config, None).run())
    print(json.dumps({"peak_bytes": peak, "estimate_bytes": estimate.total, "parts": vars(estimate)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
