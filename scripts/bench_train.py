"""Benchmark the trainer: `python scripts/bench_train.py [--iterations 6] [--prompts 2]`.

A thin wrapper over `workbench.cli.bench_train` (also `python -m workbench bench train`).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workbench.cli.bench_train import main

if __name__ == "__main__":
    main()
