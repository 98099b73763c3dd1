"""An objective registered in a test appears in the app's menu, the explainer and the formula panel, and gets
a preset, from its registration alone (rl/objective_info.py)."""

from __future__ import annotations

import re

import pytest
import torch

from workbench.core.errors import WorkbenchError
from workbench.rl.explain import explain, paired_estimator
from workbench.rl.objective_info import Formula, ObjectiveInfo
from workbench.rl.objectives import OBJECTIVES, ObjectiveSettings, step_grpo
from workbench.train import PRESETS, TrainConfig
from workbench.train.presets import with_objective
from workbench.ui.formulas import cell, closed_form, formula_markdown
from workbench.ui.jobs import objective_names

HALF = Formula(r"\rho_{i,t}", r"-\frac{A_i\,\rho_{i,t}}{B\,N}", ("B", "N"))


@pytest.fixture
def half_grpo():
    """The step surrogate summed over the batch and divided by B N, registered for the test only."""
    def half(inputs, settings):
        out = step_grpo(inputs, settings)
        mask = inputs.trained()
        out.loss = out.loss * mask.shape[0] * mask.sum(1)[0] / (mask.any(1).sum() * mask.sum())  # equal T_i here
        return out

    OBJECTIVES.register("half_grpo", info=ObjectiveInfo(formula=HALF, order=-1, advantage="dr_grpo",
                                                        label="step surrogate over B N"))(half)
    yield "half_grpo"
    OBJECTIVES.unregister("half_grpo")


def test_a_registered_objective_is_in_the_menu_the_explainer_and_the_formula_panel(half_grpo, monkeypatch):
    assert objective_names()[0] == half_grpo  # order -1: first in the app's menu
    assert objective_names()[1:4] == ["chunk_grpo", "step_grpo", "gspo"]
    assert paired_estimator(half_grpo) == "dr_grpo"
    gen = torch.Generator().manual_seed(0)
    old = -torch.rand(3, 4, generator=gen, dtype=torch.float64)
    new = old + 0.01 * torch.randn(3, 4, generator=gen, dtype=torch.float64)
    adv = torch.tensor([1.0, -0.5, 0.2], dtype=torch.float64)
    ex = explain(new, old, adv, ObjectiveSettings(clip_low=0.2, chunks=[2, 2]))  # all registered objectives
    assert half_grpo in ex.names
    assert ex.weight[ex.index(half_grpo)] == pytest.approx(ex.weight[ex.index("step_grpo")] / 3, abs=1e-15)
    for i in range(3):
        for t in range(4):
            c = cell(ex, half_grpo, i, t)
            assert closed_form(c) == pytest.approx(c.weight, rel=1e-12)
    text = formula_markdown(cell(ex, half_grpo, 1, 2), "now")
    assert HALF.latex in text and "B = 3,\\ N = 12" in text and "`dr_grpo` estimator" in text


def test_objectives_with_preset_overrides_get_a_preset_and_experiments_their_companions():
    for name in OBJECTIVES.names():
        info = OBJECTIVES.info(name)
        assert info is not None, f"{name} is registered without an ObjectiveInfo"
        if info.preset is not None:
            assert PRESETS.get(name)().objective == name and PRESETS.get(name)().advantage == info.advantage
    dapo = with_objective(TrainConfig(clip_low=5e-6), "dapo")
    assert dapo.dynamic_sampling and dapo.clip_high == pytest.approx(7e-6)
    gpg = with_objective(TrainConfig(), "gpg")
    assert gpg.minibatch == 0 and gpg.advantage == "gpg"


def test_bad_registrations_are_refused():
    with pytest.raises(WorkbenchError, match="unit"):
        ObjectiveInfo(unit="token")
    with pytest.raises(WorkbenchError, match="step_credit requires unit='step'"):
        ObjectiveInfo(unit="chunk", step_credit="critic")
    with pytest.raises(ValueError, match="registered twice"):
        OBJECTIVES.register("ppo")(step_grpo)


def test_objective_records_name_the_valid_units_and_step_credits():
    with pytest.raises(WorkbenchError, match="^" + re.escape("unit must be one of step, chunk, sequence, got 'token'")):
        ObjectiveInfo(unit="token")
    with pytest.raises(WorkbenchError, match="^" + re.escape("step_credit must be None or one of critic, lookahead, "
                                                             "got 'gae'") + "$"):
        ObjectiveInfo(step_credit="gae")
    with pytest.raises(WorkbenchError, match="^" + re.escape("per-step advantages need a per-step ratio: step_credit "
                                                             "requires unit='step'") + "$"):
        ObjectiveInfo(unit="sequence", step_credit="lookahead")


def test_step_credit_goes_with_step_units_and_chunk_units_go_without_it():
    """Per-step advantages (PPO's critic, TP-GRPO's look-ahead) need a per-step ratio; a chunk or sequence
    objective takes one advantage per trajectory."""
    assert ObjectiveInfo(unit="step", step_credit="critic").step_credit == "critic"
    assert ObjectiveInfo(unit="step", step_credit="lookahead").step_credit == "lookahead"
    assert ObjectiveInfo(unit="chunk").step_credit is None and ObjectiveInfo(unit="sequence").unit == "sequence"
