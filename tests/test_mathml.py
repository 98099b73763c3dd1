"""The cell formula as HTML and MathML (workbench/ui/mathml.py, formulas.formula_html): every registered objective's
equations convert, the spacing mends land where TeX puts its spacing and nowhere else, and the HTML says what the
Markdown says."""

from __future__ import annotations

import re

import pytest
import torch

from workbench.rl.explain import explain
from workbench.rl.objectives import OBJECTIVES, ObjectiveSettings
from workbench.ui.formulas import Math, cell, formula_html, formula_markdown, formula_parts
from workbench.ui.mathml import FONT, mathml

MATH = '<math xmlns="http://www.w3.org/1998/Math/MathML" display="block">'
PREFIX = '<mo form="prefix">'


@pytest.fixture(scope="module")
def explanation():
    """Every registered objective on a small group: some cells clipped, one step untrained."""
    gen = torch.Generator().manual_seed(0)
    old = -torch.rand(3, 4, generator=gen, dtype=torch.float64)  # (G, T)
    new = old + 0.05 * torch.randn(3, 4, generator=gen, dtype=torch.float64)
    adv = torch.tensor([1.0, -0.5, 0.2], dtype=torch.float64)  # (G,)
    mask = torch.ones(3, 4, dtype=torch.bool)
    mask[:, 3] = False  # the last step untrained
    return explain(new, old, adv, ObjectiveSettings(clip_low=0.01, chunks=[2, 2]), step_mask=mask)


def test_every_objectives_formula_converts_and_says_what_the_markdown_says(explanation):
    clipped = 0
    for name in OBJECTIVES.names():
        for i in range(3):
            for t in range(4):
                c = cell(explanation, name, i, t)
                clipped += c.clipped
                parts, page = formula_parts(c, "now"), formula_html(c, "now")
                equations = [p for p in parts if isinstance(p, Math)]
                assert page.count(MATH) == len(equations) and "<code>\\" not in page  # none fell back to source
                assert page.startswith('<div class="wb-math">') and "$$" not in page and "**" not in page
                for eq in equations:  # every number of the LaTeX is a number of the MathML
                    for number in re.findall(r"\d+\.\d+", eq.tex):
                        assert f"<mn>{number}</mn>" in page, (name, number)
                assert formula_markdown(c, "now").count("$$") == 2 * len(equations)
                assert f"<b>{name}</b> at trajectory i = {i}, step t = {t}" in page
    assert clipped > 0  # the clipped cells' lines were converted too


def test_a_sign_after_a_relation_or_bracket_is_unary_and_after_an_operand_binary():
    assert mathml("A_i = -0.31").count(PREFIX) == 1
    assert mathml(r"w = -\frac{(+0.75) \times 1.0}{8}").count(PREFIX) == 2  # "= -" and "(+"
    assert PREFIX not in mathml("1 - x") and PREFIX not in mathml("(a) - b") and PREFIX not in mathml("|c| + 1")
    assert mathml("10^{-5}").count(PREFIX) == 1


def test_bars_group_and_operators_get_texs_spacing():
    grouped = mathml(r"B\,K_i\,|c|")
    assert re.search(r'<mrow><mo stretchy="false">&#x0007C;</mo><mi>c</mi><mo stretchy="false">&#x0007C;</mo></mrow>',
                     grouped)
    assert '<mo>&#x027FA;</mo><mspace width="0.2778em" />' in mathml(r"a \iff b")
    assert '<mi>log</mi><mspace width="0.1667em" />' in mathml(r"\partial \log p")
    assert "<mo>:</mo>" in mathml("N = 4:")


def test_latex_the_converter_cannot_read_is_shown_as_its_source():
    assert mathml("x^") == "<code>x^</code>"
    assert mathml(r"\left( x < y") == "<code>\\left( x &lt; y</code>"  # escaped: never markup of its own
    sneaky = r"\text{<img src=x onerror=alert(1)>} x"  # the converter copies text as it is
    assert mathml(sneaky) == "<code>\\text{&lt;img src=x onerror=alert(1)&gt;} x</code>"
    assert mathml(r"\text{a < b}").startswith("<math")  # a bare "<" in text is no element


def test_text_parts_are_escaped_and_keep_bold_and_code(explanation, monkeypatch):
    c = cell(explanation, "gspo", 0, 0)
    monkeypatch.setattr("workbench.ui.formulas.formula_parts", lambda *_: ["**a** <b>x</b> `y`", Math("x")])
    assert formula_html(c, "now").startswith('<div class="wb-math"><p><b>a</b> &lt;b&gt;x&lt;/b&gt; <code>y</code></p>')


def test_the_math_font_ships_with_its_licence():
    assert FONT.read_bytes()[:4] == b"wOF2"
    assert "SIL Open Font License" in (FONT.parent / "OFL.txt").read_text()
