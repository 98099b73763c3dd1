"""The glossary: one module, written to docs/glossary.md, hovered where each tab first uses a term."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from workbench.core.glossary import SHIELDED, TERMS, _pattern, gloss, glossary_markdown, term
from workbench.ui.jobs import objective_names

ROOT = Path(__file__).resolve().parents[1]
REQUIRED = ["GRPO", "advantage", "trajectory", "denoising step", "log-prob", "importance ratio", "clipping", "chunk",
            "temporal dynamics (L1_rel)", "credit", "continuation", "determined", "misattributed", "aligned",
            "push (-w)"]


def glossed(text: str) -> list[str]:
    """The entries hovered in a glossed text, in order."""
    return re.findall(r'<abbr title="([^:"]+):', text)


def test_docs_glossary_is_generated_from_the_module():
    assert (ROOT / "docs" / "glossary.md").read_text() == glossary_markdown(), (
        "docs/glossary.md is stale: python -m workbench.core.glossary > docs/glossary.md")


def test_every_word_the_issue_lists_and_every_objective_has_an_entry():
    names = [t.name for t in TERMS]
    assert set(REQUIRED) | set(objective_names()) <= set(names)
    assert len(set(names)) == len(names) and len({t.anchor for t in TERMS}) == len(TERMS)
    headings = set(re.findall(r"^## (.+)$", (ROOT / "docs" / "methods.md").read_text(), re.MULTILINE))
    assert {t.methods for t in TERMS if t.methods} <= headings  # every formula reference names a real section


def test_gloss_hovers_the_first_use_only_and_leaves_code_latex_and_headings_alone():
    text = "### Credit\nA `credit` and $credit$ first; then credit, and credit again. GRPO, Flow-GRPO."
    out = gloss(text)
    assert out.startswith("### Credit\nA `credit` and $credit$ first; then <abbr title=\"credit: ")
    assert out.count("<abbr") == 2 and sorted(glossed(out)) == ["GRPO", "credit"]
    assert "Flow-GRPO." in out  # a term inside another word is not a use of it
    assert gloss(out) == out  # glossing twice changes nothing
    assert "sampler&#x27;s noise" in gloss("a log-prob")  # a title is an escaped attribute
    with pytest.raises(KeyError, match="no glossary entry 'nope'"):
        term("nope")


@pytest.mark.parametrize("tab, expected", [
    ("generate", {"GRPO", "advantage", "trajectory", "denoising step", "log-prob"}),
    ("attribution", {"continuation", "credit", "advantage", "misattributed", "aligned", "undetermined"}),
    ("chunks", {"chunk", "importance ratio", "temporal dynamics (L1_rel)", "trajectory"}),
    ("objectives", {"push (-w)", "log-prob", "clipping", "chunk_grpo", "credit"}),
    ("learn", {"GRPO", "advantage", "credit", "continuation", "misattributed", "chunk", "importance ratio"}),
    ("finetune", {"advantage", "chunk_grpo", "chunk", "clipping", "importance ratio"}),
])
def test_each_tab_hovers_its_terms_where_it_first_uses_them(tab, expected):
    from workbench.ui import layout, learn, welcome

    texts = {"generate": welcome.GENERATE_INTRO, "attribution": gloss(layout.ATTRIBUTION_INTRO),
             "chunks": welcome.CHUNKS_INTRO, "objectives": gloss(layout.OBJECTIVES_INTRO),
             "learn": gloss(learn.INTRO), "finetune": welcome.FINETUNE_INTRO}
    names = {t if t != "undetermined" else "determined" for t in expected}
    assert names <= set(glossed(texts[tab])), (tab, names - set(glossed(texts[tab])))


def tab_texts(tab) -> list[tuple[str, str]]:
    """(what, text) a tab shows before anything is run, top to bottom: Markdown and HTML (as gloss leaves them),
    control labels and info lines, button captions (plotly figure titles are not read)."""
    import gradio as gr

    out = []
    for block in _shown(tab):
        name = type(block).__name__
        if isinstance(block, (gr.Markdown, gr.HTML)) and isinstance(block.value, str):
            out.append((f"{name} text", block.value))
        elif isinstance(block, gr.Button) and isinstance(block.value, str):
            out.append((f"{name} caption", block.value))
        for attr in ("label", "info"):
            value = getattr(block, attr, None)
            if isinstance(value, str) and value and not isinstance(block, (gr.Markdown, gr.Button)):
                out.append((f"{name} {attr} (plain text: no hover possible)", value))
    return out


def _shown(block):
    for child in getattr(block, "children", None) or []:
        if getattr(child, "visible", True) not in (False, "hidden"):
            yield child
            yield from _shown(child)


def first_use(t, texts: list[tuple[str, str]]) -> tuple[str, str, bool] | None:
    """(what, text, glossed) of the first use of term t in a tab's texts; None if the tab never uses it. In an
    HTML text a use inside code, LaTeX, a tag or another term's hover does not count (as for `gloss`)."""
    pattern, hover = _pattern(t), f'<abbr title="{t.name}: '
    for what, text in texts:
        html = what.endswith(" text")
        spans = [(m.start(), m.end()) for m in SHIELDED.finditer(text)] if html else []
        plain, pos = None, 0
        for start, end in spans + [(len(text), len(text))]:
            match = pattern.search(text, pos, start)
            if match:
                plain = match.start()
                break
            pos = end
        hovered = text.find(hover) if html else -1
        if hovered >= 0 and (plain is None or hovered < plain):
            return what, text, True
        if plain is not None:
            return what, text, False
    return None


