"""Shared fixtures: tiny real parts on CPU with fixed seeds (STYLE.md point 10)."""

from __future__ import annotations

import os

import pytest
import torch

from workbench.core.heap import reuse_freed_memory

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
reuse_freed_memory()  # the allocator settings of the app, the CLI and the trainer (workbench/core/heap.py)
# Under pytest-xdist (scripts/test.sh) the workers share the cores: one thread each on a 2-core machine.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
torch.set_num_threads(max(1, min(2, torch.get_num_threads()) // WORKERS))
if WORKERS > 1:  # the app (`Workbench.share_cores`) and the commands tests start read it: never oversubscribe
    os.environ.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))


@pytest.fixture(scope="session")
def random_policy():
    """The embedded architecture with random weights (seed 0): fast, and independent of the shipped file."""
    from workbench.models.embedded import EmbeddedPolicy, build_embedded

    model = build_embedded(seed=0)
    model.text_encoder.eval().requires_grad_(False)
    model.transformer.eval()
    return EmbeddedPolicy(model)


@pytest.fixture(scope="session")
def shipped_policy():
    """The shipped embedded weights."""
    from workbench.models.embedded import EmbeddedPolicy

    return EmbeddedPolicy.load()


@pytest.fixture(autouse=True)
def _worker_thread_share():
    """A test that sets torch's threads (`bench`, `train --threads auto`, the app) gives the worker its share
    back: a later test on 2 threads beside the other worker would wait on a parked thread (issue 24)."""
    threads = torch.get_num_threads()
    yield
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
