"""Plotly figures of the workbench: pure functions from tensors and metric rows to `go.Figure`s.

Every figure has a title, axis names with units and a legend, so a screenshot explains itself. Nothing
here touches gradio; the handlers pass the figures to `gr.Plot`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from workbench.rl.chunking import chunk_boundaries
from workbench.train.store import metric_series

STEP_AXIS = "denoising step t (0 = pure noise)"
BOUNDARY_STYLE = dict(color="black", width=2, dash="dash")
LAYOUT = dict(margin=dict(l=70, r=20, t=60, b=100),  # the template: plotly_white, set in viz/__init__.py
              legend=dict(orientation="h", yref="container", yanchor="bottom", y=0.01, x=0))
# the legend sits at the bottom of the figure, under the x-axis title: placed relative to the plot area
# (y=-0.35), a two-row legend ran into the axis title and, in short figures, into the last row of a map.
# l: room for tick labels such as "−0.05" beside the axis title (60 px pushed out to 61 in the Learn tab's
# advantage figure: a second draw, see COLORBAR_MARGIN)
COLORBAR_MARGIN = 125  # px right of a plot with a colorbar (its two-line title needs ~105-116). A figure whose margin
# plotly must push out (for a colorbar, a legend, tick labels) is drawn twice: in chromium the Attribution map took
# 143-153 ms to draw with the push, 66-70 ms without, the Objectives maps 484-528 against 237-259 ms
# (bench/figures.py); ~8 ms more per chunk edit for the chunk map. The chunk map's title is one
# line along the bar: a two-line title ("credit<br>(reward)") took ~5 ms more of the map's ~37 ms draw.


def layout_with(**margin) -> dict:
    """LAYOUT with some of its margins changed, e.g. layout_with(r=COLORBAR_MARGIN) for a figure with a colorbar."""
    return {**LAYOUT, "margin": dict(LAYOUT["margin"], **margin)}


# Training metrics shown live, one panel each: (panel title, y-axis name, metric keys)
TRAIN_PANELS = (
    ("Reward", "reward (reward units)", ("reward/mean", "eval/reward_mean")),
    ("Policy loss", "loss", ("loss/policy",)),
    ("Clip fraction", "fraction of clipped units", ("policy/clip_frac",)),
    ("KL to reference", "KL (nats per element)", ("loss/kl", "policy/approx_kl")),
    ("Gradient norm", "L2 norm (before clipping)", ("policy/grad_norm",)),
    ("Chunk ratios", "mean importance ratio", ()),  # filled with every chunk/ratio_mean_<j>
)
CHUNK_RATIO = re.compile(r"^chunk/ratio_mean_(\d+)$")
TASK_METRIC = re.compile(r"^eval(_cfg)?/\w+_accuracy$")  # a task's held-out success, e.g. eval_cfg/cross_accuracy
HELDOUT_NAMES = {"eval": "no CFG", "eval_cfg": "model's CFG"}
CHECKERED = ": share of checkered pixel blocks, lower is better"  # the legend of eval/checkerboard


def _boundary_shapes(sizes: Sequence[int], xref: str = "x") -> list[dict]:
    """Dashed vertical lines between chunks, at step b - 0.5 for every boundary b, spanning the plot height.

    Plain layout shapes: `add_vline` costs milliseconds per line, too slow for live chunk edits."""
    return [dict(type="line", xref=xref, yref=f"{xref.replace('x', 'y')} domain", x0=b - 0.5, x1=b - 0.5, y0=0, y1=1,
                 line=BOUNDARY_STYLE) for b in chunk_boundaries(sizes)]


def _boundary_legend(fig: go.Figure, **where) -> None:
    """An invisible trace that gives the dashed boundary lines a legend entry."""
    fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", line=BOUNDARY_STYLE, name="chunk boundary"),
                  **where)


def logprob_figure(log_probs: torch.Tensor, rewards: torch.Tensor | None = None,
                   stds: torch.Tensor | None = None) -> go.Figure:
    """Per-step log-probs (G, T) of a group: a thin line per trajectory (its reward on hover), their mean, and
    with the step stds (G, T) the level a typical draw has, -log sigma_t - (1 + log 2 pi) / 2.

    The log-prob is a mean over thousands of latent elements of log N(x; mean, sigma_t^2), so every trajectory
    lands near that level: the lines overlap, and the curve follows the step's noise scale (the last noisy
    step has the smallest sigma_t, hence the jump). The legend has three entries, not one per trajectory."""
    g, t = log_probs.shape
    steps = list(range(t))
    fig = go.Figure()
    for i in range(g):
        label = f"traj {i}" + (f", reward {float(rewards[i]):.3f}" if rewards is not None else "")
        fig.add_trace(go.Scatter(x=steps, y=log_probs[i].tolist(), mode="lines", name=label, legendgroup="each",
                                 showlegend=i == 0, legendgrouptitle=None, line=dict(width=1, color="lightgray"),
                                 hovertemplate=f"{label}, step %{{x}}: %{{y:.4f}}<extra></extra>"))
    fig.data[0].name = f"each of the G={g} trajectories"
    fig.add_trace(go.Scatter(x=steps, y=log_probs.mean(0).tolist(), mode="lines+markers", name="group mean",
                             line=dict(color="rgb(31,119,180)")))
    if stds is not None:
        sigma = stds.float().mean(0)  # (T,)
        level = [-math.log(s) - (1 + math.log(2 * math.pi)) / 2 if s > 0 else None for s in sigma.tolist()]
        fig.add_trace(go.Scatter(x=steps, y=level, mode="lines", name="−log σ_t − (1 + log 2π)/2: a typical draw",
                                 line=dict(dash="dot", color="black")))
    fig.update_layout(title=f"Per-step log-prob of each sampled transition (G={g}, T={t})<br><sup>a mean over the "
                            "latent's elements, so every trajectory sits near the level the step's noise scale σ_t "
                            "sets</sup>", xaxis_title=STEP_AXIS, yaxis_title="log p(x_t+1 | x_t), nats per element",
                      **{**LAYOUT, "margin": dict(l=60, r=20, t=80, b=100)})
    return fig


DYNAMICS_Y = "L1_rel = |x_t - x_t+1|_1 / |x_t|_1 (relative)"


def dynamics_title(sizes: Sequence[int], trajectories: int, prompts: int | None = None) -> tuple[str, str]:
    """(title, subtitle) of the temporal-dynamics curve under chunks `sizes`: the chunks, and whose curve it is (the
    model's, not the group's of the Generate tab: a band "over 16 trajectories" beside a group of 8 puzzles)."""
    source = f"{trajectories} trajectories of {prompts} prompts" if prompts else f"{trajectories} trajectories"
    return f"Temporal dynamics and chunks {list(sizes)}", f"the model's curve: {source}, not the Generate group"


def dynamics_figure(mean: torch.Tensor, low: torch.Tensor, high: torch.Tensor, sizes: Sequence[int],
                    trajectories: int, prompts: int | None = None) -> go.Figure:
    """GCPO's L1_rel curve: mean (T,) with a 10-90 % band (low, high (T,)) and the chunk boundaries.

    The curve is the model's, measured on `trajectories` trajectories of `prompts` prompts, not on the group
    of the Generate tab; the title says so (a band "over 16 trajectories" beside a group of 8 puzzles)."""
    t = mean.shape[0]
    steps = list(range(t))
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=steps + steps[::-1], y=high.tolist() + low.tolist()[::-1], fill="toself",
                             line=dict(width=0), fillcolor="rgba(31,119,180,0.2)", hoverinfo="skip",
                             name=f"10-90 % over {trajectories} trajectories"))
    fig.add_trace(go.Scatter(x=steps, y=mean.tolist(), mode="lines+markers", line=dict(color="rgb(31,119,180)"),
                             name="mean L1_rel"))
    _boundary_legend(fig)
    title, sub = dynamics_title(sizes, trajectories, prompts)
    fig.update_layout(title=f"{title}<br><sup>{sub}</sup>", xaxis_title=STEP_AXIS, yaxis_title=DYNAMICS_Y,
                      xaxis_range=[-0.5, t - 0.5], shapes=_boundary_shapes(sizes), hovermode="x", **LAYOUT)
    return fig


def training_figure(rows: list[dict], title: str) -> go.Figure:
    """Live training curves from metrics.jsonl rows: reward, loss, clip fraction, KL, grad norm, chunk ratios.

    Each panel's title names its metric and unit, and only the bottom row names the x axis (iteration): axis
    titles beside six small panels ran into the neighbouring panels' ticks."""
    titles = [f"{name}<br><sup>{unit}</sup>" for name, unit, _ in TRAIN_PANELS]
    fig = make_subplots(rows=2, cols=3, subplot_titles=titles, vertical_spacing=0.2, horizontal_spacing=0.07)
    chunk_keys = sorted({k for r in rows for k in r if CHUNK_RATIO.match(k)},
                        key=lambda k: int(CHUNK_RATIO.match(k).group(1)))
    for n, (_, _, keys) in enumerate(TRAIN_PANELS):
        row, col = divmod(n, 3)
        for key in keys or chunk_keys:
            x, y = metric_series(rows, key)
            if x:
                fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=key), row=row + 1, col=col + 1)
    fig.update_xaxes(title_text="iteration", row=2)
    fig.update_layout(title=title, height=660, **{**LAYOUT, "margin": dict(l=50, r=20, t=90, b=130)})
    return fig


