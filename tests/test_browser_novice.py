"""In headless chromium, as a learner who has never heard of GRPO: the welcome leads into Learn, Learn's group
shows in Generate, Attribution, Chunks and Objectives, words hover to their glossary entry, and the Objectives
maps of an old group do not stay up, and a shared link opens the same view with the same numbers.
Screenshots: test-artifacts/novice_*.png."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from app_support import free_port
from browser_support import ARTIFACTS, BROWSER, LONG, expect, generate, set_number, snap
from PIL import Image

from workbench.core.imaging import grid
from workbench.ui.learn import LEARN, LEARN_PROMPT
from workbench.ui.run_handlers import label_strip

pytestmark = BROWSER


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(address, runs folder) of the app on a random-init tiny model (no training here)."""
    from workbench.models.embedded import build_embedded, save_embedded
    from workbench.ui.launch import launch_options
    from workbench.ui.layout import build_app
    from workbench.ui.workbench import Workbench

    model = save_embedded(build_embedded(seed=0), tmp_path_factory.mktemp("model"))
    runs = tmp_path_factory.mktemp("runs")
    wb = Workbench(model=str(model), device="cpu", runs_root=str(runs), curve_prompts=2)
    demo = build_app(wb)
    for attempt in range(3):  # gradio's start-up check gives the first page 3 s, which a loaded CPU can miss
        port = free_port()
        try:
            demo.queue().launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True,
                                **launch_options())
            break
        except ValueError as err:
            demo.close()
            if "localhost is not accessible" not in str(err) or attempt == 2:
                raise
    ARTIFACTS.mkdir(exist_ok=True)
    yield f"http://127.0.0.1:{port}/", runs
    demo.close()


@pytest.fixture
def url(served):
    return served[0]


@pytest.fixture
def app_runs(served):
    return served[1]


def shot(page, name: str) -> None:
    snap(page, f"novice_{name}")


def test_welcome_learn_then_every_tab_shows_the_group(page, url):
    page.goto(url)
    welcome = page.locator("#welcome")
    expect(welcome).to_contain_text("New to GRPO?", timeout=LONG)
    hover = welcome.locator("abbr[title^='GRPO: Group Relative Policy Optimization']")
    expect(hover).to_have_count(1)  # the word is hovered to its glossary entry, not stripped by the sanitiser
    shot(page, "welcome")
    page.click("#welcome-btn")
    expect(page.locator("#learn-btn")).to_be_visible(timeout=LONG)  # the Learn tab is open
    expect(page.locator("#learn-intro abbr[title^='credit: ']").first).to_be_attached()
    page.click("#learn-btn")
    expect(page.locator("#learn-status")).to_contain_text("example ready", timeout=4 * LONG)
    assert page.evaluate(CUT_JS, "#learn-gallery .caption-label") == []  # captions were cut ("traj 0: reward 0.9...")
    assert page.evaluate(PUSHED_JS) == []
    shot(page, "learn")
    g, t = LEARN["group"], LEARN["steps"]
    page.get_by_role("tab", name="Generate").click()
    expect(page.locator("#generate-status")).to_contain_text(f"G={g} trajectories of T={t} steps", timeout=LONG)
    expect(page.locator("#gallery img")).to_have_count(g, timeout=LONG)
    expect(page.locator("#prompt textarea")).to_have_value(LEARN_PROMPT)
    expect(page.locator("#logprob-plot .js-plotly-plot")).to_be_visible(timeout=LONG)
    expect(page.locator("#generate-intro abbr[title^='log-prob: ']")).to_have_count(1)
    shot(page, "generate")
    page.get_by_role("tab", name="Attribution").click()
    expect(page.locator("#credit-rates")).to_contain_text("Step misattribution", timeout=LONG)
    expect(page.locator("#credit-plot .js-plotly-plot")).to_be_visible(timeout=LONG)
    assert page.evaluate(PUSHED_JS) == []
    shot(page, "attribution")
    page.get_by_role("tab", name="Chunks").click()
    expect(page.locator("#chunks-status")).to_contain_text(f"over T={t} steps", timeout=LONG)
    expect(page.locator("#chunk-credit-plot")).to_contain_text("Chunk credit")
    expect(page.locator("#curve-plot svg")).to_contain_text("not the Generate group")
    assert page.evaluate(PUSHED_JS) == []
    shot(page, "chunks")
    page.get_by_role("tab", name="Objectives").click()
    expect(page.locator("#objectives-summary")).to_contain_text("Press Compute", timeout=LONG)
    page.get_by_role("tab", name="Glossary").click()
    expect(page.locator("#glossary")).to_contain_text("misattributed")
    shot(page, "glossary")


