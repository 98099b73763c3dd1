"""Per-step advantages of one group beside its Monte-Carlo credit (`train/step_compare.StepComparison`).

One heatmap per map (trajectory x step), each on its own symmetric colour scale, given in its title (advantages
are in std units, the credit in reward units): the credit d(i,t), then GRPO's uniform A(i), ppo's and
dense_grpo's A(i,t).
On an advantage map an x marks a cell whose sign disagrees with a determined credit cell.
"""

from __future__ import annotations

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

LAYOUT = dict(template="plotly_white", margin=dict(l=50, r=20, t=70, b=100),
              legend=dict(orientation="h", yref="container", yanchor="bottom", y=0.01, x=0))
# the legend at the figure's bottom, under the axis titles, as in viz/plots.py: below the plot (y=-0.25) it pushed the
# bottom margin out by ~50 px, and plotly draws a figure whose margin it pushes twice
MISMATCH = dict(symbol="x", size=7, color="black")


def _scale(x: torch.Tensor) -> float:
    finite = x[torch.isfinite(x)].abs()
    return float(finite.max()) if finite.numel() and float(finite.max()) > 0 else 1.0


def step_advantage_figure(cmp, title: str = "Per-step advantages against the measured credit") -> go.Figure:
    """Credit (G, T) and the M advantage maps of a `StepComparison`, with their agreement in the titles."""
    def counted(z: torch.Tensor) -> torch.Tensor:  # (G, T) only the counted cells
        return torch.where(cmp.valid, z.float(), torch.full_like(z.float(), float("nan")))

    # each map's own colour scale, in its title: with no colour bars (five would crowd the row) the titles are
    # where a reader finds the magnitudes
    maps = [(f"credit d(i,t), full colour ±{_scale(counted(cmp.credit)):.3g} (reward)", cmp.credit.float())] + [
        (f"{n}, full colour ±{_scale(counted(cmp.advantages[m])):.3g} (std)<br>sign "
         f"{cmp.agreement[n]['sign_agreement_determined']:.0%} of determined, "
         f"r = {cmp.agreement[n]['correlation']:+.2f}", cmp.advantages[m].float()) for m, n in enumerate(cmp.names)]
    fig = make_subplots(rows=1, cols=len(maps), subplot_titles=[t for t, _ in maps], horizontal_spacing=0.04)
    g, t = cmp.credit.shape
    for col, (_, z) in enumerate(maps, start=1):
        shown = counted(z)
        scale = _scale(shown)
        fig.add_trace(go.Heatmap(z=shown.tolist(), colorscale="RdBu", zmid=0, zmin=-scale, zmax=scale,
                                 showscale=False, hovertemplate="traj %{y}, step %{x}: %{z:.3g}<extra></extra>"),
                      row=1, col=col)
        if col > 1:
            wrong = cmp.determined & cmp.valid & (z.sign() != cmp.credit.sign())  # (G, T)
            ys, xs = wrong.nonzero(as_tuple=True)
            fig.add_trace(go.Scatter(x=xs.tolist(), y=ys.tolist(), mode="markers", marker=MISMATCH,
                                     name="sign against a determined credit", hoverinfo="skip",
                                     showlegend=col == 2), row=1, col=col)
        fig.update_xaxes(title_text="step t", range=[-0.5, t - 0.5], row=1, col=col)
        fig.update_yaxes(autorange="reversed", dtick=1, showticklabels=col == 1, row=1, col=col)
    fig.update_yaxes(title_text="trajectory i", row=1, col=1)
    for annotation in fig.layout.annotations:
        annotation.font.size = 11
    fig.update_layout(title=title, height=395 + 8 * g, **LAYOUT)
    return fig
