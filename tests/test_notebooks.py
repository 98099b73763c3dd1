"""Notebooks are committed without outputs (the suite executes them with nbmake: see scripts/test.sh).

Under nbmake each notebook runs with the smaller settings its parameters cell names in its metadata
(`nbmake.mock`, applied right after that cell; invisible in JupyterLab): every cell still runs, on a smaller
group, so the suite stays within its time (README, "How we test")."""

import ast
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


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_smaller_test_settings_shrink_parameters_the_notebook_has(path):
    first = next(c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")
    source = "".join(first["source"])
    assert source.startswith("# parameters"), f"{path.name}: the first code cell is not the parameters cell"
    defaults = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign):
            names = node.targets[0].elts if isinstance(node.targets[0], ast.Tuple) else node.targets
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            defaults.update({n.id: ast.literal_eval(v) for n, v in zip(names, values)})
    mock = first["metadata"].get("nbmake", {}).get("mock", {})
    assert mock, f"{path.name}: no smaller settings for the suite"
    for name, value in mock.items():
        assert name in defaults, f"{path.name}: the test setting {name} is not a parameter of the notebook"
        assert 0 < value < defaults[name], f"{path.name}: {name}={value} is not smaller than {defaults[name]}"
