"""The notebooks' widgets respond: their code cells run in this process, then the test moves the widgets.

No kernel: each notebook's code cells are exec'd in one namespace (the notebook a student reads is unchanged),
`display` records what it is given, and so does a cell's last expression (as Jupyter shows it); ipywidgets'
observers and click handlers fire synchronously without a kernel (docs: ipywidgets' `observe`, `Button.click`).
A parameter cell's settings are made small before the cells that use them run, so each notebook costs a few CPU
seconds; nbmake runs them at their own settings.
"""

from __future__ import annotations

import ast
import json
from functools import partial
from pathlib import Path

import IPython.display
import pytest
import torch

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def code_cells(name: str) -> list[str]:
    """The code cells of notebooks/<name>, IPython magics and shell lines left out."""
    cells = json.loads((NOTEBOOKS / name).read_text())["cells"]
    return ["\n".join(line for line in "".join(c["source"]).splitlines() if not line.lstrip().startswith(("%", "!")))
            for c in cells if c["cell_type"] == "code"]


def run_cell(source: str, namespace: dict):
    """exec a cell's source in namespace; the value of its last line when that is an expression (what Jupyter
    shows under the cell), else None."""
    body = ast.parse(source)
    last = body.body.pop() if body.body and isinstance(body.body[-1], ast.Expr) else None
    exec(compile(body, "<cell>", "exec"), namespace)
    return eval(compile(ast.Expression(last.value), "<cell>", "eval"), namespace) if last is not None else None


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
            shown_value = run_cell(source, namespace)
            if shown_value is not None:
                shown.append(shown_value)
        return namespace, shown

    return run


def chunk_maps(shown: list) -> list:
    """The plain plotly figures of chunk credit among what was displayed (what a front-end draws as it is given)."""
    import plotly.graph_objects as go

    return [f for f in shown if type(f) is go.Figure and "Chunk credit" in str(f.layout.title.text)]


def test_02_chunk_size_slider_draws_and_redraws_the_map_and_the_rate(notebook):
    """The slider's map is a plain figure with traces at first and a new one at each move, which a front-end's plotly
    renderer draws as it is given (issue 66 saw the FigureWidget it replaces drawn with 0 traces)."""
    ns, shown = notebook("02_misattribution.ipynb", GROUP=4, STEPS=6, CONTINUATIONS=2, BUDGET=16)
    size, label = ns["size"], ns["label"]
    first = chunk_maps(shown)
    assert size.value == 4 and label.value.startswith("chunks [4, 2]"), label.value
    assert len(first) == 1 and len(first[0].data) > 0 and len(first[0].layout.shapes) == 1, first

    size.value = 1
    drawn = chunk_maps(shown)[1:]
    assert label.value.startswith("chunks [1, 1, 1, 1, 1, 1]"), label.value
    assert len(drawn) == 1 and len(drawn[0].data) > 0, drawn  # redrawn once, with its traces
    assert len(drawn[0].layout.shapes) == ns["STEPS"] - 1  # a chunk boundary after every step
    assert drawn[0].to_dict()["data"] != first[0].to_dict()["data"]

    size.value = ns["STEPS"]
    last = chunk_maps(shown)[-1]
    assert label.value.startswith("chunks [6]") and len(last.layout.shapes) == 0 and len(last.data) > 0


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


