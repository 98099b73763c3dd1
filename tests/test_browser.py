"""The workbench in headless Debian chromium (Playwright): generate, edit chunks, fine-tune and stop.

Needs Debian's chromium-headless-shell or chromium (`apt-get install -y chromium-headless-shell chromium`; both come
with `scripts/setup.sh --dev`) and pytest-playwright; never `playwright install`. Screenshots (JPEG) go to
test-artifacts/ at the repository root.
"""

from __future__ import annotations

import re

from browser_support import BROWSER, LONG, click_step, expect, generate, set_number, snap

pytestmark = BROWSER


def test_page_loads_and_generates(page, url):
    page.goto(url)
    expect(page.locator("#generate-btn")).to_be_visible(timeout=LONG)
    generate(page)
    expect(page.locator("#gallery img")).to_have_count(3, timeout=LONG)
    expect(page.locator("#logprob-plot .js-plotly-plot")).to_be_visible(timeout=LONG)
    snap(page, "browser_generate")


def test_chunk_edits_valid_and_invalid(page, url):
    page.goto(url)
    generate(page, group=3, steps=8)
    page.get_by_role("tab", name="Attribution").click()
    page.click("#credit-btn")
    expect(page.locator("#credit-status")).to_contain_text("measured credit with M=4", timeout=LONG)
    expect(page.locator("#credit-rates")).to_contain_text("Step misattribution")
    expect(page.locator("#credit-rates")).to_contain_text("of the determined cells are misattributed")
    expect(page.locator("#credit-plot")).to_contain_text("undetermined: not significant at z")  # the legend
    snap(page, "browser_attribution")
    set_number(page, "refine-budget", 20)
    page.click("#refine-btn")
    # G=3, T=8, M=4 leaves undetermined cells (seeded), so the refinement must run: "nothing to refine" fails
    expect(page.locator("#credit-status")).to_contain_text("refined with 20 continuations", timeout=LONG)
    expect(page.locator("#credit-plot")).to_contain_text("M=4..")
    snap(page, "browser_refined")
    page.get_by_role("tab", name="Chunks").click()
    status, spec = page.locator("#chunks-status"), page.locator("#chunk-spec textarea")
    expect(status).to_contain_text("chunks 1,2,2,3 over T=8 steps", timeout=LONG)  # temporal(8)
    expect(page.locator("#curve-plot svg")).to_be_visible(timeout=LONG)
    expect(page.locator("#chunk-credit-plot")).to_contain_text("Chunk credit V(end) - V(start), classified")
    spec.fill("4,4")
    spec.press("Enter")
    expect(status).to_contain_text("typed: chunks 4,4", timeout=LONG)
    lines = page.locator("#chunk-credit-plot svg line.boundary")  # the map is markup (viz/chunk_map.py)
    expect(lines).to_have_count(1, timeout=LONG)
    assert lines.get_attribute("data-x") == "3.5"
    expect(page.locator("#chunk-credit-plot svg rect.cell")).to_have_count(3 * 2)  # G=3 trajectories x 2 chunks
    expect(page.locator("#curve-plot svg line.boundary")).to_have_count(1)  # the curve's line moved with the map's
    expect(page.locator("#curve-plot svg text").first).to_have_text("Temporal dynamics and chunks [4, 4]")
    snap(page, "browser_chunks_valid")
    spec.fill("1,2")
    spec.press("Enter")
    expect(status).to_contain_text("sum to 3 but there are 8 trained steps", timeout=LONG)
    expect(status).to_contain_text("kept the last valid chunks 4,4")
    expect(page.locator("#curve-plot svg text").first).to_have_text("Temporal dynamics and chunks [4, 4]")
    snap(page, "browser_chunks_invalid")
    page.click("#split-btn")  # the slider sits at T/2 = 4, where a chunk already starts: a message, no change
    expect(status).to_contain_text("a chunk already starts at step 4", timeout=LONG)
    page.click("#merge-btn")
    expect(status).to_contain_text("merged the chunk starting at step 4 into the one before: chunks 8", timeout=LONG)
    expect(page.locator("#chunks-rates")).to_contain_text("Chunk misattribution")


