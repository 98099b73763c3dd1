"""Figures and text of measured credit: cells classified misattributed / aligned / undetermined.

Pure functions from a `Credit` (and z) to plotly figures and Markdown; the Attribution tab shows step
cells beside the GRPO advantage; `chunk_figure` draws chunk cells over the same steps for the notebooks and the
exported page (the Chunks tab draws the same map as markup, viz/chunk_map.py, with these encodings). Encodings: colour =
credit (blue raises the expected reward, red lowers it); x = misattributed; dot = aligned; grey cover =
undetermined (not significant at the false-call rate z sets); white veil = not counted (untrained step or
A = 0). Hovering a cell gives its credit, standard error and class.
"""

from __future__ import annotations

import functools

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from workbench.rl.chunking import chunk_boundaries
from workbench.rl.credit import Credit
from workbench.rl.credit_compare import CreditComparison
from workbench.rl.credit_stats import ALIGNED, MISATTRIBUTED, UNDETERMINED, Rates
from workbench.rl.significance import false_call_rate
from workbench.viz.plots import COLORBAR_MARGIN, STEP_AXIS, _boundary_legend, _boundary_shapes, layout_with

UNDETERMINED_COLOR = "rgba(190,190,190,0.92)"
VEIL_COLOR = "rgba(255,255,255,0.8)"
MARKS = {MISATTRIBUTED: ("x-thin", 11, "misattributed: against A(i), significant at z"),
         ALIGNED: ("circle", 6, "aligned: with A(i), significant at z")}
UNDETERMINED_NAME = "undetermined: not significant at z"
NOT_COUNTED_NAME = "not counted: untrained step or A = 0"
NOT_COUNTED_SWATCH = "rgb(245,245,245)"  # the veil over white, as the legend shows it
Z_LABEL = "z: sets the false-call rate P(|N(0,1)| > z) per cell (z = 2: 4.6 %)"
FIXED_NOTE = ("fixed by construction: a chunk from the start noise to the image has credit r - mean r, the raw "
              "advantage, so it always agrees with A")
ATTRIBUTION_BOTTOM = 110  # px under the Attribution map for the axis titles and its legend (the page's default width
# needs 106): pushed out by plotly, the margin meant a second draw of the map, as the colorbar's on the right did
NAMES = {MISATTRIBUTED: "misattributed", ALIGNED: "aligned", UNDETERMINED: "undetermined"}


def class_labels(classes: torch.Tensor, valid: torch.Tensor) -> list[list[str]]:
    return [[NAMES[c] if v else "not counted" for c, v in zip(row_c, row_v)]
            for row_c, row_v in zip(classes.tolist(), valid.tolist())]


def span_text(a: float, b: float, unit: str) -> str:
    """Hover suffix of a chunk over several steps, e.g. " (steps 2-4)"; empty for a step."""
    first, last = int(a + 0.5), int(b - 0.5)
    return f" (steps {first}-{last})" if unit != "step" and last > first else ""


def _cover(mask: torch.Tensor, x, color: str) -> dict:
    """One flat colour over the cells of mask (G, J); transparent elsewhere and invisible to hover."""
    z = torch.where(mask, 1.0, torch.nan).tolist()
    return dict(type="heatmap", z=z, x=x, colorscale=[[0, color], [1, color]], showscale=False, hoverinfo="skip")


@functools.cache
def red_blue() -> tuple:
    """plotly's "RdBu" scale as a validated figure carries it: plotly.js's own "RdBu" is another scale."""
    return go.Heatmap(colorscale="RdBu").colorscale