def test_01_maps_and_numbers_are_the_objectives_tabs_for_the_same_group(notebook, capsys, tmp_path, monkeypatch):
    """Notebook 01 explains its group as the app's Objectives tab does with its defaults: every objective gets the
    advantages it is trained with (per-step ones for ppo and dense_grpo, not GRPO's A_i), and the printed
    correlations and clipped shares are the tab's table's."""
    import re

    from workbench.rl.explain import CLIP, INNER_LR, INNER_UPDATES
    from workbench.ui import objectives as ob
    from workbench.ui.state import Session
    from workbench.ui.workbench import Workbench

    ns, _ = notebook("01_trajectories.ipynb", GROUP=3, STEPS=4)
    printed = capsys.readouterr().out
    group, sizes = ns["group"], ns["sizes"]
    session = Session().with_group(group, "adherence", ns["rewards"], None).with_sizes(sizes)
    session.credit = ns["credit"]
    # The app computes on the notebook's thread count: ppo's critic is fitted by sums whose last bits depend on it
    # (run alone, the notebook had 2 threads and the app, leaving a core free, 1)
    monkeypatch.setenv("OMP_NUM_THREADS", str(torch.get_num_threads()))
    wb = Workbench(device="cpu", runs_root=str(tmp_path / "runs"))  # the app on the embedded model the notebook uses
    _, table, _, view, status = ob.objectives_compute(wb, INNER_UPDATES, INNER_LR, CLIP, "chunk_grpo", None, session)
    assert status.startswith("✓"), status
    for name in ("ppo", "dense_grpo", "step_grpo", "chunk_grpo"):
        assert torch.equal(ns["advantages"][name], view.advantages[name]), name
    assert ns["advantages"]["ppo"].shape == (3, 4)  # per step: a critic's GAE, not GRPO's A_i on every step
    app_rows = ob.explanations(view, sizes)
    for (_, _, app), (_, _, notebook_ex) in zip(app_rows, ns["rows"]):
        assert torch.equal(app.weight[[app.index(n) for n in notebook_ex.names]], notebook_ex.weight)
    lines = re.findall(r"^\s*(\w+): corr\. with credit (\S+) at ratio 1, (\S+) after the updates; (\d+) % of steps "
                       r"clipped$", printed, flags=re.M)
    assert len(lines) == len(view.advantages), printed
    for name, first, later, clipped in lines:
        row = re.search(rf"^\| {name} \| [^|]+ \| (\d+) % \| (\S+) \| (\S+) \|$", table, flags=re.M)
        assert row and row.groups() == (clipped, first, later), (name, row and row.groups(), table)


NOTEBOOK_WIDTH = 845  # px of a figure in JupyterLab 4 at 1280x800 with the file browser open (measured in chromium)
TITLE_FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"  # chromium's sans-serif on Debian: plotly's fallback


def overlapping_titles(fig, width: int) -> list[tuple[str, str]]:
    """Pairs of annotations on one line of the figure (subplot titles) whose text would overlap at `width` px,
    each line's width measured in DejaVu Sans at the annotation's font size."""
    import re

    from PIL import ImageFont

    margin = fig.layout.margin
    plot = width - (margin.l if margin.l is not None else 80) - (margin.r if margin.r is not None else 80)
    boxes = []
    for a in fig.layout.annotations:
        font = ImageFont.truetype(TITLE_FONT, a.font.size if a.font.size else 12)
        lines = [re.sub(r"<[^>]+>", "", line) for line in re.split(r"<br\s*/?>", a.text or "")]
        boxes.append((a.y, a.x * plot, max(font.getlength(line) for line in lines), a.text))
    return [(t1, t2) for n, (y1, x1, w1, t1) in enumerate(boxes) for y2, x2, w2, t2 in boxes[n + 1:]
            if abs(y1 - y2) < 1e-9 and abs(x1 - x2) < (w1 + w2) / 2]


@pytest.mark.skipif(not Path(TITLE_FONT).is_file(), reason="needs DejaVu Sans to measure titles")
def test_01_subplot_titles_do_not_overlap_in_jupyterlab(notebook):
    _, shown = notebook("01_trajectories.ipynb", cells=8, GROUP=3, STEPS=4)  # up to the objectives' maps
    maps = [f for f in shown if getattr(f, "layout", None) is not None and "objective pushes" in str(f.layout.title)]
    assert len(maps) == 1, [type(f) for f in shown]
    assert overlapping_titles(maps[0], NOTEBOOK_WIDTH) == []


def test_03_an_interrupt_during_the_lesson_re_enables_the_button(notebook, monkeypatch):
    """Kernel > Interrupt raises KeyboardInterrupt inside the training loop: the button comes back, the status
    says so, and the cells below use the shipped result again."""
    import contextlib

    import workbench.train

    monkeypatch.setattr(workbench.train, "TrainConfig",
                        partial(workbench.train.TrainConfig, group=2, prompts_per_iteration=1, eval_prompts=2))
    ns, _ = notebook("03_finetune.ipynb", cells=4, ITERATIONS=1)
    button, status = ns["button"], ns["status"]
    ns["preset"] = lambda name: workbench.train.preset(name, iterations=2, eval_every=1, eval_prompts=2,
                                                       sample_every=1, prompts_per_iteration=1, group=2)

    def interrupt(event):  # the trainer's callback runs inside its loop, where a kernel interrupt lands
        if event.kind == "iteration" and event.iteration >= 1:
            raise KeyboardInterrupt

    ns["report"] = interrupt
    with contextlib.suppress(KeyboardInterrupt):  # the unfixed notebook let it out, with the button still disabled
        button.click()
    assert not button.disabled and status.value.startswith("interrupted"), (button.disabled, status.value)
    assert ns["LESSON_MODEL"] == ns["result"].model
