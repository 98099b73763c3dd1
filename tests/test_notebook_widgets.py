"""The notebooks' widgets respond: the checks that used to sit in teaching cells, run here in the same kernel.

Each test executes a notebook as nbmake does, then runs extra cells that move its widget and check what it
shows; the notebook a student reads keeps no test lines."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def run_with(name: str, checks: list[str], tmp_path: Path) -> None:
    """Execute notebooks/<name> in tmp_path, then `checks` as further cells (an assert failing fails the test)."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nb.cells += [nbformat.v4.new_code_cell(code) for code in checks]
    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()


def test_the_chunk_size_slider_rechunks_the_map_and_the_rate(tmp_path):
    run_with("02_misattribution.ipynb", [
        "before = (label.value, fig.layout.title.text, len(fig.layout.shapes))",
        "size.value = 1",
        "assert 'chunks [1, 1, 1' in label.value, label.value\n"
        "assert len(fig.layout.shapes) == STEPS - 1, len(fig.layout.shapes)  # a boundary after every step\n"
        "assert (label.value, len(fig.layout.shapes)) != before[::2]",
        "size.value = STEPS",
        "assert 'chunks [' in label.value and len(fig.layout.shapes) == 0, (label.value, fig.layout.shapes)",
    ], tmp_path)