def test_sessions_do_not_share_groups(page, url, browser):
    page.goto(url)
    generate(page, group=2, steps=4)
    other = browser.new_page()
    try:
        other.goto(url)
        other.get_by_role("tab", name="Attribution").click()
        other.click("#credit-btn")
        expect(other.locator("#credit-status")).to_contain_text("no group yet", timeout=LONG)
    finally:
        other.close()


def answer_late_until_a_run_starts(monkeypatch, wb):
    """The Fine-tune tab's opening poll reads that no run exists, then answers only after Start's answer is in (the
    order in which a learner who pressed Start at once saw the tab stay at "No run yet" for minutes while the run
    trained: the late answer turned the timer that Start had turned on off again). Returns an Event set once the
    late answer has gone."""
    import threading
    import time

    from workbench.ui import run_handlers

    read, answered = run_handlers._run_names, threading.Event()

    def late(workbench):
        names = read(workbench)
        if names or answered.is_set():
            return names
        end = time.monotonic() + 60
        while wb.jobs.busy() is None and time.monotonic() < end:
            time.sleep(0.05)
        # Start's answer, sent once the run is registered, lands first; this one before the timer's first tick (1 s):
        # an answer of the tick in flight turned the timer on again and hid the fault when this waited 1 s
        time.sleep(0.3)
        threading.Timer(0.1, answered.set).start()  # after this answer has left
        return names

    monkeypatch.setattr(run_handlers, "_run_names", late)
    return answered


def test_fine_tune_start_and_stop(page, served, monkeypatch):
    url, wb = served
    page.goto(url)
    answered = answer_late_until_a_run_starts(monkeypatch, wb)
    page.get_by_role("tab", name="Fine-tune").click()
    set_number(page, "train-iterations", 500)  # far more than the test waits for: only Stop can end the run
    set_number(page, "train-group", 2)
    set_number(page, "train-steps", 4)
    page.locator("#train-chunks textarea").fill("2,2")
    page.click("#start-btn")
    expect(page.locator("#train-status")).to_contain_text("started run", timeout=LONG)
    state = page.locator("#run-state")
    assert answered.wait(60)
    page.wait_for_timeout(1000)  # the late answer has landed: its "No run yet" gives way to the run at the next tick
    expect(state).to_contain_text("running", timeout=LONG)
    snap(page, "browser_finetune_running")
    page.click("#stop-btn")
    expect(page.locator("#train-status")).to_contain_text("stop requested", timeout=LONG)
    expect(state).to_contain_text("stopped", timeout=LONG)
    final = state.inner_text()
    page.wait_for_timeout(2500)  # the timer has stopped: nothing advances any more
    assert state.inner_text() == final
    expect(page.locator("#train-plot .js-plotly-plot")).to_be_visible(timeout=LONG)
    snap(page, "browser_finetune_stopped")
    run_id = re.search(r"Run (\S+):", final).group(1)
    page.get_by_role("tab", name="Runs").click()
    expect(page.locator("#runs-table")).to_contain_text(run_id, timeout=LONG)
    page.click("#compare-btn")
    expect(page.locator("#compare-plot .js-plotly-plot")).to_be_visible(timeout=LONG)
    page.click("#download-btn")
    expect(page.locator("#run-files")).to_contain_text(f"{run_id}-metrics", timeout=LONG)  # shown as "name .csv"
    snap(page, "browser_runs")


MATH_FONT_LOADED = """() => [...document.fonts].some((face) => face.family.replaceAll('"', '') === 'Workbench Math'
    && face.status === 'loaded')"""  # its @font-face fetched (a font that failed to load says 'error')
