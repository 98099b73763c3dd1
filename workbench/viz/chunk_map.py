"""The Chunks tab's chunk map as one SVG in HTML: classified chunk credit (G, K), each chunk drawn over its steps.

Why not plotly: a chunk edit changes every cell of the map, and any change to a plotly figure's data makes plotly
draw the whole figure again (defaults, axes, colour bar, legend, traces); the same map as markup is replaced in a few
milliseconds (docs/performance.md). It draws what `credit_view.chunk_figure` draws for the notebooks and the exported
page, with the same encodings (credit_view's docstring) and colour scale: colour = credit on plotly's "RdBu" scale,
symmetric about 0 at the map's largest |credit|; x = misattributed; dot = aligned; grey cover = undetermined; white
veil = not counted; dashed lines = chunk boundaries. Hovering a cell shows its credit, standard error and class (the
browser's tooltip).
"""

from __future__ import annotations

import html

from workbench.rl.chunking import chunk_boundaries
from workbench.rl.credit import Credit
from workbench.rl.credit_stats import ALIGNED, MISATTRIBUTED, UNDETERMINED
from workbench.viz import credit_view as cv
from workbench.viz.plots import STEP_AXIS
from workbench.viz.svg import FONT, INK, colour_bar, css, nice_step, over, scale_colour, text

WIDTH, HEIGHT = 1200, 380  # the drawing's own units (px at a 1200 px wide map); it scales to the page's width
LEFT, RIGHT, TOP, BOTTOM = 70, 125, 10, 56  # margins: tick labels and axis titles, the colour bar on the right

CSS = """
.wb-chunk-map { font-family: FONT; color: INK; padding: 8px 4px; }
.wb-chunk-map .wb-map-title { font-size: 17px; margin: 4px 0 0 60px; }
.wb-chunk-map svg.wb-map { display: block; width: 100%; height: auto; }
.wb-chunk-map rect.cell { shape-rendering: crispEdges; }
.wb-chunk-map rect.cell:hover { stroke: #222; stroke-width: 2; }
.wb-chunk-map .wb-map-legend { display: flex; flex-wrap: wrap; gap: 4px 24px; font-size: 12px; margin: 2px 0 0 80px; }
.wb-chunk-map .wb-map-legend span { display: inline-flex; align-items: center; gap: 6px; }
.wb-chunk-map .wb-map-hint { font-size: 14px; padding: 120px 0; text-align: center; }
""".replace("FONT", FONT).replace("INK", INK)


def credit_colour(value: float, scale: float) -> tuple[float, float, float]:
    """The colour plotly gives `value` on the "RdBu" scale with zmin=-scale, zmid=0, zmax=scale."""
    return scale_colour(value, scale, "RdBu")


def _mark(cls: int, x: float, y: float) -> str:
    """The class mark at a cell's centre: x for misattributed, a dot for aligned (credit_view.MARKS)."""
    if cls == MISATTRIBUTED:
        d = cv.MARKS[MISATTRIBUTED][1] / 2 - 1
        return (f'<path d="M{x - d:.1f},{y - d:.1f}L{x + d:.1f},{y + d:.1f}M{x - d:.1f},{y + d:.1f}L{x + d:.1f},'
                f'{y - d:.1f}" stroke="black" stroke-width="2" pointer-events="none"/>')
    return (f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{cv.MARKS[ALIGNED][1] / 2:g}" fill="black" stroke="white" '
            'stroke-width="1" pointer-events="none"/>')


def _legend() -> str:
    """The encodings, as markup under the map (credit_view.MARKS and the two covers)."""
    def icon(body: str) -> str:
        return f'<svg width="14" height="14" viewBox="-7 -7 14 14" aria-hidden="true">{body}</svg>'

    square = '<rect x="-6" y="-6" width="12" height="12" fill="{}" stroke="gray"/>'
    items = [(icon(_mark(MISATTRIBUTED, 0, 0)), cv.MARKS[MISATTRIBUTED][2]),
             (icon(_mark(ALIGNED, 0, 0)), cv.MARKS[ALIGNED][2]),
             (icon(square.format(cv.UNDETERMINED_COLOR)), cv.UNDETERMINED_NAME),
             (icon(square.format(cv.NOT_COUNTED_SWATCH)), cv.NOT_COUNTED_NAME)]
    return "".join(f"<span>{mark}{html.escape(name)}</span>" for mark, name in items)


