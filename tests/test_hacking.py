"""Reward hacking: the images' checkerboard share (core/imaging.py), the detector over a run's held-out evaluations
(train/hacking.py) and what the run's views say."""

from __future__ import annotations

import pytest
import torch

from workbench.core.imaging import CHECKER_THRESHOLD, checkerboard_share, speckle
from workbench.train.hacking import HELD_BACK, RISE, detect_reward_hacking, run_verdict, texture_held_back
from workbench.viz.plots import heldout_figure


def checkered(size: int = 8, amplitude: float = 0.1, period: int = 1) -> torch.Tensor:
    """(1, 3, size, size): grey with a checkerboard of `amplitude` whose squares are `period` pixels wide."""
    idx = torch.arange(size) // period
    return (0.5 + amplitude * (idx[:, None] + idx[None, :]).remainder(2))[None, None].expand(1, 3, size, size)


def test_the_checkerboard_share_counts_checkered_blocks_not_edges_or_ramps():
    flat = torch.full((1, 3, 8, 8), 0.3)
    edge = flat.clone()
    edge[..., :, 4:] = 0.9  # a vertical edge
    ramp = torch.linspace(0, 1, 8).expand(1, 3, 8, 8).clone()  # a horizontal ramp
    shares = checkerboard_share(torch.cat([flat, edge, ramp, checkered()]))
    assert shares.tolist() == [0.0, 0.0, 0.0, 1.0]
    assert speckle(edge) > 0  # speckle counts the edge; the checkerboard share does not
    faint = checkered(amplitude=CHECKER_THRESHOLD / 2)  # a response of half the threshold
    assert checkerboard_share(faint).item() == 0.0
    half = checkered()
    half = torch.cat([half[..., :4], torch.full((1, 3, 8, 4), 0.5)], dim=3)  # checkered on the left half only
    assert checkerboard_share(half).item() == pytest.approx(28 / 49)  # 4 x 7 of the 7 x 7 blocks


def test_rising_reward_with_a_rising_checkerboard_share_is_flagged():
    verdict = detect_reward_hacking([0, 10, 20, 30], [0.2, 0.3, 0.5, 0.7], [0.03, 0.04, 0.10, 0.30])
    assert verdict.flagged and (verdict.start, verdict.end) == (10, 30)  # the first window that rose by RISE
    assert verdict.text.startswith("Reward hacking: from iteration 10 to 30")
    assert "0.30 -> 0.70" in verdict.text and "4 % -> 30 %" in verdict.text


def test_reward_and_quality_both_rising_is_not_flagged():
    verdict = detect_reward_hacking([0, 10, 20, 30], [0.2, 0.3, 0.5, 0.7], [0.30, 0.20, 0.10, 0.05])
    assert not verdict.flagged and verdict.text.startswith("No sign of reward hacking")
    assert f"{100 * RISE:.0f} points" in verdict.text
    # the share rising by less than RISE, or while the reward falls, is not flagged either
    assert not detect_reward_hacking([0, 10, 20], [0.2, 0.3, 0.4], [0.0, 0.02, RISE - 0.01]).flagged
    assert not detect_reward_hacking([0, 10, 20], [0.9, 0.7, 0.5], [0.0, 0.2, 0.5]).flagged
    assert detect_reward_hacking([0], [0.2], [0.1]) is None  # one evaluation says nothing


def test_mismatched_series_name_what_is_missing():
    with pytest.raises(ValueError, match="3 iterations, 2 rewards and 3 shares"):
        detect_reward_hacking([0, 1, 2], [0.1, 0.2], [0.0, 0.1, 0.2])


def lesson_rows(shares: list[float], rewards: list[float]) -> list[dict]:
    return [{"iteration": 10 * n, "eval/reward_mean": r, "eval/checkerboard": s, "eval/cross_accuracy": r / 2}
            for n, (r, s) in enumerate(zip(rewards, shares))]


def test_texture_is_held_back_without_a_flagged_window_and_below_the_last_share_bound():
    assert texture_held_back(lesson_rows([0.03, 0.05, 0.06], [0.2, 0.5, 0.8]), ("eval",))
    creeping = lesson_rows([0.03, 0.06, HELD_BACK + 0.01, HELD_BACK + 0.02], [0.2, 0.5, 0.8, 0.9])
    assert not run_verdict(creeping).flagged and not texture_held_back(creeping, ("eval",))  # never rose by RISE
    assert not texture_held_back(lesson_rows([0.03, 0.10, 0.15], [0.2, 0.5, 0.8]), ("eval",))  # flagged
    assert not texture_held_back(lesson_rows([0.03, 0.05, 0.06], [0.2, 0.5, 0.8]))  # no eval_cfg evaluations