CELL_JS = """([plot, trace, t, i]) => {
    const panel = [...document.querySelectorAll(`#${plot} g.panel`)].find((g) => g.dataset.trace === trace);
    panel.scrollIntoView({block: "center"});
    const svg = panel.ownerSVGElement, box = panel.getBoundingClientRect();
    return [box.left + (t + 0.5) * box.width / svg.dataset.cols, box.top + (i + 0.5) * box.height / svg.dataset.rows];
}"""  # the page position of cell (step t, trajectory i) of the map `trace` (its cells' box, viz/push_maps.py)
OUTLINE_JS = """(plot) => {
    const boxes = document.querySelectorAll(`#${plot} rect.wb-outline`);
    if (boxes.length !== 1) return null;
    const box = boxes[0], svg = box.ownerSVGElement, x = +box.getAttribute('x') + box.getAttribute('width') / 2;
    const y = +box.getAttribute('y') + box.getAttribute('height') / 2;
    const panel = [...svg.querySelectorAll('g.panel')].find((g) => x > +g.dataset.x && x < +g.dataset.x + +g.dataset.w
                                                               && y > +g.dataset.y && y < +g.dataset.y + +g.dataset.h);
    if (!panel) return null;
    const d = panel.dataset;
    return [d.trace, Math.floor((x - d.x) / d.w * svg.dataset.cols), Math.floor((y - d.y) / d.h * svg.dataset.rows)];
}"""  # [map, t, i] of the cell the one gold outline of the maps marks; null: none, or not on a map
CHUNK_LINES_JS = ("(plot) => [...document.querySelectorAll(`#${plot} svg line[stroke-dasharray]`)]"
                  ".filter((line) => !line.classList.contains('boundary')).length")  # the maps' chunk boundaries


def outline_on(page, plot: str, trace: str, t: int, i: int) -> None:
    """Wait until the page's gold outline marks cell (t, i) on the map of `trace`, and only there."""
    page.wait_for_function(f"([plot, want]) => JSON.stringify(({OUTLINE_JS})(plot)) === JSON.stringify(want)",
                           arg=[plot, [trace, t, i]], timeout=LONG)


def click_cell(page, plot: str, trace: str, t: int, i: int) -> None:
    """Click cell (step t, trajectory i) of the map `trace`, as a user would."""
    page.mouse.click(*page.evaluate(CELL_JS, [plot, trace, t, i]))


