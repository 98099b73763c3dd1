"""Figures of the gradient-weight explainer (Objectives and Learn tabs): pure functions to `go.Figure`s.

A map shows the push -w = -dL / d log p_t of an objective on every (trajectory, step): positive (blue)
raises the step's log-prob, negative (red) lowers it, the same colours as the measured credit (positive
= the step raised the expected reward). Heatmap traces are named "<row>|<objective>" so a click on a
cell says which map it hit (the app draws the same maps as markup: viz/push_maps.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from workbench.rl.chunking import chunk_boundaries
from workbench.rl.explain import Explanation
from workbench.rl.objectives import OBJECTIVES
from workbench.viz.plots import BOUNDARY_STYLE, COLORBAR_MARGIN, LAYOUT, STEP_AXIS, layout_with

PUSH = "push −w"
CLIPPED_STYLE = dict(symbol="x-thin", size=6, line=dict(width=1.5, color="black"))
SELECTED_STYLE = dict(color="gold", width=3)
SELECTED = "selected cell"  # the name of the outline shape


def push_scale(*maps: torch.Tensor) -> float:
    """One symmetric colour range covering every map (never 0)."""
    return max(float(m.abs().max()) for m in maps if m.numel()) or 1e-12


def _cell_hover(ex: Explanation, o: int) -> list:
    """customdata (G, T, 2): the ratio the objective uses and whether it clipped, for the hover label."""
    ratio, clipped = ex.ratio[o].tolist(), ex.clipped[o].tolist()
    return [[[r, "clipped: no gradient" if c else ""] for r, c in zip(rr, cc)] for rr, cc in zip(ratio, clipped)]


def objective_maps_figure(rows: Sequence[tuple[str, str, Explanation]],
                          credit: torch.Tensor | Sequence[torch.Tensor] | None,
                          selected: tuple[str, str, int, int] | None = None, scale_each: bool = False) -> go.Figure:
    """Small multiples: one row per (key, title, Explanation), one column per objective, one colour scale.

    Column 0 holds the measured credit (G, T) in the first row (if given) and the log-ratio l of each
    later row's policy; with one credit per row (a list: rows of different groups, e.g. two policies) each
    row shows its own. Clipped cells carry an x; Chunk-GRPO panels show their chunk boundaries; each title
    gives the objective's correlation with the row's credit. selected = (row key, objective, i, t) is outlined.
    On the shared scale a title says when an objective's largest push is 10x or more below the scale's end
    (GPG and Dr. GRPO divide by more than the others); scale_each=True gives every map its own scale.
    """
    names = rows[0][2].names
    g, t = rows[0][2].log_ratio.shape
    per_row = isinstance(credit, (list, tuple))
    credits = list(credit) if per_row else [credit] * len(rows)  # what each row's correlations are taken against
    shown = credits if per_row else [credit] + [None] * (len(rows) - 1)  # the credit map column 0 shows per row
    corr = {key: ex.correlation(c).tolist() if c is not None else None for (key, _, ex), c in zip(rows, credits)}
    titles = []
    for r, (key, title, _) in enumerate(rows):
        first = "<br>".join(f"<b>{line}</b>" for line in _short_lines(title)) + "<br>" + (
            "log-ratio l" if r > 0 and not per_row else ("credit d(i,t)" if shown[r] is not None else "no credit"))
        titles += [first] + [n + (f"<br>corr {_corr(corr[key][o])}" if corr[key] is not None else "")
                             + ("" if scale_each else _smaller(rows, o)) for o, n in enumerate(names)]
    fig = make_subplots(rows=len(rows), cols=len(names) + 1, subplot_titles=titles, horizontal_spacing=0.012,
                        vertical_spacing=0.24, shared_yaxes=True)
    scale = push_scale(*[-ex.weight for _, _, ex in rows])
    shapes = []
    for r, (key, _, ex) in enumerate(rows):
        _first_column(fig, r, ex, shown[r], t, log_ratio=not per_row)
        for o in range(len(names)):
            own = push_scale(*[-e.weight[o] for _, _, e in rows]) if scale_each else None
            _objective_panel(fig, r, o, key, ex, own or scale, shapes, own is not None)
    outline = selection_outline(rows, selected) if selected is not None else None
    if outline is not None:
        shapes.append(outline)
    legend = "rows of a map: trajectories i; columns: steps t; x: a clipped unit (no gradient)" + (
        "" if scale_each else "; max 1/N: a push at most 1/N of the scale's end")
    # Short title lines in 9 px: 11 columns are ~58 px apart in a notebook at 1280x800 (tests/test_notebook_widgets)
    fig.update_layout(coloraxis=dict(colorscale="RdBu", cmid=0, cmin=-scale, cmax=scale,
                                     colorbar=dict(title=PUSH, x=1.0, thickness=10, len=0.9)),
                      coloraxis2=dict(colorscale="RdBu", cmid=0, colorbar=dict(title="credit", x=-0.04, y=0.8,
                                                                                xanchor="right", thickness=8,
                                                                                len=0.4)),
                      coloraxis3=dict(colorscale="PuOr", cmid=0, colorbar=dict(title="log-ratio l", x=-0.04, y=0.2,
                                                                               xanchor="right", thickness=8,
                                                                               len=0.4)),
                      shapes=shapes, height=230 * len(rows) + 160, showlegend=False,
                      title=dict(text="What each objective pushes on each step: −dL/d log p(i,t), "
                                      + ("each map on its own colour scale" if scale_each else "one colour scale")
                                      + f"<br><sup>{legend}</sup>", x=0.5, xanchor="center", y=1, yanchor="top",
                                 pad=dict(t=12)),
                      **{**LAYOUT, "margin": dict(l=120, r=95, t=130, b=60)})  # the room plotly needs: no second draw
    fig.update_annotations(font_size=9)
    fig.update_yaxes(autorange="reversed", showticklabels=False)
    fig.update_yaxes(showticklabels=True, dtick=2, col=1)
    fig.update_xaxes(tickvals=list(range(0, t, max(1, t // 2))))  # 0 and T/2: a tick at T-1 ran into the next map
    fig.update_xaxes(title_text="step t", row=len(rows))
    return fig


def _smaller(rows, o: int) -> str:
    """A subplot title's note when objective o's largest push is 10x or more below the shared scale's end."""
    top = push_scale(*[-ex.weight for _, _, ex in rows])
    own = max(float(ex.weight[o].abs().max()) for _, _, ex in rows)
    return f"<br>max 1/{top / own:.0f}" if own > 0 and top / own >= 10 else ""