def classified_trace_dicts(credit: torch.Tensor, se: torch.Tensor, classes: torch.Tensor, valid: torch.Tensor,
                           edges: list[float], unit: str, colorbar: dict, legend: bool = True,
                           scale: float | None = None) -> list[dict]:
    """The traces of a credit map (G, J) with its classes, as plotly trace dicts.
    edges (J + 1,): the cell borders along x; scale: the colour scale's |credit| end (default: this map's)."""
    g, j = credit.shape
    centres = [(a + b) / 2 for a, b in zip(edges, edges[1:])]
    scale = float(credit.abs().max().clamp_min(1e-6)) if scale is None else scale
    se_text = [[("no estimate" if s != s else f"{s:.4f}") for s in r] for r in se.tolist()]
    names = [f"{unit} {n}" + span_text(edges[n], edges[n + 1], unit) for n in range(j)]
    names[-1] += " (ends at the image: its reward taken as exact)"
    labels = class_labels(classes, valid)
    custom = [[[s, c, name] for s, c, name in zip(rs, rc, names)] for rs, rc in zip(se_text, labels)]
    traces = [dict(type="heatmap", z=credit.tolist(), x=edges, y=list(range(g)), colorscale=red_blue(), zmid=0,
                   zmin=-scale, zmax=scale, customdata=custom, colorbar=colorbar, name=f"{unit} credit",
                   hovertemplate="traj %{y}, %{customdata[2]}: credit %{z:.4f} ± %{customdata[0]} "
                                 "(%{customdata[1]})<extra></extra>"),
              _cover((classes == UNDETERMINED) & valid, edges, UNDETERMINED_COLOR),
              _cover(~valid, edges, VEIL_COLOR)]
    for cls, (symbol, size, name) in MARKS.items():
        rows, cols = ((classes == cls) & valid).nonzero(as_tuple=True)
        traces.append(dict(type="scatter", x=[centres[c] for c in cols.tolist()], y=rows.tolist(), mode="markers",
                           marker=dict(symbol=symbol, size=size, color="black",
                                       line=dict(width=2 if cls == MISATTRIBUTED else 1,
                                                 color="black" if cls == MISATTRIBUTED else "white")),
                           name=name, showlegend=legend, hoverinfo="skip"))
    if legend:
        for color, name in ((UNDETERMINED_COLOR, UNDETERMINED_NAME), (NOT_COUNTED_SWATCH, NOT_COUNTED_NAME)):
            traces.append(dict(type="scatter", x=[None], y=[None], mode="markers", name=name,
                               marker=dict(symbol="square", size=13, color=color, line=dict(width=1, color="gray"))))
    return traces


def classified_traces(fig: go.Figure, credit: torch.Tensor, se: torch.Tensor, classes: torch.Tensor,
                      valid: torch.Tensor, edges: list[float], unit: str, colorbar: dict, row: int | None = None,
                      col: int | None = None, legend: bool = True, scale: float | None = None) -> None:
    """Add a credit map (G, J) with its classes to fig (at row, col of a subplot grid if given): the traces of
    `classified_trace_dicts`, validated as plotly adds them."""
    for trace in classified_trace_dicts(credit, se, classes, valid, edges, unit, colorbar, legend, scale):
        fig.add_trace(trace, row=row, col=col)


def k_text(credit: Credit) -> str:
    if credit.deterministic:
        return f"estimator {credit.estimator}"
    k = credit.counts
    lo, hi = int(k.min()), int(k.max())
    return f"M={lo}" if lo == hi else f"M={lo}..{hi}"


