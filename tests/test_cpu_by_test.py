"""scripts/cpu_by_test.py: py-spy's raw stacks read back into CPU by test, by process kind and by imported package."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "cpu_by_test.py"

WORKER = 'process 10:"python -u -c import sys;exec(eval(sys.stdin.readline()))"'  # the xdist worker: a ';' inside
RAW = "\n".join([
    f'process 1:"bash scripts/test.sh";{WORKER};pytest_runtest_call (_pytest/runner.py:184);'
    "test_adds (test_maths.py:12);add (workbench/maths.py:3) 30",
    f'process 1:"bash";{WORKER};pytest_runtest_setup (_pytest/runner.py:160);served (test_browser.py:50);'
    "_find_and_load (<frozen importlib._bootstrap>:1176);<module> (diffusers/__init__.py:1);"
    "_find_and_load (<frozen importlib._bootstrap>:1176);<module> (torch/_dynamo/__init__.py:3) 20",
    f'process 1:"bash";{WORKER};Thread.run (threading.py:982);call (workbench/ui/guard.py:175) 10',
    f'process 1:"bash";{WORKER};Thread.run (threading.py:982);EpollSelector.select (selectors.py:468) 500',
    'process 1:"bash";process 12:"python -c \nBLOCK = 31457280\nimport torch";<module> (<string>:3) 5',
    'process 1:"bash";process 13:"python -m ipykernel_launcher -f k.json";run_cell (ipykernel/kernel.py:9) 15',
]) + "\n"


@pytest.fixture(scope="module")
def script():
    sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location(SCRIPT.stem, SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    sys.path.remove(str(SCRIPT.parent))


def test_stacks_split_at_process_frames_and_blocking_waits_are_dropped(script):
    samples = script.read_samples(RAW)
    assert [count for _, _, count in samples] == [30, 20, 10, 5, 15]  # the epoll wait (500) is not CPU
    assert samples[0][1] == "python -u -c import sys;exec(eval(sys.stdin.readline()))"  # its ';' kept
    assert samples[3][1] == "python -c BLOCK = 31457280 import torch"  # a command line over several lines


def test_cpu_goes_to_tests_fixtures_servers_and_imported_packages(script):
    result = script.tables(script.read_samples(RAW), rate=10, top=10)
    assert result["sampled_s"] == pytest.approx(8.0)
    assert result["by_test"]["test_maths.py: test_adds (call)"] == pytest.approx(3.0)
    assert result["by_test"]["test_browser.py: served (setup)"] == pytest.approx(2.0)
    assert result["by_test"]["xdist workers: the browser tests' app servers: handlers"] == pytest.approx(1.0)
    assert result["by_file"]["notebook kernels"] == pytest.approx(1.5)
    assert result["by_kind"] == pytest.approx({"xdist workers": 6.0, "notebook kernels": 1.5, "other python": 0.5})
    assert result["imports_s"] == pytest.approx(2.0) and result["imports_by_package"] == {"torch": pytest.approx(2.0)}