def chunk_map_html(credit: Credit, z: float) -> str:
    """The classified chunk credit of `credit` at z as HTML: a title, an SVG map and its legend."""
    g, t = credit.chunk_credit.shape[0], credit.num_steps
    labels = cv.class_labels(credit.chunk_classes(z), credit.chunk_valid)  # (G, K) each, as lists
    classes, valid = credit.chunk_classes(z).tolist(), credit.chunk_valid.tolist()
    values, se = credit.chunk_credit.tolist(), credit.chunk_se.tolist()
    scale = float(credit.chunk_credit.nan_to_num(0.0).abs().max().clamp_min(1e-6))
    edges = [-0.5] + [b - 0.5 for b in chunk_boundaries(credit.sizes)] + [t - 0.5]
    x0, x1, y0, y1 = LEFT, WIDTH - RIGHT, TOP, HEIGHT - BOTTOM
    px = lambda s: x0 + (s + 0.5) / t * (x1 - x0)  # noqa: E731 - step -> drawing x
    row = (y1 - y0) / g
    cells, marks = [], []
    for i in range(g):
        for k, (a, b) in enumerate(zip(edges, edges[1:])):
            v, s = values[i][k], se[i][k]
            colour = credit_colour(v, scale)
            if not valid[i][k]:
                colour = over(colour, cv.VEIL_COLOR)
            elif classes[i][k] == UNDETERMINED:
                colour = over(colour, cv.UNDETERMINED_COLOR)
            tip = (f"traj {i}, chunk {k}{cv.span_text(a, b, 'chunk')}: credit {v:.4f} ± "
                   f"{'no estimate' if s != s else f'{s:.4f}'} ({labels[i][k]})")
            cells.append(f'<rect class="cell" x="{px(a):.1f}" y="{y0 + i * row:.1f}" width="{px(b) - px(a):.1f}" '
                         f'height="{row:.1f}" fill="{css(colour)}"><title>{html.escape(tip)}</title></rect>')
            if valid[i][k] and classes[i][k] in (MISATTRIBUTED, ALIGNED):
                marks.append(_mark(classes[i][k], (px(a) + px(b)) / 2, y0 + (i + 0.5) * row))
    lines = [f'<line class="boundary" data-x="{b:g}" x1="{px(b):.1f}" x2="{px(b):.1f}" y1="{y0}" y2="{y1}" '
             'stroke="black" stroke-width="2" stroke-dasharray="9,9"/>' for b in edges[1:-1]]
    dx = nice_step(t, 10)
    ticks = [text(px(s), y1 + 18, f"{s:g}") for s in range(0, t, int(max(dx, 1)))]
    ticks += [text(x0 - 8, y0 + (i + 0.5) * row + 4, str(i), anchor="end") for i in range(g)]
    axes = [text((x0 + x1) / 2, y1 + 45, STEP_AXIS, size=14), text(x0 - 40, (y0 + y1) / 2, "trajectory i", size=14,
                                                                   rotate=True)]
    title = f"Chunk credit V(end) - V(start), classified at z = {z:g} ({cv.k_text(credit)})"
    bar = colour_bar(scale, x1 + 30, y0, y1, "credit (reward)", "wb-chunk-rdbu")
    svg = (f'<svg class="wb-map" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{html.escape(title)}" '
           f'font-family=\'{FONT}\'>' + "".join(cells + marks + lines + ticks + axes + bar) + "</svg>")
    return (f'<div class="wb-chunk-map"><div class="wb-map-title">{html.escape(title)}</div>'
            f'{svg}<div class="wb-map-legend">{_legend()}</div></div>')


def chunk_map_hint(hint: str) -> str:
    """The map's place before there is credit to classify: its title and what to do."""
    return (f'<div class="wb-chunk-map"><div class="wb-map-title">Chunk credit</div>'
            f'<div class="wb-map-hint">{html.escape(hint)}</div></div>')
