"""In headless chromium: a chunk edit redraws the Chunks tab's curve and map (markup in gr.HTML, ui/figures.py) in
place, every edit lands in order, and the address bar follows."""

from __future__ import annotations

import re
import time

from browser_support import BROWSER, LONG, click_step, expect, generate

pytestmark = BROWSER

LINES_X = ("(plot) => [...document.querySelectorAll(`#${plot} line.boundary`)]"
           ".map((line) => Number(line.dataset.x))")  # where a figure draws its dashed chunk boundaries
TITLE = "#curve-plot svg text >> nth=0"


def chunks_tab(page, address: str, steps: int = 8):
    """A G=2 group of `steps` steps and the Chunks tab open -> (status, spec box)."""
    page.goto(address)
    generate(page, group=2, steps=steps)
    page.get_by_role("tab", name="Chunks").click()
    status, spec = page.locator("#chunks-status"), page.locator("#chunk-spec textarea")
    expect(status).to_contain_text(f"over T={steps} steps", timeout=LONG)
    return status, spec


def test_a_chunk_edit_redraws_the_curve_and_the_map_in_place(page, url):
    status, spec = chunks_tab(page, url)
    title = page.locator(TITLE)
    expect(title).to_have_text("Temporal dynamics and chunks [1, 2, 2, 3]", timeout=LONG)
    page.evaluate("() => { window.wbCurve = document.querySelector('#curve-plot svg'); }")
    for sizes, lines in (("4,4", [3.5]), ("2,6", [1.5]), ("8", [])):
        spec.fill(sizes)
        spec.press("Enter")
        expect(status).to_contain_text(f"typed: chunks {sizes}", timeout=LONG)
        expect(title).to_have_text("Temporal dynamics and chunks [" + sizes.replace(",", ", ") + "]", timeout=LONG)
        assert page.evaluate(LINES_X, "curve-plot") == lines  # its dashed boundary lines moved
        assert page.evaluate("() => window.wbCurve.isConnected")  # the same drawing, its lines changed in place
        expect(page.locator("#chunk-credit-plot")).to_contain_text("measure credit in the Attribution tab")
    page.get_by_role("tab", name="Generate").click()  # the tab opens again with the same curve and lines
    page.get_by_role("tab", name="Chunks").click()
    expect(status).to_contain_text("chunks 8 over T=8 steps", timeout=LONG)
    expect(title).to_have_text("Temporal dynamics and chunks [8]")
    assert page.evaluate(LINES_X, "curve-plot") == []


def test_edits_sent_at_once_all_land_in_order(page, url):
    """Edits from several controls, sent before the first reply: each reads the schedule the one before left (they
    are queued one at a time), so none is lost."""
    status, spec = chunks_tab(page, url)
    expect(spec).to_have_value("1,2,2,3")
    for button in ("#split-btn", "#merge-btn", "#split-btn"):  # the slider sits at T/2 = 4
        page.click(button)
    click_step(page, "curve-plot", 6)  # and the curve: a boundary after step 6
    expect(status).to_contain_text("added the boundary after step 6: chunks 1,2,1,1,2,1", timeout=LONG)
    expect(spec).to_have_value("1,2,1,1,2,1")  # split at 4, merged back, split again, then the click
    assert page.evaluate(LINES_X, "curve-plot") == [0.5, 2.5, 3.5, 4.5, 6.5]
    assert page.evaluate(LINES_X, "chunk-credit-plot") == []  # no credit yet: the map says so, no lines


def test_chunk_edits_reach_the_address_bar_and_leave_no_run_history(page, url):
    status, spec = chunks_tab(page, url)
    page.wait_for_function("() => location.search.includes('tab=chunks')", timeout=LONG)
    spec.fill("4,4")
    spec.press("Enter")
    expect(status).to_contain_text("typed: chunks 4,4", timeout=LONG)
    page.wait_for_function("() => location.search.includes('chunks=4%2C4&')", timeout=LONG)
    link = page.locator("#share-link textarea")
    expect(link).to_have_value(re.compile(r"[?&]chunks=4%2C4&.*tab=chunks"))  # the link box follows too
    spec.fill("9,9")  # sums to 18, not T=8: refused, and the address bar keeps the schedule in use
    spec.press("Enter")
    expect(status).to_contain_text("kept the last valid chunks 4,4", timeout=LONG)
    page.wait_for_timeout(300)
    assert "chunks=4%2C4&" in page.evaluate("location.search")
    assert "tab=chunks" in page.evaluate("location.search")
    assert link.input_value().endswith(page.evaluate("location.search"))
    # launch_options() turns Gradio's run history off: no call's inputs or figures are kept in the browser
    assert page.evaluate("Object.keys(localStorage).filter(k => k.startsWith('gradio:run-history'))") == []


