"""The class's experiment in one figure: each student's measured group, its misattributed share of steps beside that of
its chunk schedule, and the class's mean and spread of both (docs/methods.md, "The class's experiment").

Pure functions from lists of shares to numbers and a `go.Figure`; nothing here knows about sessions or gradio.

    spread([0.2, 0.3, 0.4])   # -> Spread(n=3, mean=0.3, sd=0.1, se=0.0577...)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import plotly.graph_objects as go

from workbench.viz.plots import LAYOUT, empty_figure

STEP_COLOUR, CHUNK_COLOUR = "#d62728", "#1f77b4"


@dataclass(frozen=True)
class Spread:
    """Mean and spread of one share over the students who measured it (NaN shares, no determined cell, left out)."""

    n: int  # students counted
    mean: float
    sd: float  # sample standard deviation across students (n - 1); NaN below two students
    se: float  # standard error of the mean, sd / sqrt(n)


def spread(values: Sequence[float]) -> Spread:
    """Mean, sample standard deviation and standard error of the finite values."""
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    n = len(xs)
    if n == 0:
        return Spread(0, math.nan, math.nan, math.nan)
    mean = sum(xs) / n
    if n < 2:
        return Spread(n, mean, math.nan, math.nan)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    return Spread(n, mean, sd, sd / math.sqrt(n))


def class_figure(labels: Sequence[str], steps: Sequence[float], chunks: Sequence[float]) -> go.Figure:
    """Each student's misattributed share under the step schedule and under their chunk schedule (one line per
    student joins the two), a box of each distribution with its mean and standard deviation."""
    if not labels:
        return empty_figure("The class's experiment", "no measured group yet: students measure credit in Attribution")
    fig = go.Figure()
    for label, s, c in zip(labels, steps, chunks):
        fig.add_trace(go.Scatter(x=["steps", "chunks"], y=[s, c], mode="lines+markers", name=label,
                                 line=dict(color="rgba(120,120,120,0.5)", width=1), marker=dict(size=7),
                                 showlegend=False, hovertemplate=f"{label}<br>%{{x}}: %{{y:.1%}}<extra></extra>"))
    for name, values, colour in (("steps", steps, STEP_COLOUR), ("chunks", chunks, CHUNK_COLOUR)):
        fig.add_trace(go.Box(x=[name] * len(values), y=list(values), name=f"{name}: mean ± sd", boxmean="sd",
                             boxpoints=False, marker_color=colour, width=0.35))
    s, c = spread(steps), spread(chunks)
    fig.update_layout(**LAYOUT, title=f"The class's experiment: {len(labels)} measured group(s); misattributed share "
                                      f"{_pct(s.mean)} of steps, {_pct(c.mean)} of chunks",
                      yaxis=dict(title="misattributed share of determined cells", tickformat=".0%",
                                 rangemode="tozero"),
                      xaxis=dict(title="credit assigned per step (GRPO) or per chunk (the student's schedule)"),
                      height=420)
    return fig


def _pct(value: float) -> str:
    return "—" if not math.isfinite(value) else f"{100 * value:.0f} %"