def test_select_a_cell_and_toggle_a_boundary_by_clicking(page, url):
    page.goto(url)
    generate(page, group=3, steps=8)
    page.get_by_role("tab", name="Objectives").click()
    set_number(page, "obj-updates", 1)
    page.click("#objectives-btn")
    status = page.locator("#objectives-status")
    from workbench.rl.objectives import OBJECTIVES

    expect(status).to_contain_text(f"explained {len(OBJECTIVES.names())} objectives on G=3, T=8 after 1 updates",
                                   timeout=LONG)
    maps = page.locator("#objectives-plot svg g.panel")
    expect(maps).to_have_count(2 * len(OBJECTIVES.names()) + 1, timeout=LONG)  # no credit yet: l, then each map
    assert page.evaluate(CHUNK_LINES_JS, "objectives-plot") == 2 * 3  # chunk_grpo's 3 boundaries (1,2,2,3), per row
    outline_on(page, "objectives-plot", "moved|chunk_grpo", 0, 0)  # Compute's selected cell
    page.evaluate("() => { window.wbMaps = document.querySelector('#objectives-plot svg'); }")
    click_cell(page, "objectives-plot", "ratio1|dapo", 2, 0)  # another map, in the other row
    expect(status).to_contain_text("dapo at i=0, t=2", timeout=LONG)
    outline_on(page, "objectives-plot", "ratio1|dapo", 2, 0)
    click_cell(page, "objectives-plot", "moved|chunk_grpo", 5, 1)  # step t = 5 of trajectory i = 1
    expect(status).to_contain_text("chunk_grpo at i=1, t=5", timeout=LONG)
    formula = page.locator("#cell-formula")
    expect(formula).to_contain_text("chunk_grpo at trajectory i = 1, step t = 5", timeout=LONG)
    expect(formula.locator("math").first).to_be_visible()  # the equations are MathML (ui/mathml.py), in the
    page.wait_for_function(MATH_FONT_LOADED, timeout=LONG)  # shipped font, fetched from the app
    expect(page.locator("#cell-traj input")).to_have_value("1")
    expect(page.locator("#cell-step input")).to_have_value("5")
    expect(page.locator("#cell-row input[value=moved]")).to_be_checked()
    outline_on(page, "objectives-plot", "moved|chunk_grpo", 5, 1)
    assert page.evaluate("() => window.wbMaps.isConnected")  # the clicks moved the outline: the maps were not redrawn
    page.mouse.move(*page.evaluate(CELL_JS, ["objectives-plot", "moved|gspo", 3, 2]))  # hovering a cell names it
    expect(page.locator("#objectives-plot .wb-tip")).to_contain_text("gspo: traj 2, step 3: push −w = ")
    snap(page, "browser_objectives_cell")
    click_cell(page, "objectives-plot", "log-ratio", 1, 1)  # the log-ratio is no objective's map: a message
    expect(status).to_contain_text("that map is the credit or the log-ratio", timeout=LONG)
    outline_on(page, "objectives-plot", "moved|chunk_grpo", 5, 1)
    page.locator("#cell-traj input").fill("0")  # back to Compute's cell by the controls: the outline moves
    page.locator("#cell-step input").fill("0")
    page.click("#cell-btn")
    expect(status).to_contain_text("chunk_grpo at i=0, t=0", timeout=LONG)
    outline_on(page, "objectives-plot", "moved|chunk_grpo", 0, 0)
    assert page.evaluate("() => window.wbMaps.isConnected")
    page.get_by_role("tab", name="Chunks").click()
    chunks = page.locator("#chunks-status")
    expect(chunks).to_contain_text("chunks 1,2,2,3 over T=8 steps", timeout=LONG)
    title = page.locator("#curve-plot svg text").first
    expect(title).to_have_text("Temporal dynamics and chunks [1, 2, 2, 3]")
    click_step(page, "curve-plot", 4)  # a chunk starts at step 5: the boundary after 4 goes
    expect(chunks).to_contain_text("removed the boundary after step 4: chunks 1,2,5", timeout=LONG)
    expect(title).to_have_text("Temporal dynamics and chunks [1, 2, 5]")
    expect(page.locator("#curve-plot line.boundary")).to_have_count(2)
    expect(page.locator("#chunk-spec textarea")).to_have_value("1,2,5")
    click_step(page, "curve-plot", 6)  # and one after step 6 comes
    expect(chunks).to_contain_text("added the boundary after step 6: chunks 1,2,4,1", timeout=LONG)
    expect(title).to_have_text("Temporal dynamics and chunks [1, 2, 4, 1]")
    click_step(page, "curve-plot", 2)  # and the one after step 2 goes
    expect(chunks).to_contain_text("removed the boundary after step 2: chunks 1,6,1", timeout=LONG)
    expect(page.locator("#curve-plot line.boundary")).to_have_count(2)
    snap(page, "browser_chunks_click")
    page.get_by_role("tab", name="Objectives").click()
    expect(status).to_contain_text("chunks 1,6,1", timeout=LONG)
    page.wait_for_function(f"(plot) => ({CHUNK_LINES_JS})(plot) === 2 * 2", arg="objectives-plot", timeout=LONG)
    outline_on(page, "objectives-plot", "moved|chunk_grpo", 0, 0)  # new maps keep the selected cell
    snap(page, "browser_objectives_rechunked")