def attribution_figure(credit: Credit, z: float) -> go.Figure:
    """Classified step credit (G, T) beside the uniform GRPO advantage (G, 1), chunk boundaries dashed."""
    g, t = credit.step_credit.shape
    fig = make_subplots(rows=1, cols=2, column_widths=[0.8, 0.2], shared_yaxes=True, horizontal_spacing=0.12,
                        subplot_titles=("Step credit d(i,t), classified at z = " + f"{z:g}", "GRPO advantage A(i)"))
    classified_traces(fig, credit.step_credit, credit.step_se, credit.step_classes(z), credit.step_valid,
                      [s - 0.5 for s in range(t + 1)], "step",
                      dict(title="credit<br>(reward)", x=0.712, xanchor="left", thickness=12), row=1, col=1)
    adv = credit.advantages
    adv_scale = float(adv.abs().max().clamp_min(1e-6))
    fig.add_trace(go.Heatmap(z=adv[:, None].tolist(), x=["A"], y=list(range(g)), colorscale="RdBu", zmid=0,
                             zmin=-adv_scale, zmax=adv_scale, name="advantage",
                             colorbar=dict(title="A<br>(std units)", x=1.01, xanchor="left", thickness=12),
                             hovertemplate="traj %{y}: A = %{z:.3f}<extra></extra>"), row=1, col=2)
    fig.update_layout(shapes=_boundary_shapes(credit.sizes))
    _boundary_legend(fig, row=1, col=1)
    fig.update_xaxes(title_text=STEP_AXIS, range=[-0.5, t - 0.5], row=1, col=1)
    fig.update_xaxes(title_text="per trajectory", row=1, col=2)
    fig.update_yaxes(title_text="trajectory i", autorange="reversed", dtick=1, row=1, col=1)
    fig.update_layout(title=f"Step credit vs uniform advantage (G={g}, T={t}, {k_text(credit)}, "
                            f"chunks {list(credit.sizes)})", height=480,
                      **layout_with(r=COLORBAR_MARGIN, b=ATTRIBUTION_BOTTOM))
    return fig


def chunk_figure(credit: Credit, z: float) -> go.Figure:
    """Classified chunk credit (G, K), each chunk drawn over its steps, for the Chunks tab."""
    t = credit.num_steps
    edges = [-0.5] + [b - 0.5 for b in chunk_boundaries(credit.sizes)] + [t - 0.5]
    layout = dict(title=dict(text=f"Chunk credit V(end) - V(start), classified at z = {z:g} ({k_text(credit)})"),
                  xaxis=dict(title=dict(text=STEP_AXIS), range=[-0.5, t - 0.5]),
                  yaxis=dict(title=dict(text="trajectory i"), autorange="reversed", dtick=1),
                  shapes=_boundary_shapes(credit.sizes), height=420,
                  **layout_with(r=COLORBAR_MARGIN))
    traces = classified_trace_dicts(credit.chunk_credit, credit.chunk_se, credit.chunk_classes(z), credit.chunk_valid,
                                    edges, "chunk", dict(title=dict(text="credit (reward)", side="right"),
                                                         thickness=12))
    # Built every chunk edit: plotly's validation of these dicts was 7 of the handler's ~9 ms on a quiet machine
    # and ~15 of ~20 ms while the browser drew beside it. They are plotly's own property names and
    # values (tests/test_viz.py builds them validated and checks the same JSON), so the figure skips it.
    return go.Figure(dict(data=traces, layout=layout), _validate=False)


def _pct(value: float, se: float) -> str:
    if value != value:
        return "–"
    return f"{100 * value:.1f} %" + ("" if se != se else f" ± {100 * se:.1f} %")


def rates_line(label: str, r: Rates) -> str:
    """One Markdown line: the three rates and the plain sign rate, each with its error; rates fixed by
    construction (every counted cell a chunk from the start noise to the image) say so."""
    if r.by_construction:
        return (f"**{label}:** 0 % misattributed, {FIXED_NOTE}: the figure describes the definition, not the "
                "policy")
    fixed = f" ({r.fixed_cells} of them {FIXED_NOTE})" if r.fixed_cells else ""
    return (f"**{label}:** {_pct(r.misattributed, r.misattributed_se)} of the determined cells are misattributed "
            f"· {_pct(r.determined, r.determined_se)} of {r.cells} cells determined{fixed} · credit mass against A "
            f"{_pct(r.mass_against, r.mass_against_se)} · plain sign rate {_pct(r.plain, r.plain_se)}")


