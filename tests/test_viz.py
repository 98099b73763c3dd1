"""Figures of workbench.viz that the issue's view defects concern: legends and axis titles that explain
themselves without running into each other (the browser tests screenshot them in the app)."""

from __future__ import annotations

import math

import pytest
import torch

from workbench.viz.plots import TRAIN_PANELS, logprob_figure, training_figure


def test_log_probs_draw_one_legend_entry_for_the_trajectories_and_the_level_sigma_sets():
    g, t = 8, 5
    stds = torch.tensor([0.5, 0.4, 0.3, 0.2, 0.01]).expand(g, t)
    eps = torch.randn(g, t, 4096)  # many elements: every trajectory's mean log-density lands near the level
    log_probs = (-(eps ** 2) / 2).mean(-1) - stds.log() - 0.5 * math.log(2 * math.pi)
    fig = logprob_figure(log_probs, torch.linspace(0, 1, g), stds)
    shown = [tr.name for tr in fig.data if tr.showlegend is not False]
    assert len(shown) == 3 and shown[0] == "each of the G=8 trajectories"  # not 8 entries
    level = fig.data[-1].y
    assert list(level) == pytest.approx(log_probs.mean(0).tolist(), abs=0.05)  # the dotted level is where they sit
    assert level[-1] - level[-2] == pytest.approx(math.log(0.2 / 0.01))  # the last step's jump is its small sigma
    assert "σ_t" in fig.layout.title.text


def test_training_panels_carry_their_units_in_the_titles_and_only_the_bottom_row_names_the_x_axis():
    rows = [{"iteration": i, "reward/mean": 0.1 * i, "loss/policy": 0.0, "policy/clip_frac": 0.1,
             "chunk/ratio_mean_0": 1.0} for i in range(1, 4)]
    fig = training_figure(rows, "run")
    titles = [a.text for a in fig.layout.annotations]
    assert [t.split("<br>")[0] for t in titles] == [name for name, _, _ in TRAIN_PANELS]
    assert all("<sup>" in t for t in titles)
    ys = [fig.layout[f"yaxis{n or ''}"] for n in ("", 2, 3, 4, 5, 6)]
    xs = [fig.layout[f"xaxis{n or ''}"] for n in ("", 2, 3, 4, 5, 6)]
    assert all(y.title.text is None for y in ys)  # y titles beside small panels collided with their neighbours
    assert [x.title.text for x in xs] == [None, None, None, "iteration", "iteration", "iteration"]


def test_the_chunk_map_is_the_figure_plotly_validates(random_policy):
    """The Chunks tab's map is built from trace dicts without plotly's validation (it is rebuilt on every chunk
    edit): built validated, the same dicts give the same figure, and a wrong property would raise."""
    import json

    import plotly.graph_objects as go
    from support import PROMPT, mean_red

    from workbench.flow.sampler import sample_group
    from workbench.flow.trajectory import SamplingConfig
    from workbench.rl.credit import measure_credit
    from workbench.viz.credit_view import chunk_figure

    group = sample_group(random_policy, PROMPT, SamplingConfig(group=3, steps=4, seed=1))
    credit = measure_credit(random_policy, group, mean_red, continuations=3, chunks="1,3")
    built = json.loads(chunk_figure(credit, 2.0).to_json())
    assert built == json.loads(go.Figure(built).to_json())  # every property checked and coerced: nothing moves
    assert built["data"][0]["colorscale"][0] == [0.0, "rgb(103,0,31)"]  # plotly's RdBu, not plotly.js's
    assert [shape["x0"] for shape in built["layout"]["shapes"]] == [0.5]  # the boundary after step 0
    with pytest.raises(ValueError, match="colourscale|colorscale|Invalid"):
        go.Figure({**built, "data": [{**built["data"][0], "colorscale": "NoSuchScale"}]})


def test_the_rewards_are_points_on_an_axis_fitted_to_them_not_bars_from_zero():
    """Learn's first figure drew the rewards as bars from 0: 0.94-0.99 looked equal beside advantages of -2..+1.5."""
    from workbench.viz.explain_plots import advantage_figure

    rewards = torch.tensor([0.939, 0.991, 0.97, 0.95])
    fig = advantage_figure(rewards, (rewards - rewards.mean()) / rewards.std())
    points, bars = fig.data
    assert points.type == "scatter" and points.mode == "markers" and list(points.y) == pytest.approx(rewards.tolist())
    assert bars.type == "bar" and fig.layout.yaxis.range is None  # plotly fits the axis to the points (not from 0)
