"""In headless chromium: each figure is drawn once per change (`workbench/ui/redraw.py`), and still updates."""

from __future__ import annotations

import re
import time

from browser_support import BROWSER, LONG, expect, generate

pytestmark = BROWSER

LINES_X = ("(plot) => document.querySelector(`#${plot} .js-plotly-plot`)._fullLayout.shapes"
           ".filter(s => s.type === 'line').map(s => s.x0)")  # where a figure draws its dashed boundaries


def counts(page) -> dict:
    return page.evaluate("() => ({...window.wbRedraw})")


def test_a_chunk_edit_draws_the_changed_figure_once(page, url):
    page.goto(url)
    generate(page, group=2, steps=8)
    page.get_by_role("tab", name="Chunks").click()
    status, spec = page.locator("#chunks-status"), page.locator("#chunk-spec textarea")
    title = page.locator("#curve-plot .gtitle")
    expect(status).to_contain_text("over T=8 steps", timeout=LONG)
    expect(title).to_contain_text("[1, 2, 2, 3]", timeout=LONG)
    page.wait_for_timeout(500)
    page.evaluate("() => { window.wbCurve = document.querySelector('#curve-plot .js-plotly-plot'); }")
    for sizes, lines in (("4,4", [3.5]), ("2,6", [1.5]), ("8", [])):
        before = counts(page)
        spec.fill(sizes)
        spec.press("Enter")
        expect(status).to_contain_text(f"typed: chunks {sizes}", timeout=LONG)
        expect(title).to_contain_text("[" + sizes.replace(",", ", ") + "]", timeout=LONG)  # the new title shows
        page.wait_for_timeout(300)  # any late call of Gradio's has run by now
        after = counts(page)
        # the map is markup (here the "measure credit first" hint, carrying the curve's change): plotly draws
        # nothing; the curve is changed in place, not redrawn
        assert after["drawn"] == before["drawn"] and after["patched"] - before["patched"] == 1, (before, after)
        assert page.locator("#chunk-credit-plot [data-relayout]").count() == 1
        assert page.evaluate("() => window.wbCurve.isConnected")  # the same curve element: no re-mount
        assert page.evaluate(LINES_X, "curve-plot") == lines  # its dashed boundary lines moved
    expect(page.locator("#curve-plot .js-plotly-plot")).to_have_count(1)
    page.get_by_role("tab", name="Generate").click()  # the tab opens again with the whole curve, the same lines
    page.get_by_role("tab", name="Chunks").click()
    expect(status).to_contain_text("chunks 8 over T=8 steps", timeout=LONG)
    expect(title).to_contain_text("[8]", timeout=LONG)
    assert page.evaluate(LINES_X, "curve-plot") == []


def chunks_tab_in_the_address(page, address: str):
    """A G=2, T=8 group, the Chunks tab open and named in the address bar -> (status, spec box)."""
    page.goto(address)
    generate(page, group=2, steps=8)
    page.get_by_role("tab", name="Chunks").click()
    status, spec = page.locator("#chunks-status"), page.locator("#chunk-spec textarea")
    expect(status).to_contain_text("over T=8 steps", timeout=LONG)
    page.wait_for_function("() => location.search.includes('tab=chunks')", timeout=LONG)
    return status, spec


def test_chunk_edits_reach_the_address_bar_and_leave_no_run_history(page, url):
    status, spec = chunks_tab_in_the_address(page, url)
    spec.fill("4,4")
    spec.press("Enter")
    expect(status).to_contain_text("typed: chunks 4,4", timeout=LONG)
    page.wait_for_function("() => location.search.includes('chunks=4%2C4&')", timeout=LONG)  # CHUNKS_JS, no server
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
    share link changed the address, chromium fetched the whole page from the server for the curve's redrawn lines
    on chunk edits (9 fetches in 14 edits) and did not clip them; REDRAW_JS takes the base's href away."""
    status, spec = chunks_tab_in_the_address(page, url)
    pages = []  # the page's own address asked for again: not an API call, an asset or the favicon
    page.on("request", lambda r: pages.append(r.url) if r.url.split("?")[0].rstrip("/") == url.rstrip("/") else None)
    for sizes in ("4,4", "2,6", "8", "1,7"):
        spec.fill(sizes)
        spec.press("Enter")
        expect(status).to_contain_text(f"typed: chunks {sizes}", timeout=LONG)
        page.wait_for_function(f"() => location.search.includes('chunks={sizes.replace(',', '%2C')}&')",
                               timeout=LONG)  # the address changed
    page.wait_for_timeout(500)
    assert pages == []
    clips = page.evaluate(CLIP_PATHS)
    assert clips and all(re.fullmatch(r"url\(#[\w-]+\)", c) for c in clips), clips[:3]
    assert page.evaluate("() => document.querySelector('base').getAttribute('href')") is None