CLIP_PATHS = "() => [...document.querySelectorAll('.js-plotly-plot [clip-path]')].map(e => e.getAttribute('clip-path'))"


def test_plots_clip_within_the_page_as_the_address_changes(page, url):
    """Gradio's <base href="./"> made plotly write its clip paths as url('<the page's address>#clip…'). After the
    share link changed the address, chromium fetched the whole page from the server for a figure drawn later and did
    not clip it; share.ADDRESS_JS takes the base's href away."""
    status, spec = chunks_tab(page, url)
    pages = []  # the page's own address asked for again: not an API call, an asset or the favicon
    page.on("request", lambda r: pages.append(r.url) if r.url.split("?")[0].rstrip("/") == url.rstrip("/") else None)
    for sizes in ("4,4", "2,6"):
        spec.fill(sizes)
        spec.press("Enter")
        expect(status).to_contain_text(f"typed: chunks {sizes}", timeout=LONG)
        page.wait_for_function(f"() => location.search.includes('chunks={sizes.replace(',', '%2C')}&')",
                               timeout=LONG)  # the address changed
    page.get_by_role("tab", name="Generate").click()
    generate(page, group=3, steps=8)  # the log-prob figure drawn again, at the new address
    expect(page.locator("#logprob-plot .js-plotly-plot")).to_be_visible(timeout=LONG)
    page.wait_for_timeout(500)
    assert pages == []
    clips = page.evaluate(CLIP_PATHS)
    assert clips and all(re.fullmatch(r"url\(#[\w-]+\)", c) for c in clips), clips[:3]
    assert page.evaluate("() => document.querySelector('base').getAttribute('href')") is None


def test_an_edit_made_while_the_chunks_tab_opens_is_kept(page, served, monkeypatch):
    address, wb = served
    measure = wb._measure_curve

    def slow(*args):  # a curve's first computation for a T: seconds on a real model, ~0.1 s on this one
        time.sleep(2)
        return measure(*args)
    monkeypatch.setattr(wb, "_measure_curve", slow)
    page.goto(address)
    generate(page, group=2, steps=12)  # a T whose curve this app has not computed yet
    status, spec = page.locator("#chunks-status"), page.locator("#chunk-spec textarea")
    page.get_by_role("tab", name="Chunks").click()
    # the box shows the session's schedule as the tab first draws it: typed earlier, the text was sometimes replaced
    # by it before Enter (3 of 8 runs here; "typed: chunks 2,2,3,5"), which no person types fast enough to meet
    expect(spec).to_have_value("2,2,3,5", timeout=LONG)  # the 2 s curve, then the views (~5 s on a busy machine)
    spec.fill("6,6")  # at once, while the curve is computed: the edit waits for it and lands about when the tab does
    spec.press("Enter")
    expect(status).to_contain_text(re.compile(r"over T=12 steps|typed: chunks 6,6"), timeout=LONG)
    page.wait_for_function("() => location.search.includes('chunks=6%2C6')", timeout=LONG)  # the edit has landed
    page.get_by_role("tab", name="Generate").click()
    page.get_by_role("tab", name="Chunks").click()
    # the session kept the edit: the tab's opening used to return the session it was given and put the old
    # schedule back (which of the two replies the page shows last is a race; the session's content is not)
    expect(status).to_contain_text("chunks 6,6 over T=12 steps", timeout=LONG)
    expect(spec).to_have_value("6,6")
    expect(page.locator(TITLE)).to_have_text("Temporal dynamics and chunks [6, 6]", timeout=LONG)
    assert page.evaluate(LINES_X, "curve-plot") == [5.5]
