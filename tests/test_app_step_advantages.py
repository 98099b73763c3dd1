"""Attribution's per-step advantages (ui/step_handlers.py): fitted and run critics, clear errors."""

from __future__ import annotations

from pathlib import Path

import app_support as base
import plotly.graph_objects as go

from workbench.train import TrainConfig, Trainer
from workbench.ui import handlers as h
from workbench.ui import step_handlers as sh
from workbench.ui.state import Session

msg = base.msg


def test_compare_needs_a_group_and_monte_carlo_credit(wb, sampled):
    assert "no group yet" in msg(sh.compare_advantages(wb, sh.FIT, Session()))
    fresh = h.generate(wb, base.PROMPT, 3, 4, 0.7, 1, "adherence", Session())[-2]
    assert "measure credit with the mc estimator first" in msg(sh.compare_advantages(wb, sh.FIT, fresh))


def test_compare_with_a_critic_fitted_on_the_group(wb, sampled):
    figure, table, session, status = sh.compare_advantages(wb, sh.FIT, sampled)
    assert isinstance(figure, go.Figure) and sum(isinstance(t, go.Heatmap) for t in figure.data) == 4
    scales = [t.zmax for t in figure.data if isinstance(t, go.Heatmap)]  # no colour bars: each title gives its scale
    assert [a.text.split("full colour ±")[1].split(" ")[0] for a in figure.layout.annotations] == [f"{v:.3g}"
                                                                                                    for v in scales]
    for method in ("grpo (A_i on every step)", "ppo", "dense_grpo"):
        assert f"| {method} |" in table
    assert "fitted on this group" in status


def test_the_section_shows_the_comparison_of_the_current_credit_only(wb, sampled):
    """The section kept the last comparison's figure and table beside a new group (T = 2 beside a plot of 16
    steps) or a new measurement: the Attribution tab and every measurement now redraw it from the session."""
    empty_figure, empty_text, _ = sh.step_advantages_view(wb, sampled)
    assert empty_text == sh.NO_COMPARISON and "compare advantages" in empty_figure.layout.annotations[0].text
    figure, table, session, _ = sh.compare_advantages(wb, sh.FIT, sampled)
    shown, text, status = sh.step_advantages_view(wb, session)
    assert text == table and shown.to_json() == figure.to_json() and base.is_skip(status)
    edited = h.chunks_from_spec(wb, "1,3", session)[-2]  # a re-chunk: the same measurement, still shown
    assert sh.step_advantages_view(wb, edited)[1] == table
    again = h.attribute(wb, 2, edited)[2]  # measured again: other numbers, so the old comparison goes
    assert again.step_comparison() is None and sh.step_advantages_view(wb, again)[1] == sh.NO_COMPARISON
    new = h.generate(wb, base.PROMPT, 3, 2, 0.7, 1, "adherence", session)[-2]  # a new group drops it too
    assert new.steps_compared is None and sh.step_advantages_view(wb, new)[1] == sh.NO_COMPARISON


def test_compare_with_a_ppo_runs_critic_and_refuse_a_run_without_one(wb, sampled, model_dir):
    root = Path(wb.jobs.root)
    tiny = dict(model=str(model_dir), group=2, steps=3, chunks="3", prompts_per_iteration=1, iterations=1,
                eval_prompts=0, report_to="none")
    Trainer(TrainConfig(objective="ppo", **tiny), root / "ppo_run").run()
    Trainer(TrainConfig(objective="step_grpo", **tiny), root / "grpo_run").run()
    keys = [key for _, key in sh.critic_choices(wb)]
    assert keys[0] == sh.FIT and str(root / "ppo_run") in keys
    figure, table, _, status = sh.compare_advantages(wb, str(root / "ppo_run"), sampled)
    assert "the run's trained critic" in table and "✓" in status
    assert "holds no critic" in msg(sh.compare_advantages(wb, str(root / "grpo_run"), sampled))
    assert "not a run" in msg(sh.compare_advantages(wb, str(model_dir), sampled))  # a base model: no critic


def test_a_bad_path_is_a_message(wb, sampled):
    assert "is not a folder this app offers" in msg(sh.compare_advantages(wb, "/nonexistent/run", sampled))
