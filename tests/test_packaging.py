"""The package works when installed as a wheel (not from the checkout): data files ship, nothing reads scripts/."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_an_installed_wheel_runs_the_load_benchmark(tmp_path):
    source = tmp_path / "source"  # a copy: building writes build/ and egg-info beside the sources
    shutil.copytree(ROOT / "workbench", source / "workbench", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(tmp_path / "wheel"), str(source)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-2000:]
    wheel = next((tmp_path / "wheel").glob("*.whl"))
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                              str(tmp_path / "site"), str(wheel)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr[-2000:]
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}  # ahead of the editable install of the checkout
    probe = subprocess.run([sys.executable, "-c", "import workbench; print(workbench.__file__)"], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=60)
    assert probe.stdout.strip().startswith(str(tmp_path / "site")), probe.stdout + probe.stderr
    bench = subprocess.run([sys.executable, "-m", "workbench", "bench", "load"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300)
    assert bench.returncode == 0, bench.stderr[-2000:]
    assert "embedded weights" in bench.stdout and "Traceback" not in bench.stderr


def test_the_figures_import_without_gradio():
    """`workbench.viz` is shared by the app, the notebooks and the exported page: it must not pull in gradio."""
    code = ("import sys; import workbench.viz.plots, workbench.viz.credit_view, workbench.viz.explain_plots; "
            "print('gradio' in sys.modules)")
    probe = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr[-2000:]
    assert probe.stdout.strip() == "False"
