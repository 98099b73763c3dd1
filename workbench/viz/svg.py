"""Pieces of the app's figures drawn as SVG markup: colours on plotly's scales, tick labels, text, colour bars.

The figures a learner clicks or edits in the app (the chunk map, the temporal-dynamics curve, the objectives' maps) are
markup the server draws, shown by `gr.HTML` components (ui/figures.py): a change replaces a few kB of text in
milliseconds, where plotly drew a whole figure again, and the page needs no script of plotly's or Gradio's to find a
clicked cell. They read like the plotly figures the notebooks and the exported page draw: plotly's font, ink,
colour scales, tick spacing and minus sign.
"""

from __future__ import annotations

import functools
import html
import math

from plotly.colors import get_colorscale

FONT = '"Open Sans", verdana, arial, sans-serif'  # plotly's
INK = "#2a3f5f"  # plotly_white's text colour
GRID = "#ebf0f8"  # plotly_white's grid lines
MINUS = "\u2212"  # plotly's minus sign in tick labels


@functools.cache
def stops(name: str) -> tuple[tuple[float, tuple[float, float, float]], ...]:
    """plotly's named colour scale (e.g. "RdBu", "PuOr") as ((position in [0, 1], (r, g, b)), ...)."""
    return tuple((float(at), rgb(colour)[:3]) for at, colour in get_colorscale(name))


def rgb(text: str) -> tuple[float, float, float, float]:
    """'rgb(1,2,3)' or 'rgba(1,2,3,0.5)' -> (r, g, b, alpha)."""
    parts = [float(p) for p in text[text.index("(") + 1:-1].split(",")]
    return (*parts[:3], parts[3] if len(parts) == 4 else 1.0)


def scale_colour(value: float, scale: float, name: str = "RdBu") -> tuple[float, float, float]:
    """The colour plotly gives `value` on the named scale with zmin=-scale, zmid=0, zmax=scale: the scale's stops
    interpolated linearly in RGB, as plotly.js does; values beyond the ends take the end colours, NaN is white."""
    if value != value:
        return 255.0, 255.0, 255.0
    points = stops(name)
    at = min(max((value / scale + 1) / 2, 0.0), 1.0)
    for (a, ca), (b, cb) in zip(points, points[1:]):
        if at <= b:
            w = 0.0 if b == a else (at - a) / (b - a)
            return tuple(x + w * (y - x) for x, y in zip(ca, cb))
    return points[-1][1]


def over(base: tuple[float, float, float], cover: str) -> tuple[float, float, float]:
    """`cover` (with its alpha) painted over the opaque colour base."""
    *colour, alpha = rgb(cover)
    return tuple(alpha * c + (1 - alpha) * b for c, b in zip(colour, base))


def css(colour: tuple[float, float, float]) -> str:
    return "rgb({},{},{})".format(*(round(c) for c in colour))


def nice_step(span: float, most: int) -> float:
    """The smallest of 1, 2, 5 x 10^n that cuts span into at most `most` steps (plotly's tick spacing)."""
    raw = span / most
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def tick_label(value: float, step: float) -> str:
    """A tick label as plotly writes it: the step's decimals (or its exponent, for steps below 1e-4), 0 plain, a true
    minus sign."""
    if value == 0:
        return "0"
    if step < 1e-4:
        text = f"{value:.1e}".replace("e-0", "e-")
    else:
        text = f"{value:.{max(0, -math.floor(math.log10(step) + 1e-9))}f}"
    return MINUS + text[1:] if text.startswith("-") else text


def text(x: float, y: float, body: str, anchor: str = "middle", size: float = 12, rotate: bool = False,
         bold: bool = False) -> str:
    """An SVG text element in plotly's ink, escaped; rotate: reads bottom to top (a vertical axis title)."""
    turn = f' transform="rotate(-90 {x:.1f} {y:.1f})"' if rotate else ""
    weight = ' font-weight="bold"' if bold else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size:g}" fill="{INK}"{weight}{turn}>'
            f"{html.escape(body)}</text>")


def colour_bar(scale: float, x: float, y0: float, y1: float, title: str, ident: str, name: str = "RdBu",
               title_above: bool = False, size: float = 12) -> list[str]:
    """A vertical bar of the named scale from -scale (bottom) to +scale (top) with its ticks (right of it) and title
    (along its right side, or above it); `ident` names its gradient, unique in the page."""
    gradient = "".join(f'<stop offset="{1 - at:g}" stop-color="{css(c)}"/>' for at, c in reversed(stops(name)))
    parts = [f'<defs><linearGradient id="{ident}" x1="0" y1="0" x2="0" y2="1">{gradient}</linearGradient></defs>',
             f'<rect x="{x:.1f}" y="{y0:.1f}" width="10" height="{y1 - y0:.1f}" fill="url(#{ident})"/>']
    step = nice_step(2 * scale, 5)
    for k in range(-math.floor(scale / step), math.floor(scale / step) + 1):
        y = y0 + (y1 - y0) * (1 - (k * step / scale + 1) / 2)
        parts.append(text(x + 14, y + size / 3, tick_label(k * step, step), anchor="start", size=size))
    if title_above:
        parts.append(text(x + 5, y0 - 8, title, size=size + 1))
    else:
        parts.append(text(x + 6 * size, (y0 + y1) / 2, title, size=size + 2, rotate=True))
    return parts
