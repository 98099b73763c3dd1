"""The glossary: one module, written to docs/glossary.md, hovered where each tab first uses a term."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from workbench.core.glossary import TERMS, gloss, glossary_markdown, term
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
