"""Learn's claim over a set of groups (`ui.learn_set`) and its exercises (`ui.learn_exercise`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from workbench.core.errors import WorkbenchError
from workbench.rl.credit_stats import ALIGNED, MISATTRIBUTED
from workbench.ui import learn_exercise as ex
from workbench.ui import learn_set as ls
from workbench.ui.state import Session

DOCS = Path(__file__).resolve().parents[1] / "docs" / "misattribution.json"
EXPERIMENT_NAMES = {"step": "step (size 1)", "uniform4": "uniform 4", "temporal": "temporal [2,3,4,7]",
                    "one": "one chunk (GSPO)"}


def test_the_shipped_set_is_the_experiments_measurement_and_its_headline_is_read_from_it():
    """The shipped figures are docs/misattribution.md's seed 0 (same groups, seeds and numerics), group by group:
    a hand-typed or stale JSON fails here."""
    data, docs = ls.load_set(), json.loads(DOCS.read_text())
    assert data["command"] == ls.COMMAND and len(data["groups"]) == ls.SETTINGS["prompts"]
    for ours, theirs in zip(data["groups"], docs["prompts"], strict=True):
        assert ours["prompt"] == theirs["prompt"]
        for name, label in EXPERIMENT_NAMES.items():
            a, b = ours["rates"]["16"][name], theirs["schedules"][label]
            assert a["determined"] == b["determined_cells"], (ours["prompt"], name)
            assert (a["misattributed"] is None) == (b["misattributed"] != b["misattributed"])
            if a["misattributed"] is not None:
                assert a["misattributed"] == pytest.approx(b["misattributed"], abs=1e-9)
    claim = ls.claim_text(data)
    for name in ("step", "uniform4", "temporal"):
        assert ls.figure(data, name, 16).text() in claim  # every figure of the headline comes from the file
    assert ls.figure(data, "uniform4", 16).mean < ls.figure(data, "step", 16).mean  # what the page claims


def _data(step: list, chunk: list) -> dict:
    def rates(s, c):
        return {"step": {"misattributed": s, "determined": 3, "cells": 8, "by_construction": False},
                "temporal": {"misattributed": c, "determined": 3, "cells": 4, "by_construction": False},
                "uniform4": {"misattributed": c, "determined": 3, "cells": 4, "by_construction": False},
                "one": {"misattributed": 0.0, "determined": 2, "cells": 2, "by_construction": True}}
    groups = [{"prompt": str(i), "seconds": 2.0, "rates": {"16": rates(s, c), "4": rates(s, c)}}
              for i, (s, c) in enumerate(zip(step, chunk))]
    return {"settings": {**ls.SETTINGS, "prompts": len(groups)}, "command": ls.COMMAND, "groups": groups}


def test_the_spread_is_between_groups_and_a_group_without_determined_cells_is_left_out():
    f = ls.figure(_data([0.4, 0.2, None], [0.1, 0.3, None]), "step", 16)
    assert (f.mean, f.low, f.high, f.groups) == (pytest.approx(0.3), 0.2, 0.4, 2)
    assert f.se == pytest.approx(math.sqrt(0.02 / 2))  # sample sd over sqrt(n)
    assert f.text() == "30 % ± 10 (groups 20-40 %)"
    assert ls.figure(_data([0.4], [0.1]), "one", 16).text() == "0 % *by construction*"


def test_the_example_says_in_plain_words_when_it_disagrees_with_the_set():
    data = _data([0.4, 0.4], [0.2, 0.2])
    assert "do *not* lower" in ls.example_against_set(0.2, 0.3, "2,3,4,7", data)
    assert "Here too the chunks 2,3,4,7 lower" in ls.example_against_set(0.3, 0.2, "2,3,4,7", data)
    assert "Too few cells" in ls.example_against_set(float("nan"), 0.2, "2,3,4,7", data)
    with pytest.raises(WorkbenchError, match="learn_set"):
        ls.load_set(Path("/no/such/set.json"))


def test_measure_set_records_both_ms_on_a_tiny_model(random_policy, monkeypatch):
    monkeypatch.setitem(ls.SETTINGS, "continuations", 4)
    monkeypatch.setitem(ls.SETTINGS, "steps", 4)
    monkeypatch.setitem(ls.SETTINGS, "group", 3)
    data = ls.measure_set(random_policy, prompts=1, log=lambda _: None)
    rates = data["groups"][0]["rates"]
    assert set(rates) == {"4"} and set(rates["4"]) == set(ls.SCHEDULES) and data["groups"][0]["seconds"] > 0


# --------------------------------------------------------------------------- the exercises
class FakeCredit:
    """The parts of a Credit the score reads: classes (G, T) and the valid mask."""

    def __init__(self, classes):
        self.classes = torch.tensor(classes)
        self.step_valid = torch.ones_like(self.classes, dtype=torch.bool)

    def step_classes(self, z):
        return self.classes


def test_the_score_counts_hits_against_what_the_measurement_found():
    credit = FakeCredit([[MISATTRIBUTED, ALIGNED, 0], [0, MISATTRIBUTED, ALIGNED]])
    text = ex.score_text(credit, {(0, 0), (0, 1), (1, 0)})
    assert "You marked 3 cells: **1** are measured misattributed, 1 measured aligned" in text
    assert "1 undetermined" in text and "2 misattributed cells of 6" in text
    assert "image 0: step 0; image 1: step 1" in text
    assert "would hit 1.0 misattributed cells on average" in text  # 3 marks x 2 / 6


def test_marks_are_read_from_the_table_and_a_wrong_table_is_a_message():
    frame = pd.DataFrame([["#0", True, False], ["#1", False, "true"]], columns=["image", "t=0", "t=1"])
    assert ex.marked_cells(frame, 2) == {(0, 0), (1, 1)}
    with pytest.raises(WorkbenchError, match="step columns"):
        ex.marked_cells(frame, 3)


def test_the_exercises_run_end_to_end_on_the_app(wb):
    gallery, strip, table, fresh, status = ex.exercise_sample(wb, 1, Session())
    assert status.startswith("✓"), status
    assert len(gallery) == ex.EXERCISE["group"] and table.shape == (ex.EXERCISE["group"], 1 + ex.EXERCISE["steps"])
    table.iloc[0, 1:4] = True
    score, figure, fresh, status = ex.exercise_check(wb, table, fresh)
    assert status.startswith("✓") and "You marked 3 cells" in score and fresh.credit is not None
    verdict, again, status = ex.exercise_predict(wb, "uniform4", fresh)
    assert again.credit is fresh.credit  # measured once, for both exercises
    assert ("Right" in verdict or "Not this time" in verdict or "no schedule can be scored" in verdict), verdict
    assert "chunks of 4" in verdict and "⚠" in ex.exercise_predict(wb, "uniform4", None)[-1]