def _corr(value: float) -> str:
    return "n/a" if value != value else f"{value:+.2f}"  # n/a: a constant map (every unit clipped)


def _short_lines(title: str, most: int = 10) -> list[str]:
    """A row title cut into lines of at most `most` characters at its spaces ("after 3 updates" -> "after 3",
    "updates"), for the narrow first column."""
    lines: list[str] = []
    for word in title.split():
        if lines and len(lines[-1]) + 1 + len(word) <= most:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def corr_text(value: float) -> str:
    """A correlation for the app's maps' titles: "n/a (a constant map)" where every unit was clipped."""
    return "n/a (a constant map)" if value != value else f"{value:+.2f}"


def _first_column(fig: go.Figure, r: int, ex: Explanation, credit: torch.Tensor | None, t: int,
                  log_ratio: bool = True) -> None:
    """Row r's first panel: its credit map when given, else (rows after the first) the log-ratio l."""
    if credit is not None:
        fig.add_trace(go.Heatmap(z=credit.tolist(), coloraxis="coloraxis2", name="credit",
                                 hovertemplate="traj %{y}, step %{x}: credit %{z:.4f}<extra></extra>"),
                      row=r + 1, col=1)
    elif r > 0 and log_ratio:
        fig.add_trace(go.Heatmap(z=ex.log_ratio.tolist(), coloraxis="coloraxis3", name="log-ratio",
                                 hovertemplate="traj %{y}, step %{x}: l = %{z:.3g}<extra></extra>"), row=r + 1, col=1)
    fig.update_xaxes(range=[-0.5, t - 0.5], row=r + 1, col=1)