def test_every_term_is_hovered_where_each_tab_first_uses_it(wb):
    """Tab by tab, top to bottom: the first use of every glossary term is hovered. A control's label or info
    cannot hold a hover (gradio shows them as plain text), so a text above it must use the term first."""
    import gradio as gr

    from workbench.ui.layout import build_app

    tabs = [b for b in build_app(wb).blocks.values() if isinstance(b, gr.Tab) and b.label != "Glossary"]
    assert [t.label for t in tabs] == ["Generate", "Attribution", "Chunks", "Objectives", "Fine-tune", "Runs",
                                       "Learn"]
    unglossed = []
    for tab in tabs:
        texts = tab_texts(tab)
        for t in TERMS:
            use = first_use(t, texts)
            if use is not None and not use[2]:
                at = _pattern(t).search(use[1]).start()
                unglossed.append(f"{tab.label}: '{t.name}' first in a {use[0]}: ...{use[1][max(0, at - 30):at + 30]}")
    assert not unglossed, "\n".join(unglossed)
    assert first_use(term("denoising step"), [("Number label (plain text: no hover possible)", "Step t")])[2] is False


ISSUE_66_WORDS = ["reward", "CFG", "held-out", "common random numbers", "false-call rate", "undetermined", "GAE",
                  "credit mass against A"]  # the app uses them; a newcomer found no entry for them
NOT_TERMS = {  # bold for emphasis or as a value, not a word to define
    "shapes", "colours", "sizes", "positions", "backgrounds",  # the toy world's prompt vocabulary, listed
    "against",  # emphasis in Learn's exercise
    "Loaf A", "Loaf B",  # Learn's story
    "Click a cell", "Click the curve",  # instructions
    "Before / Now",  # the Fine-tune images' labels, Before and Now
    "cpu", "float32",  # the device and the numerics the page is running with
}


def bold_and_hovered(demo) -> set[str]:
    """Every word the page bolds (Markdown **...**, <b>, <strong>) or hovers (its glossary entry), as written."""
    import gradio as gr

    words = set()
    for block in demo.blocks.values():
        value = block.value if isinstance(block, (gr.Markdown, gr.HTML)) else None
        value = value() if callable(value) else value
        if isinstance(value, str):
            words |= {next(w for w in found if w).strip()
                      for found in re.findall(r"\*\*([^*]+?)\*\*|<b>(.*?)</b>|<strong>(.*?)</strong>", value)}
            words |= set(re.findall(r'<abbr title="([^:"]+):', value))
    return {w for w in words if "<abbr" not in w}  # a bold hover: its entry is counted above


def control_names(demo) -> set[str]:
    """What the page calls its tabs, buttons and controls, and the choices they offer (a bold one names it)."""
    import gradio as gr

    names = set()
    for block in demo.blocks.values():
        for attr in ("label", "value") if isinstance(block, (gr.Button, gr.Tab)) else ("label",):
            if isinstance(getattr(block, attr, None), str):
                names.add(getattr(block, attr))
        for choice in getattr(block, "choices", None) or []:
            names |= {str(c) for c in (choice if isinstance(choice, (tuple, list)) else (choice,))}
    return names


def test_every_word_the_app_bolds_or_hovers_has_an_entry(wb):
    """A word the page marks (bold or hovered) is a glossary entry, unless it names a control of the page, is a
    figure or a sentence, or is listed in NOT_TERMS with why; and the words issue 66 found without one have one."""
    from workbench.ui.layout import build_app

    demo = build_app(wb)
    known = {form.lower() for t in TERMS for form in (t.name, *t.forms)}
    names = control_names(demo)
    missing = sorted(w for w in bold_and_hovered(demo)
                     if w.lower() not in known and w not in names and w not in NOT_TERMS
                     and not re.search(r"\d|[.?:]$|^/", w)  # a figure, a sentence, a path
                     and not any(_pattern(t).fullmatch(w) for t in TERMS))
    assert not missing, f"bold or hovered without a glossary entry: {missing}"
    assert {w.lower() for w in ISSUE_66_WORDS} <= known
    texts = " ".join(str(v) for b in demo.blocks.values() for v in (getattr(b, "value", ""), getattr(b, "label", ""),
                                                                     getattr(b, "info", "")) if isinstance(v, str))
    used = [w for w in ISSUE_66_WORDS if w != "credit mass against A" and re.search(re.escape(w), texts, re.I)]
    assert len(used) >= 6, used  # the list is the app's vocabulary, not words it never says