def test_plotly_is_evaluated_while_the_page_is_idle(page, url):
    """Gradio imports its plotly chunk at the page's first figure (~1 s of the page's main thread inside the first
    Generate); the page imports it once idle, before any figure, and it is the plotly REDRAW_JS patches."""
    page.goto(url)
    expect(page.locator("#generate-btn")).to_be_visible(timeout=LONG)
    page.wait_for_function("() => window.Plotly?.wbOnce === true", timeout=LONG)
    assert page.evaluate("() => document.querySelectorAll('.js-plotly-plot').length") == 0  # no figure drew it


# Counts the animation frames the page asks chromium for from Gradio's status tracker (its module in the caller's
# stack), installed before the page's scripts: ui/frames.py's script then wraps it, so a frame it parks is not counted.
COUNT_TRACKER_FRAMES = """(() => {
    const ask = window.requestAnimationFrame.bind(window);
    window.wbTrackerFrames = 0;
    window.requestAnimationFrame = (callback) => {
        if ((new Error().stack || "").includes("/statustracker-")) window.wbTrackerFrames++;
        return ask(callback);
    };
})();"""
TRACKER_SECONDS = "() => document.querySelector('#curve-plot [data-testid=status-tracker] .progress-text')?.innerText"


def test_an_idle_page_draws_no_frames_and_a_pending_one_counts_its_seconds(page, served, monkeypatch):
    """Gradio's page-loading status tracker leaves a loop asking for a frame 60 times a second for as long as the
    page is open (ui/frames.py): once the page is idle, none of its frames reach chromium. A tracker that shows a
    pending event still counts its seconds frame by frame."""
    address, wb = served
    page.add_init_script(COUNT_TRACKER_FRAMES)
    page.goto(address)
    expect(page.locator("#generate-btn")).to_be_visible(timeout=LONG)
    page.wait_for_timeout(1000)
    before = page.evaluate("() => window.wbTrackerFrames")
    page.wait_for_timeout(2000)
    assert page.evaluate("() => window.wbTrackerFrames") - before < 10  # the leaked loop asked for ~120 here
    measure = wb._measure_curve

    def slow(*args):  # the curve of a T this app has not computed yet, made to take its time
        time.sleep(3)
        return measure(*args)
    monkeypatch.setattr(wb, "_measure_curve", slow)
    generate(page, group=2, steps=10)
    page.get_by_role("tab", name="Chunks").click()
    expect(page.locator("#curve-plot [data-testid=status-tracker] .progress-text")).to_be_visible(timeout=LONG)
    first = page.evaluate(TRACKER_SECONDS)
    page.wait_for_timeout(700)
    later = page.evaluate(TRACKER_SECONDS)
    seconds = [float(re.search(r"([0-9.]+)(/[0-9.]+)?s", text).group(1)) for text in (first, later)]  # "0.8/0.1s"
    assert seconds[1] - seconds[0] > 0.4, (first, later)  # the tracker's own count, drawn frame by frame
    expect(page.locator("#chunks-status")).to_contain_text("over T=10 steps", timeout=LONG)


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
    expect(spec).to_have_value("2,2,3,5")
    spec.fill("6,6")  # at once, while the curve is computed: the edit waits for it and lands about when the tab does
    spec.press("Enter")
    expect(status).to_contain_text(re.compile(r"over T=12 steps|typed: chunks 6,6"), timeout=LONG)
    # the edit's reply has landed: it puts its chunks in the address bar (share.CHUNKS_JS; once a fixed second)
    page.wait_for_function("() => location.search.includes('chunks=6%2C6')", timeout=LONG)
    page.get_by_role("tab", name="Generate").click()
    page.get_by_role("tab", name="Chunks").click()
    # the session kept the edit: the tab's opening used to return the session it was given and put the old
    # schedule back (which of the two replies the page shows last is a race; the session's content is not)
    expect(status).to_contain_text("chunks 6,6 over T=12 steps", timeout=LONG)
    expect(spec).to_have_value("6,6")
    expect(page.locator("#curve-plot .gtitle")).to_contain_text("[6, 6]", timeout=LONG)
    assert page.evaluate(LINES_X, "curve-plot") == [5.5]
