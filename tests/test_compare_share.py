"""A Compare in one sentence, and shared: its link reopens both groups and the table, Export writes both."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import app_support as base
import torch

from workbench.ui import handlers as h
from workbench.ui import policies as pol
from workbench.ui import share
from workbench.ui.state import Session

PROMPT, msg = base.PROMPT, base.msg


def test_a_compare_is_shared_by_its_link_and_exported_with_both_groups(wb):
    session = h.generate(wb, PROMPT, 3, 4, 0.7, 2, "adherence", Session())[-2]
    figure, images, text, session, status = pol.compare(wb, pol.RUN_BASE, 2, session)
    assert status.startswith("✓") and session.compared == wb.base_key(session.source)
    controls = (PROMPT, 3, 4, 0.7, 2, "flow_grpo", "", "adherence", 2, "mc")
    link = share.share_link(wb, *controls, session, "Attribution", "http://host/")[0]
    assert parse_qs(urlsplit(link).query)["compare"] == [session.compared]
    out = share.open_link(wb, Session(), "?" + urlsplit(link).query)
    assert out[-1].startswith("✓ opened a shared link") and "compared with" in out[-1], out[-1]
    opened = out[-2]
    for a, b in zip(opened.comparison.credits, session.comparison.credits, strict=True):  # both sides, same numbers
        assert torch.equal(a.step_credit, b.step_credit)
    shown_text = out[-3]
    assert shown_text.split("\n\n")[0] == text.split("\n\n")[0]  # the same one-sentence headline ...
    assert "| step: misattributed among determined |" in shown_text  # ... and the table
    assert out[-4]["label"] == images["label"]  # the images, captioned with both policies' names
    file, status = share.export_page(wb, *controls, session, "Attribution", "http://host/")
    assert status.startswith("✓ page of both compared groups written"), status
    page = open(file.value if isinstance(file.value, str) else file.value["path"], encoding="utf-8").read()
    before, after = session.comparison.labels
    assert "In one sentence:" in page and f"top row {before}, bottom row {after}" in page
    body = page.partition("</head>")[2]  # plotly's inlined JavaScript holds the string too
    assert body.count("data:image/png;base64,") == 1 and 'class="plotly-graph-div"' in page and "compare=" in page
    broken = urlsplit(link).query.replace("compare=", "compare=/no/such")
    assert "the link's compare='/no/such" in msg(share.open_link(wb, Session(), "?" + broken))