def test_objectives_maps_go_stale_with_a_new_group_and_take_a_scale_per_objective(page, url):
    page.goto(url)
    generate(page, group=3, steps=8)
    page.get_by_role("tab", name="Objectives").click()
    set_number(page, "obj-updates", 1)
    page.click("#objectives-btn")
    status = page.locator("#objectives-status")
    from workbench.ui.jobs import objective_names

    expect(status).to_contain_text(f"explained {len(objective_names())} objectives", timeout=LONG)
    plot = page.locator("#objectives-plot")
    expect(plot.locator("svg text").first).to_contain_text("one colour scale")
    page.locator("#obj-scale").get_by_text("a scale per objective").click()
    expect(status).to_contain_text("each map on its own colour scale", timeout=LONG)
    expect(plot.locator("svg text").first).to_contain_text("each map on its own colour scale")
    shot(page, "objectives_each")
    page.get_by_role("tab", name="Generate").click()
    generate(page, group=3, steps=6)
    page.get_by_role("tab", name="Objectives").click()
    expect(page.locator("#objectives-summary")).to_contain_text("The group changed", timeout=LONG)
    expect(plot).to_contain_text("the group changed: press Compute")
    expect(plot.locator("g.panel")).to_have_count(0)  # the old group's maps are gone
    shot(page, "objectives_stale")