def rule_text(credit: Credit, z: float) -> str:
    """What a determined cell means at z, and what the last step's credit holds, in words."""
    looks = "" if credit.looks is None else (" Refined cells are tested at that rate divided by their looks (1 + "
                                             "the rounds that grew either end state).")
    return (f" A cell is determined when its credit differs from 0 at a false-call rate of "
            f"{100 * false_call_rate(z):.1f} % (z={z:g}): a Student-t test with the cell's degrees of freedom "
            f"(M - 1 under common random numbers, Welch-Satterthwaite for independent continuations), or an exact "
            f"sign-flip or permutation test where the continuation rewards tie (a few-valued reward: a few "
            f"continuations that agree have a spread of 0 by chance).{looks} {last_step_text(credit)}")


def last_step_text(credit: Credit) -> str:
    """What the last step's and the last chunk's credit holds: the image's reward is taken as exact."""
    if credit.final_scores is not None:
        return (f"The last step ends at the image, scored {credit.final_scores.shape[1]} times: its value is their "
                "mean, with their error.")
    return ("The last step (and the last chunk) ends at the image, whose reward is taken as exact: if the reward "
            "gives another number each time it scores the same image, that noise is in the last step's credit "
            "(re-score the image: `measure_credit(rescore=R)`, `workbench attribute --rescore R`).")


FEW_CELLS = 10  # determined cells below which the halves' line warns that their shares are noise-dominated


def rates_text(credit: Credit, z: float, reference: Credit | None = None) -> str:
    """The rates of steps and chunks, how they were measured, and a cheap estimator's agreement."""
    r = credit.rates(z)
    lines = [rates_line("Step misattribution", r.step),
             rates_line(f"Chunk misattribution (chunks {','.join(map(str, credit.sizes))})", r.chunk)]
    g = credit.rewards.shape[0]
    how = ("common random numbers" if credit.crn else "independent continuations")
    if credit.deterministic:
        how = f"one deterministic look-ahead per state ({credit.estimator}): no Monte-Carlo error, every cell " \
              "with credit not 0 counts as determined"
    cost = credit.cost
    rule = "" if credit.deterministic else rule_text(credit, z)
    lines.append(f"G={g}, T={credit.num_steps}, {k_text(credit)}, {how}; cost {cost.get('nfe', 0)} transformer "
                 f"evaluations.{rule} ± is the standard error over trajectories; measuring again with other "
                 "continuation noise moves the rates by several points more (docs/misattribution.md, \"Spread over "
                 "continuation seeds\"). Untrained steps and trajectories "
                 "with A = 0 are left out.")
    split = credit.halves()
    if split is not None:
        a, b = (half.step_rates(z) for half in split)
        few = min(a.determined_cells, b.determined_cells) < FEW_CELLS
        lines.append(f"**Spread over continuation noise:** two disjoint halves of the continuations "
                     f"(M={int(split[0].counts.max())} each) find {_pct(a.misattributed, float('nan'))} of "
                     f"{a.determined_cells} and {_pct(b.misattributed, float('nan'))} of {b.determined_cells} "
                     f"determined steps misattributed ({_pct(a.determined, float('nan'))} and "
                     f"{_pct(b.determined, float('nan'))} of {a.cells} steps determined)."
                     + (f" A share of fewer than {FEW_CELLS} cells moves by tens of points with the noise: the "
                        "measurement above, with all continuations, usually determines more." if few else ""))
    if credit.deterministic and reference is not None and not reference.deterministic:
        lines.append(agreement_line(credit, reference, z))
    return "  \n".join(lines)


def agreement_line(credit: Credit, reference: Credit, z: float) -> str:
    """How a cheap estimator's step credit tracks the session's Monte-Carlo credit on the same group."""
    from workbench.rl.credit_stats import agreement

    det = reference.step_classes(z) != UNDETERMINED
    a = agreement(credit.step_credit, reference.step_credit, reference.step_valid, det)
    nan = float("nan")
    return (f"**Against your Monte-Carlo measurement ({k_text(reference)}):** same sign on "
            f"{_pct(a['sign_agreement'], nan)} of the cells, on {_pct(a['sign_agreement_determined'], nan)} "
            f"of the {a['determined_cells']} cells it determines; correlation {a['correlation']:+.2f}; cost "
            f"{credit.cost.get('nfe', 0)} vs {reference.cost.get('nfe', 0)} evaluations.")


