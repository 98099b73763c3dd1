"""A shared link: the query string of the current view, and opening it regenerates the same numbers (no browser)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import app_support as base
import pytest
import torch

from workbench.core.errors import WorkbenchError
from workbench.rl.objectives import OBJECTIVES
from workbench.ui import handlers as h
from workbench.ui import share
from workbench.ui.state import Session

PROMPT, is_skip, msg = base.PROMPT, base.is_skip, base.msg


def test_a_link_holds_the_view_and_opening_it_gives_the_same_numbers(wb):
    session = h.generate(wb, PROMPT, 3, 4, 0.7, 5, "adherence", Session())[-2]
    session = h.chunks_from_spec(wb, "1,3", session)[-2]
    measured = h.attribute(wb, 2, session, "mc")
    session, rates = measured[-2], measured[1]
    link, status = share.share_link(wb, PROMPT, 3, 4, 0.7, 5, "flow_grpo", "", "adherence", 2, "mc", session,
                                    "Attribution", "http://host:7860/")
    assert status.startswith("✓") and link.startswith("http://host:7860/?")
    query = parse_qs(urlsplit(link).query)
    assert {k: v[0] for k, v in query.items()} == {
        "model": "base", "prompt": PROMPT, "seed": "5", "G": "3", "T": "4", "noise": "0.7", "sampler": "flow_grpo",
        "reward": "adherence", "chunks": "1,3", "continuations": "2", "estimator": "mc", "tab": "attribution"}
    out = share.open_link(wb, Session(), "?" + urlsplit(link).query)
    assert out[-1].startswith("✓ opened a shared link") and out[0].selected == "attribution"
    controls, opened = out[1:13], out[-2]
    assert controls == (PROMPT, 3, 4, 0.7, 5, "adherence", "flow_grpo", "", "base", "1,3", 2, "mc")
    assert torch.equal(opened.group.images, session.group.images)  # the same group ...
    assert torch.equal(opened.credit.step_credit, session.credit.step_credit)  # ... and the same measurement
    assert out[18] == rates and opened.sizes == [1, 3] and all(is_skip(x) for x in out[19:22])  # no Compare


def test_the_address_bar_link_is_the_shown_group_not_the_controls(wb):
    controls = (PROMPT, 3, 4, 0.7, 5, "flow_grpo", "", "adherence", 2, "mc")
    assert is_skip(share.follow_link(*controls, Session(), "Generate", "http://host/"))  # no group: keep the bar
    session = h.generate(wb, PROMPT, 3, 4, 0.7, 5, "adherence", Session())[-2]
    link = share.share_link(wb, *controls, session, "Chunks", "http://host/")[0]
    assert share.follow_link(*controls, session, "Chunks", "http://host/") == link
    edited = ("another prompt", 5, 8, 0.3, 1, "cps", "0,2", "adherence", 2, "mc")  # typed, not generated yet
    assert share.follow_link(*edited, session, "Chunks", "http://host/") == link
    assert is_skip(share.follow_link(*controls[:-2], None, "mc", session, "Chunks", "http://host/"))  # emptied M


def test_no_query_changes_nothing_and_bad_links_are_messages(wb):
    out = share.open_link(wb, Session(), "")
    assert all(is_skip(x) for x in out[:-1]) and out[-1] == ""
    bad = [("G=8", "no prompt"), (f"prompt={PROMPT}&G=two", "G='two' is not a whole number"),
           (f"prompt={PROMPT}&G=1", "G='1' is out of range: group size G must be in 2..16"),
           (f"prompt={PROMPT}&sampler=nope", "sampler='nope'"),
           (f"prompt={PROMPT}&estimator=nope", "estimator='nope'"), (f"prompt={PROMPT}&tab=nope", "tab='nope'"),
           (f"prompt={PROMPT}&T=4&chunks=1,2", "sum to 3"), (f"prompt={PROMPT}&noise=x", "noise='x'")]
    for query, words in bad:
        assert words in msg(share.open_link(wb, Session(), "?" + query)), query
    with pytest.raises(WorkbenchError, match="window"):
        share.parse_query({"prompt": PROMPT, "window": "a,b"})


def test_export_page_of_the_session_is_standalone_and_small(wb):
    assert "nothing to export yet" in msg(share.export_page(wb, PROMPT, 3, 4, 0.7, 0, "flow_grpo", "", "adherence",
                                                            2, "mc", Session(), "Generate", ""))
    session = h.generate(wb, PROMPT, 3, 4, 0.7, 0, "adherence", Session())[-2]
    session = h.attribute(wb, 2, session, "mc")[-2]
    file, status = share.export_page(wb, PROMPT, 3, 4, 0.7, 0, "flow_grpo", "", "adherence", 2, "mc", session,
                                     "Attribution", "http://host/")
    assert status.startswith("✓ page written")
    text = open(file.value if isinstance(file.value, str) else file.value["path"], encoding="utf-8").read()
    check_page(text, session)
    assert "http://host/?model=base" in text  # the link that opens the same view in the app


def check_page(text: str, session) -> None:
    """A page holds plotly inlined, no external resource, its five figures, the pictures, numbers and command."""
    assert len(text.encode("utf-8")) < 10_000_000
    head, _, body = text.partition("</head>")
    assert "plotly.js" in head.lower() and len(head) > 1_000_000  # plotly's JavaScript inlined, once
    assert "<script src" not in body and "<link" not in text[:500] and 'src="http' not in body  # nothing fetched
    # log-probs, step credit, chunk credit, the model's L1_rel curve with the chunks, objectives' maps
    assert text.count('class="plotly-graph-div"') == 5
    assert "<h2>Temporal dynamics and the chunks</h2>" in text
    titled = [name for name in OBJECTIVES.names() if f'"text":"{name}\\u003cbr' in text]  # each map's title
    assert titled == OBJECTIVES.names()  # every registered objective, gfpo included
    assert body.count("data:image/png;base64,") == 2  # the final images and the x0 filmstrip
    assert "python -m workbench export --prompt" in text and "--continuations 2" in text
    assert "Step misattribution" in text and "±" in text  # the numbers with their errors
    assert f"<th>chunks</th><td>{','.join(map(str, session.sizes))}</td>" in text
