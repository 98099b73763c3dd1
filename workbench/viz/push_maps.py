"""The Objectives tab's maps as one SVG in HTML: every objective's push -w on every (trajectory, step), small multiples.

It draws what `explain_plots.objective_maps_figure` draws for the notebooks and the exported page, with the same
encodings: one row of maps per (key, title, Explanation); the first column holds the measured credit (first row) or
the log-ratio l (later rows); blue raises a step's log-prob, red lowers it, on one symmetric "RdBu" scale for all
maps (or one per map); x = a clipped unit; dashed lines = chunk boundaries of objectives whose units are chunks; a gold
outline marks the selected cell. Each map is a `g.panel` whose `data-trace` is "<row key>|<objective>" ("credit",
"log-ratio" in the first column) and whose place is in its data-x/y/w/h: the page finds a clicked cell and moves the
outline from them (ui/figures.py), and shows a cell's values from the panel's data-z / data-ratio / data-clipped.
Each map's cells are one small PNG, a pixel a cell, scaled up unsmoothed. As markup, a click or a new selection
moves one rectangle, where plotly drew every map again.
"""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Sequence

import torch
from PIL import Image

from workbench.rl.chunking import chunk_boundaries
from workbench.rl.explain import Explanation
from workbench.viz.explain_plots import PUSH, chunked_units, corr_text, push_scale
from workbench.viz.svg import FONT, INK, colour_bar, scale_colour, text

WIDTH = 1200  # the drawing's own units; it scales to the page's width
LEFT, RIGHT, GAP = 130, 95, 7  # margins (the credit and l colour bars left, the push bar right) and between maps
TOP, HEADING, PANEL, UNDER = 72, 46, 150, 24  # the title; per row: the maps' titles, a map, its ticks
OUTLINE_SLOT = "<!--outline-->"  # where `with_outline` puts the selected cell's outline
GOLD = "gold"  # SELECTED_STYLE's colour

CSS = """
.wb-maps { font-family: FONT; color: INK; padding: 4px; position: relative; }
.wb-maps svg { display: block; width: 100%; height: auto; }
.wb-maps g.panel { cursor: pointer; }
.wb-maps image.cells { image-rendering: pixelated; }
.wb-maps .wb-tip { position: absolute; pointer-events: none; background: white; border: 1px solid #aab;
                   padding: 3px 6px; font-size: 12px; white-space: nowrap; display: none; z-index: 5; }
.wb-maps .wb-maps-hint { font-size: 14px; padding: 120px 0; text-align: center; }
""".replace("FONT", FONT).replace("INK", INK)


def _geometry(rows: int, columns: int) -> tuple[float, float]:
    """(map width, drawing height) of a grid of rows x columns maps."""
    width = (WIDTH - LEFT - RIGHT - GAP * (columns - 1)) / columns
    return width, TOP + rows * (HEADING + PANEL + UNDER) + 26


def panel_origin(row: int, column: int, columns: int) -> tuple[float, float]:
    """The top-left corner (drawing units) of the map in row `row`, column `column` (from 0) of the grid."""
    width, _ = _geometry(1, columns)
    return LEFT + column * (width + GAP), TOP + row * (HEADING + PANEL + UNDER) + HEADING


