"""One cell of the Objectives view as math: an objective's gradient weight at step (i, t) with the cell's
numbers substituted, the way an algorithm explainer walks through one token.

The weights themselves come from autograd (`workbench.rl.explain`); the closed forms here are docs/methods.md
"Gradient weights", shown next to the autograd value so a reader
can check one against the other (tests/test_app_objectives.py checks that they agree for every cell).
Each objective's closed form is its registration's `Formula` (`ObjectiveInfo.formula`, rl/objectives.py); an
objective registered without one is shown with its autograd value only. `formula_parts` says it once; the Objectives
tab shows it as HTML with MathML equations (`formula_html`, `ui.mathml`), `formula_markdown` writes it as Markdown
with LaTeX.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

from workbench.rl.chunking import chunk_ids
from workbench.rl.explain import Explanation, paired_estimator
from workbench.rl.objective_info import Formula, ObjectiveInfo
from workbench.rl.objectives import OBJECTIVES
from workbench.ui.mathml import mathml

W = r"w_{i,t} = \frac{\partial L}{\partial \log p_\theta(x^i_{t+1} \mid x^i_t)}"
RATIO_DEFINITION = {
    "step": r"\rho_{i,t} = e^{\,l_{i,t}}",
    "chunk": r"r_{i,c} = \exp\Big(\frac{1}{|c|}\sum_{s \in c} l_{i,s}\Big)",
    "sequence": r"s_i = \exp\Big(\frac{1}{T_i}\sum_{s} l_{i,s}\Big)",
}


@dataclass
class Cell:
    """The numbers of one (objective, trajectory i, step t) of an Explanation."""

    name: str
    i: int
    t: int
    trained: bool  # step t of trajectory i is trained
    advantage: float  # A_i the objective uses (A_{i,t} for per-step advantages)
    log_ratio: float  # l_{i,t}
    ratio: float  # the ratio the objective uses at (i, t)
    clipped: bool
    weight: float  # w from autograd
    share: float  # |w| / sum |w| of the objective
    eps_low: float
    eps_high: float
    counts: dict  # B, G, T, T_i, N, K_i, |c|, c: the counts the normalisation uses


def _info(name: str) -> ObjectiveInfo:
    return OBJECTIVES.info(name) or ObjectiveInfo()


def _formula(name: str) -> Formula | None:
    return _info(name).formula


def cell(ex: Explanation, name: str, i: int, t: int) -> Cell:
    """The numbers of objective `name` at trajectory i, step t."""
    o = ex.index(name)
    mask = ex.step_mask  # (G, T)
    g, steps = mask.shape
    sizes = {"chunk": ex.settings.chunks, "sequence": [steps]}.get(_info(name).unit, [1] * steps)
    unit = int(chunk_ids(sizes)[t])
    in_unit = chunk_ids(sizes) == unit  # (T,)
    trained_units = {int(u) for u in chunk_ids(sizes)[mask[i]].tolist()}
    counts = {"B": int(mask.any(1).sum()), "G": g, "T": steps, "T_i": int(mask[i].sum()), "N": int(mask.sum()),
              "K_i": len(trained_units), "|c|": int((mask[i] & in_unit).sum()), "c": unit, "K": len(sizes)}
    return Cell(name=name, i=i, t=t, trained=bool(mask[i, t]), advantage=float(ex.step_advantage[o, i, t]),
                log_ratio=float(ex.log_ratio[i, t]), ratio=float(ex.ratio[o, i, t]), clipped=bool(ex.clipped[o, i, t]),
                weight=float(ex.weight[o, i, t]), share=float(ex.share[o, i, t]), eps_low=ex.settings.clip_low,
                eps_high=ex.settings.eps_high, counts=counts)


def closed_form(c: Cell) -> float | None:
    """docs/methods.md "Gradient weights": w at this cell, or None for an objective without a closed form here."""
    form = _formula(c.name)
    if form is None:
        return None
    if not c.trained or c.clipped:
        return 0.0
    scale = 1.0
    for symbol in form.denominator:
        scale *= c.counts[symbol]
    return -c.advantage * (c.ratio if form.ratio_symbol else 1.0) / scale


def _num(x: float, digits: int = 4) -> str:
    """A number for LaTeX: 4 significant digits, powers of ten written out."""
    text = f"{x:.{digits}g}"
    if "e" in text:
        mantissa, exponent = text.split("e")
        return rf"{mantissa} \times 10^{{{int(exponent)}}}"
    return text


@dataclass(frozen=True)
class Math:
    """One display equation of a formula, as LaTeX."""

    tex: str


def _clip_lines(c: Cell, ratio_symbol: str, a: str = "A_i") -> list[Math]:
    """The clip condition, and this cell's numbers with whether it holds (a: the advantage's symbol)."""
    rule = (rf"\text{{clipped}} \iff ({a} > 0 \text{{ and }} {ratio_symbol} > 1 + \varepsilon_{{high}}) \text{{ or }}"
            rf" ({a} < 0 \text{{ and }} {ratio_symbol} < 1 - \varepsilon_{{low}})")
    here = (rf"{a} = {c.advantage:+.3f},\quad {ratio_symbol} = {c.ratio:.6f},\quad "
            rf"[1 - \varepsilon_{{low}},\ 1 + \varepsilon_{{high}}] = [{1 - c.eps_low:.6f},\ {1 + c.eps_high:.6f}]")
    verdict = r"\Rightarrow\ \text{clipped: } w_{i,t} = 0" if c.clipped else r"\Rightarrow\ \text{not clipped}"
    return [Math(rule), Math(rf"{here}\quad {verdict}")]


def formula_parts(c: Cell, when: str) -> list[str | Math]:
    """The objective's w at the cell, its numbers and the autograd value: paragraphs of Markdown text (bold and code
    only) and display equations, in reading order."""
    where = f"trajectory i = {c.i}, step t = {c.t}"
    source = {"critic": "GAE over the critic", "lookahead": "the look-ahead gains"}.get(_info(c.name).step_credit)
    head = (f"**{c.name}** at {where}, {when} (advantage from " +
            (f"{source}, one per step)" if source else f"the `{paired_estimator(c.name)}` estimator)"))
    autograd = (f"Autograd through the registered objective gives **w = {c.weight:.4g}**; this step carries "
                f"**{100 * c.share:.2f} %** of the objective's total |w| on the group.")
    if not c.trained:
        return [head, f"Step {c.t} is not trained (no SDE noise there):", Math(r"w_{i,t} = 0"), autograd]
    formula = _formula(c.name)
    if formula is None:
        return [head, Math(f"{W} = {_num(c.weight)}"), autograd]
    kind, ratio_symbol, form, denominator = _info(c.name).unit, formula.ratio_symbol, formula.latex, formula.denominator
    a = "A_{i,t}" if formula.per_step_advantage else "A_i"
    n = c.counts
    unit = {"step": "", "chunk": f" (chunk c = {n['c']} with |c| = {n['|c|']} trained steps, K_i = {n['K_i']})",
            "sequence": ""}[kind]
    parts: list[str | Math] = [f"{head}{unit}", Math(f"{W} = {form}")]
    if ratio_symbol is None:
        parts.append(Math(rf"\text{{no ratio and no clipping}},\quad {a} = {c.advantage:+.3f}"))
    else:
        parts.append(Math(rf"{RATIO_DEFINITION[kind]} = {c.ratio:.6f},\qquad l_{{i,t}} = {_num(c.log_ratio, 3)}"))
        parts += _clip_lines(c, ratio_symbol, a)
    value = closed_form(c)
    if not c.clipped:
        numerator = f"({c.advantage:+.4f})" + (rf" \times {c.ratio:.6f}" if ratio_symbol else "")
        counts = r" \times ".join(str(n[s]) for s in denominator)
        symbols = ",\\ ".join(f"{s} = {n[s]}" for s in denominator)
        parts.append(Math(rf"{symbols}:\qquad w_{{i,t}} = -\frac{{{numerator}}}{{{counts}}} = {_num(value)}"))
    parts.append(autograd)
    return parts


def formula_markdown(c: Cell, when: str) -> str:
    """`formula_parts` as Markdown with $$-delimited LaTeX (KaTeX in a notebook or a Markdown viewer)."""
    return "\n\n".join(f"$${part.tex}$$" if isinstance(part, Math) else part for part in formula_parts(c, when))


_BOLD, _CODE = re.compile(r"\*\*(.+?)\*\*"), re.compile(r"`(.+?)`")


def formula_html(c: Cell, when: str) -> str:
    """`formula_parts` as HTML, the equations as MathML the browser lays out itself (`ui.mathml`: the Objectives tab's
    cell formula, ~230 elements where KaTeX's were ~860)."""
    out = []
    for part in formula_parts(c, when):
        if isinstance(part, Math):
            out.append(mathml(part.tex))
        else:
            text = _BOLD.sub(r"<b>\1</b>", html.escape(part, quote=False))
            out.append("<p>" + _CODE.sub(r"<code>\1</code>", text) + "</p>")
    return f'<div class="wb-math">{"".join(out)}</div>'