def test_the_runs_views_say_reward_hacking_beside_the_reward():
    from workbench.ui.jobs import RunView
    from workbench.ui.run_handlers import describe

    hacked = lesson_rows([0.03, 0.10, 0.30], [0.2, 0.5, 0.8])
    view = RunView("crosses", "finished", 20, 20, "", hacked, None)
    line = describe(view)
    assert "⚠ Reward hacking: from iteration 0 to 20" in line and "eval/checkerboard 0.30" in line, line
    clean = lesson_rows([0.03, 0.03, 0.04], [0.2, 0.5, 0.8])
    honest = describe(RunView("crosses", "finished", 20, 20, "", clean, None))
    assert "No sign of reward hacking" in honest and "⚠" not in honest, honest
    assert run_verdict([{"iteration": 0, "eval/reward_mean": 0.1}]) is None  # runs from before the metric
    figure = heldout_figure(hacked, "Held-out evaluation")
    names = [trace.name for trace in figure.data]
    assert any(n.startswith("eval/checkerboard (no CFG: share of checkered pixel blocks") for n in names), names


def test_every_held_out_evaluation_records_the_checkerboard_share(random_policy):
    from support import PROMPT

    from workbench.flow.sampler import ode_sample
    from workbench.rewards import build_reward
    from workbench.train.evaluation import EVAL_SEED, evaluate

    prompts = [PROMPT] * 2
    out = evaluate(random_policy, prompts, build_reward("adherence"), None, {"eval": 1.0, "eval_cfg": 4.0}, 3, None)
    images = ode_sample(random_policy, prompts, steps=3, seed=EVAL_SEED, shift=None, guidance_scale=1.0)
    assert out.metrics["eval/checkerboard"] == pytest.approx(checkerboard_share(images).mean().item())
    assert 0 <= out.metrics["eval_cfg/checkerboard"] <= 1



def test_two_evaluations_make_one_window_and_a_rise_of_exactly_the_threshold_counts():
    verdict = detect_reward_hacking([0, 10], [0.2, 0.5], [0.03, 0.20])  # fewer than WINDOW: the one window there is
    assert verdict.flagged and (verdict.start, verdict.end) == (0, 10)
    # 0.25 -> 0.5 rises by exactly 0.25 (both binary fractions, so exactly): at the threshold is hacking
    assert detect_reward_hacking([0, 10, 20], [0.2, 0.3, 0.4], [0.25, 0.3, 0.5], rise=0.25).flagged
    # a flat reward is not rising, however much texture appears
    assert not detect_reward_hacking([0, 10, 20], [0.5, 0.5, 0.5], [0.0, 0.3, 0.6]).flagged


def test_run_verdict_uses_the_threshold_it_is_given():
    rows = lesson_rows([0.03, 0.10, 0.23], [0.2, 0.5, 0.8])  # the share rises by 0.20
    assert run_verdict(rows).flagged  # by the default RISE of 0.10
    verdict = run_verdict(rows, rise=0.25)
    assert not verdict.flagged and verdict.rise == 0.25


def both_spaces(eval_shares: list[float], cfg_shares: list[float], rewards: list[float]) -> list[dict]:
    """Metric rows with held-out evaluations without CFG (eval) and with it (eval_cfg)."""
    return [{**row, "eval_cfg/reward_mean": r, "eval_cfg/checkerboard": s}
            for row, r, s in zip(lesson_rows(eval_shares, rewards), rewards, cfg_shares)]


def test_texture_held_back_judges_each_space_by_its_own_evaluations():
    rewards = [0.2, 0.4, 0.6, 0.7, 0.8]
    clean = [0.03, 0.04, 0.05, 0.05, 0.05]
    assert texture_held_back(both_spaces(clean, clean, rewards))
    # with CFG the share rose 0.00 -> 0.12 over the first window (flagged), then fell back below HELD_BACK
    assert not texture_held_back(both_spaces(clean, [0.0, 0.05, 0.12, 0.05, 0.05], rewards))
    # the last share decides, not the one before: 0.03 -> 0.12 rose by 0.09 only, unflagged, but ends above
    assert not texture_held_back(lesson_rows([0.03, 0.05, 0.12], rewards[:3]), ("eval",))
    assert not texture_held_back(lesson_rows([0.20, 0.22, 0.25], rewards[:3]), ("eval",), share=0.25)  # at the bound
    assert not texture_held_back(lesson_rows([0.03], [0.2]), ("eval",))  # one evaluation: no verdict