def chunked_units(name: str) -> bool:
    """The objective's ratios cover chunks (its registration's unit): its map shows the chunk boundaries."""
    return getattr(OBJECTIVES.info(name), "unit", "step") == "chunk"


def _objective_panel(fig, r: int, o: int, key: str, ex: Explanation, scale: float, shapes: list,
                     own: bool = False) -> None:
    """One objective's push map in row r, column o + 2, with clip marks and (Chunk-GRPO) chunk boundaries;
    own=True: on its own symmetric range +-scale instead of the shared colour axis."""
    name = ex.names[o]
    g, t = ex.log_ratio.shape
    colour = (dict(colorscale="RdBu", zmid=0, zmin=-scale, zmax=scale, showscale=False) if own
              else dict(coloraxis="coloraxis"))
    fig.add_trace(go.Heatmap(z=(-ex.weight[o]).tolist(), name=f"{key}|{name}", **colour,
                             customdata=_cell_hover(ex, o),
                             hovertemplate=f"{name}: traj %{{y}}, step %{{x}}<br>{PUSH} = %{{z:.3g}}<br>"
                                           "ratio used %{customdata[0]:.6f} %{customdata[1]}<extra></extra>"),
                  row=r + 1, col=o + 2)
    rows_, cols_ = ex.clipped[o].nonzero(as_tuple=True)
    fig.add_trace(go.Scatter(x=cols_.tolist(), y=rows_.tolist(), mode="markers", marker=CLIPPED_STYLE,
                             name="clipped unit (no gradient)", hoverinfo="skip"), row=r + 1, col=o + 2)
    xref, yref = _axes(r, o + 1, len(ex.names) + 1)
    if chunked_units(name) and ex.settings.chunks:
        shapes += [dict(type="line", xref=xref, yref=yref, x0=b - 0.5, x1=b - 0.5, y0=-0.5, y1=g - 0.5,
                        line={**BOUNDARY_STYLE, "width": 1}) for b in chunk_boundaries(ex.settings.chunks)]
    fig.update_xaxes(range=[-0.5, t - 0.5], row=r + 1, col=o + 2)


def _axes(row: int, col: int, cols: int) -> tuple[str, str]:
    """(xref, yref) of the panel in row `row`, column `col` (from 0) of make_subplots' grid `cols` panels wide: its
    panels are numbered row by row from 1, the first one's axes unnumbered."""
    n = row * cols + col + 1
    return ("x", "y") if n == 1 else (f"x{n}", f"y{n}")


def selection_outline(rows: Sequence[tuple[str, str, Explanation]], selected: tuple[str, str, int, int]) -> dict | None:
    """The rectangle `objective_maps_figure(rows, ...)` draws around selected = (row key, objective, i, t); None
    where the figure has no such map."""
    key, name, i, t = selected
    keys, names = [k for k, _, _ in rows], rows[0][2].names
    if key not in keys or name not in names:
        return None
    xref, yref = _axes(keys.index(key), names.index(name) + 1, len(names) + 1)
    return dict(type="rect", name=SELECTED, xref=xref, yref=yref, x0=t - 0.5, x1=t + 0.5, y0=i - 0.5, y1=i + 0.5,
                line=SELECTED_STYLE)


def advantage_figure(rewards: torch.Tensor, advantages: torch.Tensor) -> go.Figure:
    """Rewards (G,) as points on an axis fitted to them, and the GRPO advantages (G,) made from them as bars. Bars
    of the rewards from 0 showed rewards of 0.94-0.99 as equal while their advantages ran from -2 to +1.5: the
    differences the advantages scale up were a few pixels."""
    g = rewards.shape[0]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("reward r(i) of the final image (axis fitted to the group)",
                                                        "GRPO advantage A(i) = (r - mean) / std"))
    fig.add_trace(go.Scatter(x=list(range(g)), y=rewards.tolist(), name="reward", mode="markers",
                             marker=dict(color="gray", size=11),
                             hovertemplate="trajectory %{x}: r = %{y:.4f}<extra></extra>"), row=1, col=1)
    colors = ["rgb(33,102,172)" if a >= 0 else "rgb(178,24,43)" for a in advantages.tolist()]
    fig.add_trace(go.Bar(x=list(range(g)), y=advantages.tolist(), name="advantage", marker_color=colors),
                  row=1, col=2)
    fig.add_hline(y=float(rewards.mean()), line=dict(dash="dot", color="black"), row=1, col=1,
                  annotation_text="group mean")
    fig.update_xaxes(title_text="trajectory i", dtick=1)
    fig.update_yaxes(title_text="reward (reward units)", row=1, col=1)
    fig.update_yaxes(title_text="A (std units)", row=1, col=2)
    fig.update_layout(title=f"The group: G={g} images of one prompt, one advantage each", showlegend=False,
                      height=330, **LAYOUT)
    return fig