def comparison_figure(comparison: CreditComparison, z: float) -> go.Figure:
    """The two policies' classified step credit side by side on one colour scale (same prompt and noise)."""
    first = comparison.credits[0]
    g, t = first.step_credit.shape
    titles = [f"{label}<br>mean reward {float(c.rewards.mean()):.3f}"
              for label, c in zip(comparison.labels, comparison.credits)]
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.06, subplot_titles=titles)
    for n, credit in enumerate(comparison.credits):
        classified_traces(fig, credit.step_credit, credit.step_se, credit.step_classes(z), credit.step_valid,
                          [s - 0.5 for s in range(t + 1)], "step", dict(title="credit<br>(reward)", thickness=12),
                          row=1, col=n + 1, legend=n == 0, scale=comparison.scale)
        fig.update_xaxes(title_text=STEP_AXIS, range=[-0.5, t - 0.5], row=1, col=n + 1)
    shapes = _boundary_shapes(first.sizes) + _boundary_shapes(first.sizes, xref="x2")
    fig.update_yaxes(title_text="trajectory i", autorange="reversed", dtick=1, row=1, col=1)
    fig.update_layout(title=f"Step credit under two policies: the same prompt, start noise and SDE noise (G={g}, "
                            f"T={t}, {k_text(first)}, classified at z = {z:g}, one colour scale)", shapes=shapes,
                      height=480, **layout_with(r=COLORBAR_MARGIN))
    fig.update_annotations(font_size=12)
    return fig


NO_ERROR = (" (no error: one side's determined cells lie in fewer than two trajectories, so one group does not "
            "establish this difference)")


def comparison_text(comparison: CreditComparison, z: float) -> str:
    """Markdown table: each rate under both policies, their difference and its standard error."""
    a, b = comparison.labels
    lines = [f"| rate | {a} | {b} | difference ({b} minus {a}) |", "|---|---|---|---|"]
    names = {"misattributed": "misattributed among determined", "determined": "determined share",
             "mass_against": "credit mass against A"}
    rates = [c.rates(z) for c in comparison.credits]
    for d in comparison.differences(z):
        diff = "not defined (no determined cell on one side)" if d.diff != d.diff else (
            f"{100 * d.diff:+.1f} points" + (NO_ERROR if d.se != d.se else f" ± {100 * d.se:.1f}"))
        sides = [_pct(value, float("nan")) for value in (d.before, d.after)]
        if d.rate == "misattributed":  # a share of the determined cells: how many there were
            counts = [getattr(r, d.unit).determined_cells for r in rates]
            sides = [f"{side} of {n} cell{'' if n == 1 else 's'}" for side, n in zip(sides, counts)]
        lines.append(f"| {d.unit}: {names[d.rate]} | {sides[0]} | {sides[1]} | {diff} |")
    rewards = [float(c.rewards.mean()) for c in comparison.credits]
    lines.append(f"| mean reward of the group | {rewards[0]:.3f} | {rewards[1]:.3f} | "
                 f"{rewards[1] - rewards[0]:+.3f} |")
    first = comparison.credits[0]
    lines.append("")
    lines.append(f"Both groups: prompt *{first.prompt}*, the same start noise and SDE noise, {k_text(first)} "
                 f"continuations with seed {first.seed}, chunks {','.join(map(str, first.sizes))}. ± is the standard "
                 "error of the difference, sqrt(se1² + se2²) over trajectories: the groups share their noise, so it "
                 "overstates the error. A difference within about two of them is not established by one group.")
    return "\n".join(lines)