def address(page, *parts: str) -> str:
    """The page's query string once it holds every one of `parts` (it follows the view without Copy link)."""
    for _ in range(LONG // 250):
        query = page.evaluate("window.location.search")
        if all(part in query for part in parts):
            return query
        page.wait_for_timeout(250)
    raise AssertionError(f"the address bar holds {query!r}, not all of {parts}")


def measure_credit(page, continuations: int) -> None:
    """On the Attribution tab, just opened: set M and measure credit, waiting for the status. M is typed once the
    address bar names the tab (the reply to the tab switch's own events): typed at once, it was lost once in a
    fresh-clone `make test` (2026-12-04: the box went back to its default 4 before the press, "measured credit with
    M=4"; not reproduced in 12 later runs of the test beside a busy core, nor in 5 with chromium slowed six-fold)."""
    address(page, "tab=attribution")
    set_number(page, "credit-k", continuations)
    expect(page.locator("#credit-k input[type=number]")).to_have_value(str(continuations))
    page.click("#credit-btn")
    expect(page.locator("#credit-status")).to_contain_text(f"measured credit with M={continuations}",
                                                           timeout=LONG)


def test_the_address_bar_follows_the_view_without_copy_link(page, url, browser):
    page.goto(url)
    assert page.evaluate("window.location.search") == ""  # nothing to hold before a group exists
    generate(page, group=3, steps=6)
    query = address(page, "G=3", "T=6", "seed=0", "noise=0.7", "sampler=flow_grpo", "chunks=", "tab=generate")
    page.get_by_role("tab", name="Chunks").click()
    expect(page.locator("#chunks-status")).to_contain_text("over T=6 steps", timeout=LONG)
    page.locator("#chunk-spec textarea").fill("1,2,3")
    page.click("#apply-spec-btn")
    address(page, "chunks=1%2C2%2C3", "tab=chunks")  # a chunk edit and the tab switch
    page.get_by_role("tab", name="Attribution").click()
    address(page, "tab=attribution")
    measure_credit(page, 2)
    rates = page.locator("#credit-rates [data-testid=markdown]").inner_text()
    query = address(page, "continuations=2", "chunks=1%2C2%2C3", "tab=attribution")
    assert page.locator("#share-link textarea").input_value() == url + query  # the link box shows it too
    other = browser.new_page()
    try:
        other.goto(url + query)
        expect(other.locator("#share-status")).to_contain_text("opened a shared link", timeout=4 * LONG)
        expect(other.locator("#credit-rates")).to_contain_text("Step misattribution", timeout=LONG)
        assert other.locator("#credit-rates [data-testid=markdown]").inner_text() == rates  # the same numbers
        expect(other.get_by_role("tab", name="Attribution")).to_have_attribute("aria-selected", "true")
        expect(other.locator("#credit-k input[type=number]")).to_have_value("2")
        assert other.evaluate("window.location.search") == query  # opening the link keeps it (chunks 1,2,3 too)
    finally:
        other.close()


def test_a_shared_link_opens_the_same_view_with_the_same_numbers(page, url, browser):
    page.goto(url)
    generate(page, group=3, steps=6)
    page.get_by_role("tab", name="Attribution").click()
    measure_credit(page, 2)
    rates = page.locator("#credit-rates [data-testid=markdown]").inner_text()  # the text, not a progress timer over it
    page.click("#share-btn")
    link_box = page.locator("#share-link textarea")
    expect(link_box).to_have_value(re.compile(r"^http://127\.0\.0\.1:\d+/\?model=base&prompt="), timeout=LONG)
    link = link_box.input_value()
    for part in ("G=3", "T=6", "seed=0", "continuations=2", "estimator=mc", "tab=attribution", "chunks="):
        assert part in link, (part, link)
    # the address bar holds the view too: COPY_JS sets it in a step after the link box is filled, so wait for it
    expect(page).to_have_url(link, timeout=LONG)
    other = browser.new_page()
    try:
        other.goto(link)
        expect(other.locator("#share-status")).to_contain_text("opened a shared link", timeout=4 * LONG)
        expect(other.locator("#credit-rates")).to_contain_text("Step misattribution", timeout=LONG)
        assert other.locator("#credit-rates [data-testid=markdown]").inner_text() == rates  # the same numbers
        expect(other.get_by_role("tab", name="Attribution")).to_have_attribute("aria-selected", "true")
        expect(other.locator("#credit-k input[type=number]")).to_have_value("2")
        expect(other.locator("#credit-plot .js-plotly-plot")).to_be_visible(timeout=LONG)
        snap(other, "novice_shared_link")
    finally:
        other.close()


def test_the_exported_page_opens_offline_with_every_figure(page, url, browser, tmp_path):
    page.goto(url)
    generate(page, group=3, steps=6)
    page.get_by_role("tab", name="Attribution").click()
    measure_credit(page, 2)
    page.click("#export-btn")
    expect(page.locator("#share-status")).to_contain_text("page written", timeout=LONG)
    with page.expect_download(timeout=LONG) as download:
        page.locator("#export-file a").first.click()
    saved = tmp_path / "page.html"
    download.value.save_as(saved)
    assert saved.stat().st_size < 10_000_000
    offline = browser.new_context(offline=True, viewport={"width": 1280, "height": 900})
    try:
        view = offline.new_page()
        view.goto(saved.as_uri())
        view.wait_for_function("document.querySelectorAll('.js-plotly-plot .main-svg').length >= 4", timeout=LONG)
        expect(view.locator(".js-plotly-plot")).to_have_count(5)  # log-probs, credit, chunks, L1_rel, objectives
        expect(view.locator("img")).to_have_count(2)
        assert all(view.locator("img").evaluate_all("imgs => imgs.map(i => i.naturalWidth > 0)"))
        expect(view.locator("body")).to_contain_text("python -m workbench export --prompt")
        snap(view, "novice_exported_page")
    finally:
        offline.close()


BOXES_JS = """(sel) => [...document.querySelectorAll(sel)].map(e => e.getBoundingClientRect())
  .filter(r => r.width > 0).map(r => [r.left, r.top, r.right, r.bottom])"""
PUSHED_JS = """() => [...document.querySelectorAll('.js-plotly-plot')].filter(g => g.offsetParent)
    .flatMap(g => {
      const svg = g.querySelector('.main-svg'), width = +svg.getAttribute('width');
      const height = +svg.getAttribute('height');
      const areas = [...g.querySelectorAll('.draglayer .nsewdrag')]
        .map(r => ['x', 'y', 'width', 'height'].map(k => Number(r.getAttribute(k))));
      if (!areas.length) return [`${g.closest('[id]')?.id}: no plot area drawn`];
      const drawn = {l: Math.min(...areas.map(a => a[0])), r: width - Math.max(...areas.map(a => a[0] + a[2])),
                     b: height - Math.max(...areas.map(a => a[1] + a[3]))};
      return ['l', 'r', 'b'].filter(k => g.layout.margin?.[k] !== undefined && drawn[k] > g.layout.margin[k] + 0.5)
        .map(k => `${g.closest('[id]')?.id}: margin ${k} ${g.layout.margin[k]} -> ${Math.round(drawn[k])}`);
    })"""
# the shown plots whose margins plotly pushed out to fit a legend, colorbar or labels (the plot areas it drew, the
# rectangles a drag acts on, sit further in than the figure's margins ask): it draws such a figure twice
# (the Attribution map 143-153 ms instead of 66-70 in chromium: bench/figures.py), on every update

CUT_JS = """(sel) => [...document.querySelectorAll(sel)].filter(e => e.scrollWidth > e.clientWidth + 1)
  .map(e => e.textContent)"""


def overlapping(boxes: list) -> list:
    """Pairs of boxes [left, top, right, bottom] that intersect (by more than a pixel)."""
    return [(a, b) for n, a in enumerate(boxes) for b in boxes[n + 1:]
            if min(a[2], b[2]) - max(a[0], b[0]) > 1 and min(a[3], b[3]) - max(a[1], b[1]) > 1]


def lesson_like_run(runs: Path) -> str:
    """A finished run with training metrics and two held-out grids of 8 prompts x 2 rows (a lesson's size)."""
    run = runs / "lesson-like"
    (run / "samples").mkdir(parents=True)
    rows = [{"iteration": i, "reward/mean": 0.1 * i, "loss/policy": 0.01, "policy/clip_frac": 0.1, "loss/kl": 0.0,
             "policy/grad_norm": 1.0, "chunk/ratio_mean_0": 1.0, "eval/reward_mean": 0.5} for i in range(3)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "status.json").write_text(json.dumps({"state": "finished", "iteration": 2}))
    (run / "config.json").write_text(json.dumps({"iterations": 2, "objective": "chunk_grpo"}))
    for it in (0, 2):
        grid(torch.rand(16, 3, 32, 32), ncol=8, scale=4).save(run / "samples" / f"eval_{it:04d}.png")
    assert Image.open(run / "samples" / "eval_0000.png").size == (1042, 262)  # 8 x 130 + 2, as the crosses lesson
    return run.name


def test_the_listed_view_defects_are_gone(page, url, app_runs):
    name = lesson_like_run(app_runs)
    page.goto(url)
    generate(page, group=4, steps=8)
    expect(page.locator("#gallery img")).to_have_count(4, timeout=LONG)
    assert page.evaluate(CUT_JS, "#gallery .caption-label") == []  # no caption cut ("traj 0: reward 0.9...")
    strip = page.locator("#filmstrip img")  # the x0 filmstrip carries a strip of step numbers above its cells
    expect(strip).to_have_js_property("complete", True, timeout=LONG)  # loaded: a busy machine can lag the gallery
    assert strip.evaluate("i => i.naturalHeight") == 36 + 4 * (32 * 3 + 2) + 2
    shot(page, "defect_generate")
    page.get_by_role("tab", name="Attribution").click()
    page.click("#credit-btn")
    busy = page.locator("#credit-plot [data-testid=status-tracker]:not(.hide)")
    expect(busy).to_have_count(1, timeout=LONG)  # the progress shows over the map ...
    assert page.locator("#credit-rates [data-testid=status-tracker]:not(.hide)").count() == 0  # ... not the rates
    shot(page, "defect_credit_progress")
    expect(page.locator("#credit-status")).to_contain_text("measured credit", timeout=LONG)
    expect(page.locator("#credit-plot .legend")).to_be_visible()
    boxes = page.evaluate(BOXES_JS, "#credit-plot .legend, #credit-plot .xtitle, #credit-plot .x2title")
    assert len(boxes) == 3 and overlapping(boxes) == []  # the legend under the axis titles, not over them
    page.get_by_role("tab", name="Fine-tune").click()
    page.locator("#show-run input").fill(name)
    page.locator("#show-run input").press("Enter")
    expect(page.locator("#run-state")).to_contain_text(f"Run {name}", timeout=LONG)
    expect(page.locator("#train-plot .js-plotly-plot")).to_be_visible(timeout=LONG)
    texts = ", ".join(f"#train-plot {c}" for c in (".xtitle", ".ytitle", ".annotation-text", ".xtick", ".ytick"))
    assert overlapping(page.evaluate(BOXES_JS, texts)) == []  # no subplot label runs into another
    for which in ("before", "now"):
        image = page.locator(f"#train-{which} img")
        expect(image).to_be_visible(timeout=LONG)
        assert image.bounding_box()["width"] >= 8 * 120  # 8 prompts, each cell well over 75 px wide
        label = page.locator(f"#train-{which} label").bounding_box()
        top = image.bounding_box()["y"]
        scale = image.bounding_box()["height"] / image.evaluate("i => i.naturalHeight")
        natural = image.evaluate("i => i.naturalHeight")
        strip = next(s for s in range(40, natural) if s == label_strip(natural - s))  # white rows above the grid
        assert label["y"] + label["height"] <= top + strip * scale + 1  # the label sits on the white strip
    shot(page, "defect_finetune")