def cells_png(values: list, scale: float, colours: str) -> str:
    """A map (G, T) of `values` on the named colour scale at +-scale as a G x T pixel PNG, one pixel a cell, as a data
    URI: the page scales it up without smoothing (CSS `image-rendering: pixelated`)."""
    g, t = len(values), len(values[0])
    image = Image.new("RGB", (t, g))
    image.putdata([tuple(round(c) for c in scale_colour(v, scale, colours)) for row in values for v in row])
    out = io.BytesIO()
    image.save(out, format="PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode("ascii")


def _panel(trace: str, kind: str, values: list, x: float, y: float, w: float, scale: float, colours: str,
           extra: dict | None = None) -> list[str]:
    """One map (G, T) of `values` on the named colour scale at +-scale, as a g.panel holding one image of its cells
    (`cells_png`): 20 maps of 128 cells were 2,560 rectangles for the page to lay out and for Gradio to carry in the
    component's value on every update."""
    data = {"z": json.dumps([[float(f"{v:.4g}") if v == v else None for v in row] for row in values]), **(extra or {})}
    attrs = "".join(f' data-{key}="{html.escape(value)}"' for key, value in data.items())
    return [f'<g class="panel" data-trace="{html.escape(trace)}" data-kind="{kind}" data-x="{x:.1f}" data-y="{y:.1f}" '
            f'data-w="{w:.1f}" data-h="{PANEL}"{attrs}>',
            f'<image class="cells" x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{PANEL}" '
            f'preserveAspectRatio="none" href="{cells_png(values, scale, colours)}"/>', "</g>"]


def _clip_marks(clipped: torch.Tensor, x: float, y: float, w: float) -> str:
    """An x on every clipped unit of one map (clipped (G, T) bool), as one path."""
    g, t = clipped.shape
    cw, ch = w / t, PANEL / g
    d = min(cw, ch) * 0.3
    moves = "".join(f"M{x + (k + 0.5) * cw - d:.1f},{y + (i + 0.5) * ch - d:.1f}l{2 * d:.1f},{2 * d:.1f}"
                    f"m0,{-2 * d:.1f}l{-2 * d:.1f},{2 * d:.1f}" for i, k in clipped.nonzero().tolist())
    return f'<path d="{moves}" stroke="black" stroke-width="1.3" pointer-events="none"/>' if moves else ""


def _heading(x: float, y: float, w: float, lines: list[str], bold_first: bool = False) -> list[str]:
    """A map's title: up to three short lines, centred over it and ending just above it."""
    top = y - 8 - 12.5 * (len(lines) - 1)
    return [text(x + w / 2, top + 12.5 * n, line, size=10.5 if n == 0 else 10, bold=bold_first and n == 0)
            for n, line in enumerate(lines)]


def push_maps_html(rows: Sequence[tuple[str, str, Explanation]], credit: torch.Tensor | None,
                   scale_each: bool = False) -> str:
    """Every objective's push map for each row (key, title, Explanation), and the credit (G, T) or log-ratio maps, as
    HTML; its outline goes where `with_outline` puts it (OUTLINE_SLOT). scale_each: every map on its own scale."""
    names, (g, t) = rows[0][2].names, rows[0][2].log_ratio.shape
    columns = len(names) + 1
    w, height = _geometry(len(rows), columns)
    scale = push_scale(*[-ex.weight for _, _, ex in rows])
    corr = {key: ex.correlation(credit).tolist() if credit is not None else None for key, _, ex in rows}
    heading = ("What each objective pushes on each step: −dL/d log p(i,t), "
               + ("each map on its own colour scale" if scale_each else "one colour scale"))
    parts = [text(WIDTH / 2, 24, heading, size=16),
             text(WIDTH / 2, 44, "rows of a map: trajectories i; columns: steps t; x: a clipped unit (no gradient); "
                                 "click a cell for its formula", size=12)]
    for r, (key, title, ex) in enumerate(rows):
        x, y = panel_origin(r, 0, columns)
        if r == 0 and credit is not None:
            spread = float(credit.nan_to_num(0.0).abs().max().clamp_min(1e-12))
            parts += _panel("credit", "credit", credit.tolist(), x, y, w, spread, "RdBu")
            parts += colour_bar(spread, 12, y, y + PANEL, "credit", "wb-maps-credit", title_above=True, size=10)
            first = "credit d(i,t)"
        elif r > 0:
            spread = float(ex.log_ratio.abs().max().clamp_min(1e-12))
            parts += _panel("log-ratio", "l", ex.log_ratio.tolist(), x, y, w, spread, "PuOr")
            parts += colour_bar(spread, 12, y, y + PANEL, "l", "wb-maps-l", "PuOr", title_above=True, size=10)
            first = "log-ratio l(i,t)"
        else:
            parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{PANEL}" fill="#f4f4f4"/>')
            first = "no credit yet"
        parts += _heading(x, y, w, [title, first], bold_first=True)
        parts += [text(x - 4, y + (i + 0.5) * PANEL / g + 3.5, str(i), anchor="end", size=10) for i in range(0, g, 2)]
        for o, name in enumerate(names):
            x, _ = panel_origin(r, o + 1, columns)
            push = -ex.weight[o]  # (G, T)
            own = push_scale(*[-e.weight[o] for _, _, e in rows]) if scale_each else None
            extra = {"ratio": json.dumps([[float(f"{v:.6g}") if v == v else None for v in row]
                                          for row in ex.ratio[o].tolist()]),
                     "clipped": "".join("1" if c else "0" for c in ex.clipped[o].flatten().tolist())}
            parts += _panel(f"{key}|{name}", "push", push.tolist(), x, y, w, own or scale, "RdBu", extra)
            parts.append(_clip_marks(ex.clipped[o], x, y, w))
            if chunked_units(name) and ex.settings.chunks:
                parts += [f'<line x1="{x + b * w / t:.1f}" x2="{x + b * w / t:.1f}" y1="{y:.1f}" y2="{y + PANEL:.1f}" '
                          'stroke="black" stroke-width="1" stroke-dasharray="5,4" pointer-events="none"/>'
                          for b in chunk_boundaries(ex.settings.chunks)]
            lines = [name] + ([f"corr {corr_text(corr[key][o])}"] if corr[key] is not None else [])
            lines += [f"scale ±{own:.2g}"] if own else [_smaller(rows, o, scale)] if _smaller(rows, o, scale) else []
            parts += _heading(x, y, w, lines)
        for column in range(columns):  # steps 0 and T/2: a tick at T - 1 ran into the next map
            x, _ = panel_origin(r, column, columns)
            parts += [text(x + (s + 0.5) * w / t, y + PANEL + 13, str(s), size=10) for s in range(0, t, max(1, t // 2))]
    x_right = WIDTH - RIGHT + 14
    if not scale_each:
        y_first, y_last = panel_origin(0, 0, columns)[1], panel_origin(len(rows) - 1, 0, columns)[1] + PANEL
        parts += colour_bar(scale, x_right, y_first, y_last, PUSH, "wb-maps-push", size=10)
    parts.append(text((LEFT + WIDTH - RIGHT) / 2, height - 8, "step t", size=12))
    return (f'<div class="wb-maps"><svg viewBox="0 0 {WIDTH} {height:.0f}" data-rows="{g}" data-cols="{t}" role="img" '
            f'aria-label="{html.escape(heading)}" font-family=\'{FONT}\'>' + "".join(parts) + OUTLINE_SLOT
            + '</svg><div class="wb-tip"></div></div>')


def _smaller(rows, o: int, scale: float) -> str:
    """A map's note when objective o's largest push is 10x or more below the shared scale's end."""
    own = max(float(ex.weight[o].abs().max()) for _, _, ex in rows)
    return f"max 1/{scale / own:.0f} of scale" if own > 0 and scale / own >= 10 else ""


def outline(rows: Sequence[tuple[str, str, Explanation]], selected: tuple[str, str, int, int] | None) -> dict | None:
    """Where the outline of selected = (row key, objective, i, t) goes: {"trace", "i", "t"}; None where no map of
    these rows shows it."""
    if selected is None:
        return None
    key, name, i, t = selected
    if key not in [k for k, _, _ in rows] or name not in rows[0][2].names:
        return None
    return {"trace": f"{key}|{name}", "i": int(i), "t": int(t)}


def with_outline(markup: str, rows: Sequence[tuple[str, str, Explanation]], place: dict | None) -> str:
    """The maps of `push_maps_html(rows, ...)` with the gold outline on the cell `place` ({"trace", "i", "t"} as
    `outline` gives it; None: no outline)."""
    if place is None:
        return markup.replace(OUTLINE_SLOT, "")
    keys, names = [k for k, _, _ in rows], rows[0][2].names
    key, name = place["trace"].split("|", 1)
    (g, t), columns = rows[0][2].log_ratio.shape, len(names) + 1
    w, _ = _geometry(len(rows), columns)
    x, y = panel_origin(keys.index(key), names.index(name) + 1, columns)
    box = (f'<rect class="wb-outline" x="{x + place["t"] * w / t:.1f}" y="{y + place["i"] * PANEL / g:.1f}" '
           f'width="{w / t:.1f}" height="{PANEL / g:.1f}" fill="none" stroke="{GOLD}" stroke-width="3" '
           'pointer-events="none"/>')
    return markup.replace(OUTLINE_SLOT, box)


def maps_hint(hint: str) -> str:
    """The maps' place before there are maps: what to do."""
    return f'<div class="wb-maps"><div class="wb-maps-hint">{html.escape(hint)}</div></div>'
