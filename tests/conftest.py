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


@pytest.fixture(scope="module")
def group(random_policy):
    """A group of 4 trajectories of 5 steps of the random policy on support.PROMPT (seed 1)."""
    from support import PROMPT

    from workbench.flow.sampler import sample_group
    from workbench.flow.trajectory import SamplingConfig

    return sample_group(random_policy, PROMPT, SamplingConfig(group=4, steps=5, seed=1))


@pytest.fixture(scope="session")
def shipped_policy():
    """The shipped embedded weights."""
    from workbench.models.embedded import EmbeddedPolicy

    return EmbeddedPolicy.load()


# The tiny model and the app's state several test files share (module scope: each file builds its own).
@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A random-init embedded model (seed 0) saved to a folder."""
    from workbench.models.embedded import build_embedded, save_embedded

    return save_embedded(build_embedded(seed=0), tmp_path_factory.mktemp("model"))


@pytest.fixture(scope="module")
def sd3_dir(tmp_path_factory):
    """A tiny random-weight SD3 pipeline folder (32 px), built from config as diffusers' own tests do."""
    from tiny_pipelines import save_tiny_sd3

    return save_tiny_sd3(tmp_path_factory.mktemp("sd3"))


@pytest.fixture(scope="module")
def flux_dir(tmp_path_factory):
    """A tiny random-weight FLUX pipeline folder (128 px)."""
    from tiny_pipelines import save_tiny_flux

    return save_tiny_flux(tmp_path_factory.mktemp("flux"))


@pytest.fixture(scope="module")
def wb(model_dir, tmp_path_factory):
    """The app's Workbench on that model, its runs in a fresh folder."""
    from workbench.ui.workbench import Workbench

    return Workbench(model=str(model_dir), device="cpu", runs_root=str(tmp_path_factory.mktemp("runs")),
                     curve_prompts=2)


@pytest.fixture(scope="module")
def sampled(wb):
    """A session holding a G=3, T=4 group and its credit (M=2)."""
    from support import PROMPT

    from workbench.ui import handlers as h
    from workbench.ui.state import Session

    session = h.generate(wb, PROMPT, 3, 4, 0.7, 0, "adherence", Session())[-2]
    return h.attribute(wb, 2, session)[-2]


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    """pytest-playwright's chromium: Debian's (tests/browser_support.py), never a downloaded one."""
    from browser_support import CHROMIUM

    return {**browser_type_launch_args, "executable_path": str(CHROMIUM),
            "args": ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                     "--disable-component-update", "--no-first-run"]}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(address, Workbench) of the app on a random-init tiny model, served on a free port; its fine-tunes are the
    real `workbench train`."""
    import sys

    from app_support import free_port
    from browser_support import ARTIFACTS

    from workbench.models.embedded import build_embedded, save_embedded
    from workbench.ui.launch import launch_options
    from workbench.ui.layout import build_app
    from workbench.ui.workbench import Workbench

    model = save_embedded(build_embedded(seed=0), tmp_path_factory.mktemp("model"))
    command = [sys.executable, "-m", "workbench", "train", "--eval-prompts", "0", "--prompts-per-iteration", "1"]
    wb = Workbench(model=str(model), device="cpu", runs_root=str(tmp_path_factory.mktemp("runs")),
                   train_command=command, curve_prompts=2)
    demo = build_app(wb)
    port = free_port()
    demo.queue().launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True,
                        **launch_options())
    ARTIFACTS.mkdir(exist_ok=True)
    yield f"http://127.0.0.1:{port}/", wb
    wb.jobs.shutdown()
    demo.close()


@pytest.fixture(scope="module")
def url(served):
    return served[0]


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


# The fast tier (`make check`: `-m "not slow and not browser and not integration"`) runs the maths and the library.
# These files are left to the full suite (`make test`, CI): they start the app or its server, a browser, notebook
# kernels, a wheel install, torchrun, the command line or the memory probe in other processes. A new test file is in
# the fast tier unless it is named here (or marked slow or browser).
INTEGRATION_FILES = {
    "test_app_client.py", "test_app_handlers.py", "test_app_objectives.py", "test_app_policies.py",
    "test_app_step_advantages.py", "test_share.py", "test_glossary.py", "test_hostile.py", "test_cli.py",
    "test_memory.py", "test_memory_release.py", "test_switches.py", "test_distributed.py", "test_packaging.py",
    "test_notebooks.py", "test_notebook_widgets.py", "test_notebook_waits.py",
}


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by the marks
def pytest_collection_modifyitems(config, items):
    """Mark the integration files' tests `integration` (INTEGRATION_FILES), and order the collected tests by file,
    the longest files first (FILE_SECONDS); a stable sort keeps each file's own order and the rest in collection
    order. Under mutmut (which sets MUTANT_UNDER_TEST and stops at the first failure) the other way round: the
    cheapest files first, so that a killed mutant stops early."""
    for item in items:
        if item.path.name in INTEGRATION_FILES or item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.integration)
    root, sign = config.rootpath, 1 if "MUTANT_UNDER_TEST" in os.environ else -1
    items.sort(key=lambda item: sign * FILE_SECONDS.get(item.path.relative_to(root).as_posix(), 0))


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
        from browser_support import ARTIFACTS, snap

        (ARTIFACTS / "failures").mkdir(parents=True, exist_ok=True)
        try:
            snap(page, "failures/" + re.sub(r"[^\w.-]+", "_", item.nodeid.removeprefix("tests/"))[:150])
        except Exception as err:  # noqa: BLE001 - a page too broken to draw: the report says so, the test's failure stands
            report.sections.append(("failure screenshot", f"not taken: {err}"))
    return report
