"""LaTeX as MathML the browser lays out itself: the Objectives tab's cell formula.

A map click's reply carries the clicked cell's formula, four or five display equations. Gradio's Markdown typeset
them with KaTeX in the page: 861 elements of absolutely placed spans, whose script, style and layout took 54 of a map
click's 119 ms with the page's main thread slowed twice, the emulated Xeon of this machine class. Written here as
MathML (`latex2mathml`), the same equations are 227 elements that the browser lays out natively (MathML Core:
Chromium 109+, Firefox, Safari), and they take 10 of 74 ms (docs/performance.md); screen readers read
them as they read KaTeX's hidden MathML copy.

MathML's look comes from a math font (an OpenType MATH table); the app ships STIX Two Math (SIL Open Font License,
`assets/README.md`) and `font_css` names it: with `font-family: math` alone chromium here drew the fractions cramped
and `\\Big(` unstretched in a text font.

`latex2mathml` writes what TeX means but not all of TeX's spacing, which MathML Core takes from each operator's place
in its row; `mathml` mends the cases the workbench's formulas have (`_MENDS`), checked against KaTeX's rendering in
screenshots and by tests/test_mathml.py:
- a sign right after a relation, an opening bracket or a space (`= -0.31`, `(+0.75)`) is a unary sign, drawn
  against its number, not a binary operator with space on both sides;
- `|c|` is one fenced group, its bars tight against c;
- `\\log` is an operator name with thin spaces around it, `:` a relation, and `\\iff` a relation with TeX's
  `\\;` on each side.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

from latex2mathml.converter import convert

ASSETS = Path(__file__).resolve().parent / "assets"
FONT = ASSETS / "stix-two-math.woff2"
FAMILY = "Workbench Math"

_CLOSING = r"\)|\]|&#x00029;|&#x0005D;|&#x0007C;"  # after these a sign is binary: "(a) - b"
_OPERATOR = rf"<mo[^>]*>(?!{_CLOSING})[^<]*</mo>|<mrow>|<mspace[^>]*/>|<mtext>[^<]*</mtext>"  # a unary sign's left
_SIGN = re.compile(rf'({_OPERATOR})<mo>(&#x02212;|&#x0002B;)</mo>')
_BAR = '<mo stretchy="false">&#x0007C;</mo>'
_MENDS = [
    (re.compile(r"<mi>&#x027FA;</mi>"), r'<mspace width="0.2778em" /><mo>&#x027FA;</mo><mspace width="0.2778em" />'),
    (re.compile(r"<mi>:</mi>"), r"<mo>:</mo>"),
    (re.compile(rf"({re.escape(_BAR)})((?:(?!&#x0007C;).)*?)({re.escape(_BAR)})"), r"<mrow>\1\2\3</mrow>"),
    (re.compile(r"<mi>log</mi>"), r'<mspace width="0.1667em" /><mi>log</mi><mspace width="0.1667em" />'),
]
_TAG = re.compile(r"</?([A-Za-z][\w-]*)")  # an element's name; the output may have no element that is not MathML
_OPEN_TAG = re.compile(r"<[A-Za-z][^>]*>")  # an element's start tag, its attributes inside
_ATTRIBUTE = re.compile(r"\s([^\s=/>]+)\s*=")  # an attribute's name inside a start tag
_MATHML_ATTRIBUTES = {  # presentation attributes: none of them can load, link or run anything (href, style, on* can)
    "xmlns", "display", "displaystyle", "scriptlevel", "mathvariant", "mathcolor", "mathsize", "stretchy", "fence",
    "separator", "form", "lspace", "rspace", "minsize", "maxsize", "symmetric", "largeop", "movablelimits", "accent",
    "accentunder", "width", "height", "depth", "voffset", "linethickness", "linebreak", "columnalign", "rowalign",
    "columnspacing", "rowspacing", "columnlines", "rowlines", "frame", "notation", "open", "close", "separators",
    "encoding"}
_MATHML_TAGS = {"math", "mrow", "mi", "mo", "mn", "ms", "mtext", "mspace", "msub", "msup", "msubsup", "munder", "mover",
                "munderover", "mfrac", "msqrt", "mroot", "mstyle", "mtable", "mtr", "mtd", "mpadded", "mphantom",
                "menclose", "merror", "mmultiscripts", "mprescripts", "none", "semantics", "annotation"}


def mathml(tex: str, display: bool = True) -> str:
    """`tex` as a <math> element, with the spacing mends above. LaTeX the converter cannot read, and output with any
    element that is not MathML (the converter copies `\\text{...}` as it is, markup included) or any attribute that
    is not presentational (`\\href{javascript:...}` becomes an href, `\\style` a style), come back as the source in
    <code>, so a formula never breaks the view, links anywhere or writes markup of its own.

        >>> mathml("A_i = -0.31", display=False)[:60]
        '<math xmlns="http://www.w3.org/1998/Math/MathML" display="in'
    """
    try:
        out = convert(tex, display="block" if display else "inline")
    except Exception:  # noqa: BLE001 - latex2mathml's errors share no base of their own
        return f"<code>{html.escape(tex)}</code>"
    attributes = {name.lower() for tag in _OPEN_TAG.findall(out) for name in _ATTRIBUTE.findall(tag)}
    if not {name.lower() for name in _TAG.findall(out)} <= _MATHML_TAGS or not attributes <= _MATHML_ATTRIBUTES:
        return f"<code>{html.escape(tex)}</code>"
    for pattern, repl in _MENDS:
        out = pattern.sub(repl, out)
    while True:  # a sign after a sign ("= -(+0.75)"): each pass mends one of a pair
        mended = _SIGN.sub(r'\1<mo form="prefix">\2</mo>', out)
        if mended == out:
            return out
        out = mended


def font_css(url: str) -> str:
    """The page's rules for MathML under `.wb-math`: the shipped math font at `url`, and KaTeX's display spacing."""
    return (f'@font-face {{ font-family: "{FAMILY}"; src: url("{url}") format("woff2"); font-display: swap; }}\n'
            f'.wb-math math {{ font-family: "{FAMILY}", math; font-size: 1.2em; }}\n'
            ".wb-math math[display=block] { margin: 0.8em 0; }\n"
            ".wb-math p { margin: 0.5em 0; }")