def heldout_series(rows: list[dict]) -> dict[str, tuple[list[int], list[float]]]:
    """{metric: (iterations, values)} of a run's held-out evaluation: the task's accuracies (e.g.
    eval/cross_accuracy, eval_cfg/cross_accuracy) when it has a task, else eval/ and eval_cfg/reward_mean; then the
    images' checkerboard share (eval/checkerboard: a quality signal beside the reward, `core.imaging`)."""
    keys = sorted({k for r in rows for k in r if TASK_METRIC.match(k)})
    keys = keys or [k for k in ("eval/reward_mean", "eval_cfg/reward_mean") if any(k in r for r in rows)]
    keys += [k for k in ("eval/checkerboard", "eval_cfg/checkerboard") if any(k in r for r in rows)]  # image quality
    return {k: metric_series(rows, k) for k in keys if metric_series(rows, k)[0]}


def heldout_figure(rows: list[dict], title: str) -> go.Figure:
    """Held-out evaluation against iteration, without and with the model's CFG (`heldout_series`)."""
    series = heldout_series(rows)
    if not series:
        return empty_figure(title, "no held-out evaluation yet (it runs before training and every few iterations)")
    fig = go.Figure()
    for key, (x, y) in series.items():
        space, name = key.split("/")
        checkered = name == "checkerboard"
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", line=dict(dash="dot") if checkered else None,
                                 name=f"{key} ({HELDOUT_NAMES[space]}{CHECKERED if checkered else ''})"))
    accuracy = any(TASK_METRIC.match(k) for k in series)
    fig.update_layout(title=title, xaxis_title="iteration",
                      yaxis_title="share of held-out prompts right" if accuracy else "held-out reward",
                      yaxis_range=[0, 1] if accuracy else None, **LAYOUT)
    return fig


def compare_figure(series: dict[str, tuple[list[int], list[float]]], metric: str) -> go.Figure:
    """One metric of several runs overlaid: {run name: (iterations, values)}."""
    fig = go.Figure()
    for name, (x, y) in series.items():
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=name))
    fig.update_layout(title=f"{metric} per iteration, {len(series)} run(s)", xaxis_title="iteration",
                      yaxis_title=metric, **LAYOUT)
    return fig


def empty_figure(title: str, hint: str) -> go.Figure:
    """A placeholder with a title and a centred hint, for plots that have no data yet."""
    fig = go.Figure()
    fig.add_annotation(text=hint, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper", font=dict(size=14))
    fig.update_layout(title=title, xaxis=dict(visible=False), yaxis=dict(visible=False))
    return fig
