"""In headless chromium: the time lines of Attribution and Objectives (ui/waits.py) say the group and rates of the
moment their tab shows (after a Generate in another tab, a link opened on the tab, a measurement in the tab), and a
chunk edit, which changes none of them, sends none of their events (docs/performance.md)."""

from __future__ import annotations

import json
import re
import time
import urllib.parse
import urllib.request
from types import SimpleNamespace

from browser_support import BROWSER, LONG, expect, generate, set_number

from workbench.flow.trajectory import SamplingConfig
from workbench.ui import waits

pytestmark = BROWSER

PROMPT = "a small blue ring in the center on a black background"
CREDIT, OBJECTIVES = "#credit-wait", "#objectives-wait"
LOADED = (0.001, "timed as the model loaded")  # a rate as the app's probe keeps it (ui/timing.py)


def evaluations(group: int, steps: int, continuations: int = 4) -> str:
    """'(N image evaluations' of Measure credit at the defaults (mc estimator) for a G x T group."""
    config = SamplingConfig(group=group, steps=steps)
    shaped = SimpleNamespace(group_size=group, num_steps=steps, config=config)
    return f"({waits.credit_evaluations(shaped, continuations, 'mc')} image evaluations"


def line_events(address: str) -> set[int]:
    """The ids of the events whose outputs include a time line (the page's config, as gradio_client reads it)."""
    with urllib.request.urlopen(address + "config") as answer:
        config = json.load(answer)
    lines = {c["id"] for c in config["components"] if c.get("props", {}).get("elem_id") in ("credit-wait",
                                                                                           "objectives-wait")}
    return {d["id"] for d in config["dependencies"] if lines & set(d["outputs"])}


def sent_events(page) -> list[int]:
    """A list the page's event requests append their event ids to (every request that names one)."""
    sent = []

    def seen(request):
        try:
            body = json.loads(request.post_data or "null")
        except ValueError:
            return
        if isinstance(body, dict) and "fn_index" in body:
            sent.append(body["fn_index"])
    page.on("request", seen)
    return sent


def test_the_credit_line_says_the_group_generated_in_another_tab(page, served):
    url, wb = served
    wb.timing = LOADED  # the served app does not time its model
    page.goto(url)
    generate(page, group=3, steps=8)
    page.get_by_role("tab", name="Attribution").click()
    expect(page.locator(CREDIT)).to_contain_text(evaluations(3, 8), timeout=LONG)
    page.get_by_role("tab", name="Generate").click()
    generate(page, group=4, steps=8)  # another G while the line is hidden
    page.get_by_role("tab", name="Attribution").click()
    expect(page.locator(CREDIT)).to_contain_text(evaluations(4, 8), timeout=LONG)
    set_number(page, "credit-k", 2)  # its own control, as before
    expect(page.locator(CREDIT)).to_contain_text(evaluations(4, 8, 2), timeout=LONG)


def test_a_link_opened_on_attribution_shows_its_group_in_the_line(page, served):
    url, wb = served
    wb.timing = LOADED
    query = urllib.parse.urlencode({"prompt": PROMPT, "G": 3, "T": 8, "continuations": 4, "tab": "attribution"})
    page.goto(f"{url}?{query}")
    expect(page.locator("#share-status")).to_contain_text("opened a shared link", timeout=2 * LONG)
    expect(page.locator(CREDIT)).to_contain_text(evaluations(3, 8), timeout=LONG)
    expect(page.locator(CREDIT)).to_contain_text("from the last credit measurement here")  # the link's own


def test_measure_credit_and_compute_say_their_rates_in_the_lines(page, served):
    url, wb = served
    wb.timing, wb.objectives_timing = LOADED, {}
    page.goto(url)
    generate(page, group=3, steps=8)
    page.get_by_role("tab", name="Attribution").click()
    expect(page.locator(CREDIT)).to_contain_text("timed as the model loaded", timeout=LONG)
    page.click("#credit-btn")
    expect(page.locator("#credit-status")).to_contain_text("measured credit with M=4", timeout=LONG)
    expect(page.locator(CREDIT)).to_contain_text("from the last credit measurement here", timeout=LONG)
    page.get_by_role("tab", name="Objectives").click()
    expect(page.locator(OBJECTIVES)).to_contain_text("not timed on this machine yet", timeout=LONG)
    set_number(page, "obj-updates", 1)
    page.click("#objectives-btn")
    expect(page.locator("#objectives-status")).to_contain_text("explained", timeout=LONG)
    expect(page.locator(OBJECTIVES)).to_contain_text("from the last Compute here", timeout=LONG)


def test_a_chunk_edit_sends_no_time_line_event(page, served):
    url, wb = served
    wb.timing = LOADED
    ids = line_events(url)
    assert ids, "no event writes a time line"
    page.goto(url)
    generate(page, group=3, steps=8)
    page.get_by_role("tab", name="Attribution").click()
    expect(page.locator(CREDIT)).to_contain_text(evaluations(3, 8), timeout=LONG)
    page.get_by_role("tab", name="Chunks").click()
    status, spec = page.locator("#chunks-status"), page.locator("#chunk-spec textarea")
    expect(status).to_contain_text("over T=8 steps", timeout=LONG)
    time.sleep(1.0)  # the tab's own events land before the count starts
    sent = sent_events(page)
    for sizes in ("4,4", "2,6"):
        spec.fill(sizes)
        spec.press("Enter")
        expect(status).to_contain_text(f"typed: chunks {sizes}", timeout=LONG)
    link = page.locator("#share-link textarea, #share-link input").first
    expect(link).to_have_value(re.compile("chunks=2%2C6"), timeout=LONG)  # the link followed the edit
    time.sleep(1.0)  # any event still to follow the edits
    assert sent, "the page sent no event: the count sees nothing"
    assert not ids & set(sent), f"a chunk edit sent the time lines' events {sorted(ids & set(sent))}"
