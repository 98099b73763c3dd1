"""The Chunks tab's temporal-dynamics curve as one SVG in HTML, with a column per step that a click toggles.

It draws what `plots.dynamics_figure` draws for the notebooks and the exported page: GCPO's L1_rel curve (the mean
over the model's trajectories, with its 10-90 % band), the chunk boundaries as dashed lines at b - 0.5 and the title
naming the chunks. Every step t has a transparent column over the plot's height (`rect.step`, `data-step`): a click
anywhere above step t asks to toggle the boundary after t (ui/figures.py sends it to the handler), and hovering it
shows the step's values (the browser's tooltip).
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import torch

from workbench.rl.chunking import chunk_boundaries
from workbench.viz.plots import BOUNDARY_STYLE, DYNAMICS_Y, STEP_AXIS, dynamics_title
from workbench.viz.svg import FONT, GRID, INK, nice_step, text, tick_label

WIDTH, HEIGHT = 1200, 430  # the drawing's own units; it scales to the page's width
LEFT, RIGHT, TOP, BOTTOM = 80, 25, 70, 95  # margins: title, tick labels, axis titles and the legend
BLUE = "rgb(31,119,180)"  # plotly's first colour, as dynamics_figure draws the mean
BAND = "rgba(31,119,180,0.2)"

CSS = """
.wb-curve { font-family: FONT; color: INK; padding: 4px; }
.wb-curve svg { display: block; width: 100%; height: auto; }
.wb-curve rect.step { fill: transparent; cursor: pointer; }
.wb-curve rect.step:hover { fill: rgba(42, 63, 95, 0.07); }
.wb-curve .wb-curve-hint { font-size: 14px; padding: 120px 0; text-align: center; }
""".replace("FONT", FONT).replace("INK", INK)


def dynamics_html(mean: torch.Tensor, low: torch.Tensor, high: torch.Tensor, sizes: Sequence[int],
                  trajectories: int, prompts: int | None = None) -> str:
    """The curve mean (T,) with its 10-90 % band (low, high (T,)) and the boundaries of chunks `sizes`, as HTML."""
    t = mean.shape[0]
    means, lows, highs = mean.tolist(), low.tolist(), high.tolist()
    top, bottom = max(highs + means), min(lows + means)
    pad = 0.06 * ((top - bottom) or abs(top) or 1.0)  # the room plotly's autorange leaves around markers
    y_lo, y_hi = bottom - pad, top + pad
    x0, x1, y0, y1 = LEFT, WIDTH - RIGHT, TOP, HEIGHT - BOTTOM
    px = lambda s: x0 + (s + 0.5) / t * (x1 - x0)  # noqa: E731 - step -> drawing x
    py = lambda v: y1 - (v - y_lo) / (y_hi - y_lo) * (y1 - y0)  # noqa: E731 - L1_rel -> drawing y
    step = nice_step(y_hi - y_lo, 6)
    levels = [k * step for k in range(int(y_lo // step) + 1, int(y_hi // step) + 1)]
    grid = [f'<line x1="{x0}" x2="{x1}" y1="{py(v):.1f}" y2="{py(v):.1f}" stroke="{GRID}"/>' for v in levels]
    ticks = [text(x0 - 6, py(v) + 4, tick_label(v, step), anchor="end") for v in levels]
    ticks += [text(px(s), y1 + 18, str(s)) for s in range(0, t, int(max(nice_step(t, 12), 1)))]
    band = " ".join(f"{px(s):.1f},{py(v):.1f}" for s, v in [*enumerate(highs), *reversed(list(enumerate(lows)))])
    line = " ".join(f"{px(s):.1f},{py(v):.1f}" for s, v in enumerate(means))
    dots = [f'<circle cx="{px(s):.1f}" cy="{py(v):.1f}" r="3.5" fill="{BLUE}"/>' for s, v in enumerate(means)]
    width = (x1 - x0) / t
    columns = [f'<rect class="step" data-step="{s}" x="{px(s) - width / 2:.1f}" y="{y0}" width="{width:.1f}" '
               f'height="{y1 - y0}"><title>step {s}: mean L1_rel {v:.4g} (10-90 %: {a:.4g} to {b:.4g}); click to '
               f"toggle the chunk boundary after step {s}</title></rect>"
               for s, (v, a, b) in enumerate(zip(means, lows, highs))]
    dash = f'stroke="black" stroke-width="{BOUNDARY_STYLE["width"]}" stroke-dasharray="9,9"'
    lines = [f'<line class="boundary" data-x="{b - 0.5:g}" x1="{px(b - 0.5):.1f}" x2="{px(b - 0.5):.1f}" y1="{y0}" '
             f'y2="{y1}" {dash} pointer-events="none"/>' for b in chunk_boundaries(sizes)]
    title, sub = dynamics_title(sizes, trajectories, prompts)
    legend_y = HEIGHT - 14
    legend = [f'<rect x="{x0}" y="{legend_y - 9}" width="26" height="10" fill="{BAND}"/>',
              text(x0 + 32, legend_y, f"10-90 % over {trajectories} trajectories", anchor="start"),
              f'<line x1="{x0 + 300}" x2="{x0 + 326}" y1="{legend_y - 4}" y2="{legend_y - 4}" stroke="{BLUE}" '
              'stroke-width="2"/>', f'<circle cx="{x0 + 313}" cy="{legend_y - 4}" r="3.5" fill="{BLUE}"/>',
              text(x0 + 332, legend_y, "mean L1_rel", anchor="start"),
              f'<line x1="{x0 + 450}" x2="{x0 + 476}" y1="{legend_y - 4}" y2="{legend_y - 4}" {dash}/>',
              text(x0 + 482, legend_y, "chunk boundary", anchor="start")]
    parts = [text(x0, 26, title, anchor="start", size=17), text(x0, 48, sub, anchor="start", size=12),
             *grid, f'<polygon points="{band}" fill="{BAND}" pointer-events="none"/>',
             f'<polyline points="{line}" fill="none" stroke="{BLUE}" stroke-width="2" pointer-events="none"/>',
             '<g pointer-events="none">', *dots, "</g>", *columns, *lines, *ticks,
             text((x0 + x1) / 2, y1 + 44, STEP_AXIS, size=14),
             text(22, (y0 + y1) / 2, DYNAMICS_Y, size=13, rotate=True), *legend]
    return (f'<div class="wb-curve"><svg viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{html.escape(title)}" '
            f"font-family='{FONT}'>" + "".join(parts) + "</svg></div>")


def dynamics_hint(hint: str) -> str:
    """The curve's place before there is a curve: what to do."""
    return f'<div class="wb-curve"><div class="wb-curve-hint">{html.escape(hint)}</div></div>'
