"""The notebooks' widgets respond: their code cells run in this process, then the test moves the widgets.

No kernel: each notebook's code cells are exec'd in one namespace (the notebook a student reads is unchanged),
`display` records what it is given, and ipywidgets' observers and click handlers fire synchronously without a
kernel (docs: ipywidgets' `observe`, `Button.click`). A parameter cell's settings are made small before the
cells that use them run, so each notebook costs a few CPU seconds; nbmake runs them at their own settings.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import IPython.display
import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def code_cells(name: str) -> list[str]:
    """The code cells of notebooks/<name>, IPython magics and shell lines left out."""
    cells = json.loads((NOTEBOOKS / name).read_text())["cells"]
    return ["\n".join(line for line in "".join(c["source"]).splitlines() if not line.lstrip().startswith(("%", "!")))
            for c in cells if c["cell_type"] == "code"]


@pytest.fixture
def notebook(monkeypatch, tmp_path):
    """run(name, cells, **settings): exec the first `cells` code cells of a notebook in tmp_path, with the
    parameter cell's `settings` overridden; returns the namespace and the list of objects displayed."""
    shown: list = []
    monkeypatch.setattr(IPython.display, "display", lambda *objs, **_: shown.extend(objs))
    monkeypatch.chdir(tmp_path)

    def run(name: str, cells: int | None = None, **settings) -> tuple[dict, list]:
        first, *rest = code_cells(name)[:cells]
        namespace: dict = {}
        exec(first, namespace)
        unknown = set(settings) - set(namespace)
        assert not unknown, f"{name}'s parameter cell has no {unknown}"
        namespace.update(settings)
        for source in rest:
            exec(source, namespace)
        return namespace, shown

    return run


def test_02_chunk_size_slider_rechunks_the_map_and_the_rate(notebook):
    ns, _ = notebook("02_misattribution.ipynb", GROUP=4, STEPS=6, CONTINUATIONS=2, BUDGET=16)
    size, label, fig = ns["size"], ns["label"], ns["fig"]
    assert size.value == 4 and label.value.startswith("chunks [4, 2]"), label.value
    before = (label.value, fig.layout.title.text, fig.to_dict()["data"])

    size.value = 1
    assert label.value.startswith("chunks [1, 1, 1, 1, 1, 1]"), label.value
    assert len(fig.layout.shapes) == ns["STEPS"] - 1  # a chunk boundary after every step
    assert (label.value, fig.layout.title.text, fig.to_dict()["data"]) != before

    size.value = ns["STEPS"]
    assert label.value.startswith("chunks [6]") and len(fig.layout.shapes) == 0, (label.value, fig.layout.shapes)


def test_03_training_curve_and_rerun_button(notebook, monkeypatch):
    import workbench.train

    # the short run: one iteration of one small group (its cell builds TrainConfig with the defaults otherwise)
    monkeypatch.setattr(workbench.train, "TrainConfig",
                        partial(workbench.train.TrainConfig, group=2, prompts_per_iteration=1, eval_prompts=2))
    # the cells up to the lesson's widgets, not the credit comparison after them
    ns, shown = notebook("03_finetune.ipynb", cells=4, ITERATIONS=1)
    assert ns["fig"].data[0].x == (1,) and len(ns["fig"].data[0].y) == 1  # the trainer's events drew the curve
    button, status, curve = ns["button"], ns["status"], ns["curve"]
    shipped = [list(trace.y) for trace in curve.data]
    statuses: list[str] = []
    status.observe(lambda change: statuses.append(change["new"]), names="value")
    # a one-iteration lesson of one small group stands in for the 80-iteration one: the wiring is what is checked
    ns["preset"] = lambda name: workbench.train.preset(name, iterations=1, eval_every=1, eval_prompts=2,
                                                       sample_every=1, prompts_per_iteration=1, group=2)
    del shown[:]

    button.click()
    assert statuses[0].startswith("training") and statuses[-1].startswith("done"), statuses
    assert any(s.startswith("iteration 1: held-out accuracy") for s in statuses), statuses  # the trainer's events
    assert ns["LESSON_MODEL"] == ns["LESSON_DIR"] and not button.disabled
    captions = [str(obj.data) for obj in shown if isinstance(obj, IPython.display.Markdown)]
    assert len(captions) == 2 and all("your run" in c for c in captions), captions  # Before / Now of the new run
    assert [list(trace.y) for trace in curve.data] != shipped  # the held-out curve of the new run
    assert max(len(trace.y) for trace in curve.data) == 2  # evaluated at iterations 0 and 1
