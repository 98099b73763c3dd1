"""The machinery of scripts/mutation_check.py: a scratch copy of the repository, the third-party imports done
once, and one forked pytest run per mutant (traced once per module to learn which test runs which line)."""

from __future__ import annotations

import ast
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRATCH = Path("/tmp/mut")


def make_scratch(module: str, root: Path = SCRATCH) -> Path:
    """A copy of the repository's files (tracked and untracked, not ignored) under /tmp/mut/<module>."""
    dest = root / module.replace("/", "_").removesuffix(".py")
    shutil.rmtree(dest, ignore_errors=True)
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split()
    for name in files:
        if name.startswith(("workbench/", "tests/", "docs/", "scripts/", "notebooks/")) or "/" not in name:
            if (ROOT / name).is_file():
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, dest / name)
    return dest


def _preload(tests: list[Path]) -> None:
    """Import what the tests and the workbench import (lazy attributes too), then forget the workbench itself."""
    for test in tests:
        for node in ast.walk(ast.parse(test.read_text())):
            if isinstance(node, ast.Import):
                pairs = [(a.name, None) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                pairs = [(node.module, a.name) for a in node.names]
            else:
                continue
            for module, name in pairs:
                try:
                    getattr(importlib.import_module(module), name or "__name__")
                except Exception:  # noqa: BLE001 - an import that fails here fails in the test too
                    pass
    for name in [m for m in sys.modules if m.split(".")[0] in ("workbench", "conftest", "tests")
                 or m.startswith("test_")]:
        del sys.modules[name]


class LineTracer:
    """pytest plugin for the baseline run: which lines of the target file each test runs, and its duration."""

    def __init__(self, target: Path):
        self.target = str(target)
        self.lines: dict[str, set[int]] = {}
        self.seconds: dict[str, float] = {}
        self._now: set[int] = set()

    def _trace(self, frame, event, arg):
        if frame.f_code.co_filename != self.target:
            return None
        self._now.add(frame.f_lineno)
        return self._local

    def _local(self, frame, event, arg):
        self._now.add(frame.f_lineno)
        return self._local

    def pytest_runtest_protocol(self, item):
        import threading
        self._now = set()
        sys.settrace(self._trace)
        threading.settrace(self._trace)

    def pytest_runtest_logfinish(self, nodeid):
        import threading
        sys.settrace(None)
        threading.settrace(None)
        self.lines[nodeid] = self._now

    def pytest_runtest_logreport(self, report):
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration


def run_child(args: list[str], timeout: float, log: Path, tracer: LineTracer | None = None,
              coverage: Path | None = None) -> tuple[str, float]:
    """Fork; the child runs pytest in-process on `args`. Returns (outcome, seconds)."""
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.setpgid(0, 0)
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        import pytest
        code = pytest.main([*args, "-x", "-q", "-p", "no:cacheprovider", "-p", "hypothesis.extra.pytestplugin",
                            "-p", "pytest_timeout", "--hypothesis-seed=0",
                            f"--timeout={int(timeout)}", "-W", "ignore"], plugins=[tracer] if tracer else [])
        if tracer is not None:
            coverage.write_text(json.dumps({"lines": {k: sorted(v) for k, v in tracer.lines.items()},
                                            "seconds": tracer.seconds}))
        sys.stdout.flush()
        os._exit(int(code))
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        seconds = time.monotonic() - start
        if done:
            code = os.waitstatus_to_exitcode(status)
            return ("survived" if code == 0 else "killed"), seconds
        if seconds > timeout:
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "timeout", seconds
        time.sleep(0.05)