def push_figure(ex: Explanation, name: str, title: str) -> go.Figure:
    """One objective's push map -w (G, T), with its chunk boundaries for Chunk-GRPO."""
    o = ex.index(name)
    g, t = ex.log_ratio.shape
    push = -ex.weight[o]
    scale = push_scale(push)
    fig = go.Figure(go.Heatmap(z=push.tolist(), colorscale="RdBu", zmid=0, zmin=-scale, zmax=scale,
                               colorbar=dict(title=PUSH, thickness=12),
                               hovertemplate="traj %{y}, step %{x}: push %{z:.4g}<extra></extra>"))
    if chunked_units(name) and ex.settings.chunks:
        fig.update_layout(shapes=[dict(type="line", x0=b - 0.5, x1=b - 0.5, y0=-0.5, y1=g - 0.5, line=BOUNDARY_STYLE)
                                  for b in chunk_boundaries(ex.settings.chunks)])
    fig.update_xaxes(title_text=STEP_AXIS, range=[-0.5, t - 0.5])
    fig.update_yaxes(title_text="trajectory i", autorange="reversed", dtick=1)
    fig.update_layout(title=title, height=360, **layout_with(r=COLORBAR_MARGIN))
    return fig


def chunk_push_figure(ex: Explanation, credit, z: float) -> go.Figure:
    """Chunk-GRPO's push map (G, T) beside the chunk credit (G, K) of a `Credit`, classified at z
    (`credit_view.classified_traces`: x misattributed, dot aligned, grey undetermined)."""
    from workbench.viz.credit_view import classified_traces

    o = ex.index("chunk_grpo")
    sizes = ex.settings.chunks
    g, t = ex.log_ratio.shape
    fig = make_subplots(rows=1, cols=2, column_widths=[0.62, 0.38], horizontal_spacing=0.14,
                        subplot_titles=(f"Chunk-GRPO push at ratio 1, chunks {list(sizes)}",
                                        "chunk credit d(i,c) = sum of step credits"))
    push = -ex.weight[o]
    fig.add_trace(go.Heatmap(z=push.tolist(), colorscale="RdBu", zmid=0, zmin=-push_scale(push), zmax=push_scale(push),
                             colorbar=dict(title=PUSH, x=0.53, thickness=10),
                             hovertemplate="traj %{y}, step %{x}: push %{z:.4g}<extra></extra>"), row=1, col=1)
    k = len(sizes)
    classified_traces(fig, credit.chunk_credit, credit.chunk_se, credit.chunk_classes(z), credit.chunk_valid,
                      [c - 0.5 for c in range(k + 1)], "chunk", dict(title="credit", x=1.01, thickness=10),
                      row=1, col=2)
    fig.update_layout(shapes=[dict(type="line", xref="x", yref="y", x0=b - 0.5, x1=b - 0.5, y0=-0.5, y1=g - 0.5,
                                   line=BOUNDARY_STYLE) for b in chunk_boundaries(sizes)])
    fig.update_xaxes(title_text=STEP_AXIS, range=[-0.5, t - 0.5], row=1, col=1)
    fig.update_xaxes(title_text="chunk c", dtick=1, row=1, col=2)
    fig.update_yaxes(title_text="trajectory i", autorange="reversed", dtick=1)
    fig.update_layout(title="What chunks change: the push per step, and the credit per chunk", height=380,
                      **layout_with(r=COLORBAR_MARGIN))
    return fig
