"""Shared fixtures: tiny real parts on CPU with fixed seeds (STYLE.md point 10)."""

from __future__ import annotations

import os
import re

import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def pytest_configure(config):
    """The allocator and thread settings of a process that runs tests. Not in pytest-xdist's controller, which
    runs none: it starts the workers only once this file is loaded, and torch's import held them back ~1.5 s."""
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        return
    from workbench.core.heap import defer_collection, reuse_freed_memory

    defer_collection()  # until the test files are imported (pytest_collection_finish), as the CLI starts up
    import torch
    from notebook_waits import install

    install()  # nbmake's notebook runs wait on each reply a second at a time: a missed wake-up cost 300 s twice

    reuse_freed_memory()  # the allocator settings of the app, the CLI and the trainer (workbench/core/heap.py)
    # Under pytest-xdist (scripts/test.sh) the workers share the cores: one thread each on a 2-core machine.
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    torch.set_num_threads(max(1, min(2, torch.get_num_threads()) // workers))
    if workers > 1:  # the app (`Workbench.share_cores`) and the commands tests start read it: never oversubscribe
        os.environ.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))


def pytest_collection_finish(session):
    """The imports' garbage collected once, and what they made frozen out of later collections (core/heap.py)."""
    from workbench.core.heap import end_start_up

    end_start_up()


_FROZEN_AT = [None]  # the test file whose start last froze the heap


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """At the start of each test file, before its fixtures: collect, and freeze what outlives the file before it
    (modules it imported, session fixtures, caches), so the collections during this file walk only its own objects.
    A worker holds ~1,000,000 objects by the end; walking them all took 0.4-0.5 s per full collection: the full
    collections of the suite's two workers took 28 s, 7.5 s with this and the freeze after collection (timed with
    gc.callbacks, 2026-12-03; Python 3.11's collector)."""
    from workbench.core.heap import settle

    if item.path != _FROZEN_AT[0]:
        _FROZEN_AT[0] = item.path
        settle()


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
    import torch

    threads = torch.get_num_threads()
    yield
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


# Longest files first (longest-processing-time scheduling). scripts/test.sh runs the files on xdist workers in
# collection order (`--no-loadscope-reorder`); xdist's own order, by number of tests, left the few long browser
# files and the notebooks to the end, where one worker ran them while the other idled: 316 s for 558 s of tests
# on 2 workers, 279 s in a replay of the same durations with this order. Seconds measured on 2 workers with
# `--junitxml` (2026-12-02; test_memory scaled by its probe's 74 -> 47 s when its SD3 cases moved to 16 px); a
# stale figure only costs balance, never a test.
FILE_SECONDS = {
    "tests/test_browser_novice.py": 92, "tests/test_browser.py": 78, "tests/test_memory.py": 50,
    "tests/test_distributed.py": 29, "tests/test_hostile.py": 22, "notebooks/03_finetune.ipynb": 22,
    "tests/test_browser_policies.py": 20, "tests/test_real_models.py": 19, "tests/test_switches.py": 11,
    "tests/test_browser_redraw.py": 24, "tests/test_packaging.py": 16, "tests/test_credit.py": 14,
    "tests/test_trainer.py": 14, "notebooks/04_per_step_advantages.ipynb": 12, "tests/test_cli.py": 12,
    "tests/test_app_handlers.py": 11, "notebooks/01_trajectories.ipynb": 11, "notebooks/02_misattribution.ipynb": 11,
    "tests/test_memory_release.py": 10, "tests/test_app_policies.py": 9,
}


def pytest_collection_modifyitems(config, items):
    """Order the collected tests by file, the longest files first (FILE_SECONDS); a stable sort keeps each
    file's own order and the rest in collection order."""
    root = config.rootpath
    items.sort(key=lambda item: -FILE_SECONDS.get(item.path.relative_to(root).as_posix(), 0))


# The browser tests (tests/test_browser*.py). One browser context per test file, a fresh page per test: a page
# load in a context that has loaded the app before takes ~2.4 s of CPU instead of ~3.0 (chromium keeps the
# app's scripts and their compiled code in the context's cache, and the server sends no files again), and a
# test file loads the app 2-9 times. A new page still opens a new Gradio session, so no test sees another's
# group; a test that needs a second visitor opens `browser.new_page()`, a context of its own.
@pytest.fixture(scope="module")
def context(browser, browser_context_args):
    context = browser.new_context(**browser_context_args)
    yield context
    context.close()


@pytest.fixture
def page(context):
    page = context.new_page()
    yield page
    page.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A browser test that fails leaves a full-page screenshot of its page in test-artifacts/failures/. (Once
    pytest-playwright's `--screenshot only-on-failure`, which takes a PNG of every page of every test and keeps
    the failures' only: ~0.25 s of chromium per test.)"""
    report = yield
    page = getattr(item, "funcargs", {}).get("page") if report.when == "call" and report.failed else None
    if page is not None and not page.is_closed():
        from tests.test_browser import ARTIFACTS, snap

        (ARTIFACTS / "failures").mkdir(parents=True, exist_ok=True)
        try:
            snap(page, "failures/" + re.sub(r"[^\w.-]+", "_", item.nodeid.removeprefix("tests/"))[:150])
        except Exception as err:  # noqa: BLE001 - a page too broken to draw: the report says so, the test's failure stands
            report.sections.append(("failure screenshot", f"not taken: {err}"))
    return report
