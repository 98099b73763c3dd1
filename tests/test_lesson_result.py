"""The crosses lesson's result shipped with the package (scripts/ship_lesson.py; notebook 03, Learn's last stage)."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from workbench.core.errors import WorkbenchError
from workbench.train.hacking import texture_held_back
from workbench.train.lesson_result import shipped_lesson
from workbench.train.sources import load_policy


def test_the_shipped_lesson_is_complete_and_learned_something():
    result = shipped_lesson()
    assert Image.open(result.before).size == Image.open(result.now).size  # the same prompts, before and after
    first, last = result.rows[0], result.rows[-1]
    assert first["iteration"] == 0 and result.iterations == result.about["iterations"] > 0
    assert last["eval/cross_accuracy"] > first["eval/cross_accuracy"] + 0.2  # a change a reader can see
    tuned, base = load_policy(result.model, device="cpu"), load_policy(None, device="cpu")
    moved = [float((a - b).abs().max()) for a, b in zip(tuned.transformer.parameters(), base.transformer.parameters())]
    assert max(moved) > 0 and all(p.dtype == torch.float32 for p in tuned.transformer.parameters())


def test_the_shipped_lesson_holds_the_checkerboard_texture_back():
    rows = shipped_lesson().rows
    assert texture_held_back(rows)  # no window flagged, last share below 0.10, without and with the model's CFG
    assert rows[-1]["eval_cfg/cross_accuracy"] > rows[0]["eval_cfg/cross_accuracy"] + 0.3  # and it still teaches


def test_an_incomplete_result_names_what_is_missing_and_how_to_remake_it(tmp_path):
    with pytest.raises(WorkbenchError, match="before.png.*scripts/ship_lesson.py"):
        shipped_lesson(tmp_path)
    (tmp_path / "before.png").write_bytes(b"")
    (tmp_path / "now.png").write_bytes(b"")
    with pytest.raises(WorkbenchError) as err:
        shipped_lesson(tmp_path)
    assert str(err.value) == (f"the lesson result is incomplete ({tmp_path / 'crosses-lesson' / 'config.json'}, "
                              f"{tmp_path / 'accuracy.json'} missing); remake it with `python scripts/ship_lesson.py`")


def test_the_embedded_models_picker_offers_the_shipped_lesson_and_loads_it(tmp_path):
    from workbench.ui.state import LESSON
    from workbench.ui.workbench import Workbench

    wb = Workbench(model=None, device="cpu", runs_root=str(tmp_path), curve_prompts=2)
    choices = dict((key, label) for label, key in wb.sources())
    key = LESSON  # a key that names no server path (the picker's choices are in the page's config)
    assert "crosses lesson shipped with the package" in choices[key]  # a class picks it without running the lesson
    assert wb.source(key).short == "crosses-lesson" and wb.policy(key).toy_world
    assert wb.source(key).model == str(shipped_lesson().model)
