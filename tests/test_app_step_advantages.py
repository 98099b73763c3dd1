"""Attribution's per-step advantages (ui/step_handlers.py): fitted and run critics, clear errors."""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go

from tests import test_app_handlers as base
from workbench.train import TrainConfig, Trainer
from workbench.ui import handlers as h
from workbench.ui import step_handlers as sh
from workbench.ui.state import Session

model_dir, wb, sampled = base.model_dir, base.wb, base.sampled  # tiny model, G=3 group with K=2 credit
msg = base.msg


def test_compare_needs_a_group_and_monte_carlo_credit(wb, sampled):
    assert "no group yet" in msg(sh.compare_advantages(wb, sh.FIT, Session()))
    fresh = h.generate(wb, base.PROMPT, 3, 4, 0.7, 1, "adherence", Session())[-2]
    assert "measure credit with the mc estimator first" in msg(sh.compare_advantages(wb, sh.FIT, fresh))


def test_compare_with_a_critic_fitted_on_the_group(wb, sampled):
    figure, table, status = sh.compare_advantages(wb, sh.FIT, sampled)
    assert isinstance(figure, go.Figure) and sum(isinstance(t, go.Heatmap) for t in figure.data) == 4
    for method in ("grpo (A_i on every step)", "ppo", "dense_grpo"):
        assert f"| {method} |" in table
    assert "fitted on this group" in status


def test_compare_with_a_ppo_runs_critic_and_refuse_a_run_without_one(wb, sampled, model_dir):
    root = Path(wb.jobs.root)
    tiny = dict(model=str(model_dir), group=2, steps=3, chunks="3", prompts_per_iteration=1, iterations=1,
                eval_prompts=0, report_to="none")
    Trainer(TrainConfig(objective="ppo", **tiny), root / "ppo_run").run()
    Trainer(TrainConfig(objective="step_grpo", **tiny), root / "grpo_run").run()
    keys = [key for _, key in sh.critic_choices(wb)]
    assert keys[0] == sh.FIT and str(root / "ppo_run") in keys
    figure, table, status = sh.compare_advantages(wb, str(root / "ppo_run"), sampled)
    assert "the run's trained critic" in table and "✓" in status
    assert "holds no critic" in msg(sh.compare_advantages(wb, str(root / "grpo_run"), sampled))
    assert "not a run" in msg(sh.compare_advantages(wb, str(model_dir), sampled))  # a base model: no critic


def test_a_bad_path_is_a_message(wb, sampled):
    assert "does not exist" in msg(sh.compare_advantages(wb, "/nonexistent/run", sampled))
