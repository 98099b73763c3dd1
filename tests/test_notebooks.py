"""Notebooks are committed without outputs (the suite executes them with nbmake: see scripts/test.sh)."""

import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 3


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_has_no_outputs(path):
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [] and cell.get("execution_count") is None, path.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_uses_the_library(path):
    source = "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")
    assert "from workbench" in source


def test_nbstripout_finds_nothing_to_strip():
    import shutil
    import subprocess
    import sys

    tool = shutil.which("nbstripout") or str(Path(sys.executable).parent / "nbstripout")
    result = subprocess.run([tool, "--verify", *map(str, NOTEBOOKS)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
