"""In headless chromium at 1280x800, as a student in a class: welcome -> Learn (the claim over the set, the example,
both exercises) -> each tab -> Compare. After every action that takes longer than a second the test reads the
viewport and finds the result, or a status line naming it, inside it. Screenshots (of the viewport, as the student
sees it): test-artifacts/lesson_*.jpg."""

from __future__ import annotations

import re

import pytest
from browser_support import ARTIFACTS, BROWSER, LONG, expect

from workbench.ui import learn, learn_exercise

pytestmark = BROWSER
HEIGHT = 800


@pytest.fixture(scope="module")
def small():
    """Learn's example and the exercise on small groups (the tiny model's CPU time), set before the page is built."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(learn.LEARN, "group", 4)
        patch.setitem(learn.LEARN, "steps", 6)
        patch.setitem(learn_exercise.EXERCISE, "group", 4)
        patch.setitem(learn_exercise.EXERCISE, "steps", 6)
        yield


@pytest.fixture(scope="module")
def lesson_url(small, tmp_path_factory):
    from app_support import free_port

    from workbench.models.embedded import build_embedded, save_embedded
    from workbench.ui.launch import launch_options
    from workbench.ui.layout import build_app
    from workbench.ui.workbench import Workbench

    model = save_embedded(build_embedded(seed=0), tmp_path_factory.mktemp("model"))
    wb = Workbench(model=str(model), device="cpu", runs_root=str(tmp_path_factory.mktemp("runs")), curve_prompts=2)
    demo = build_app(wb)
    port = free_port()
    demo.queue().launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True,
                        **launch_options())
    ARTIFACTS.mkdir(exist_ok=True)
    yield f"http://127.0.0.1:{port}/"
    demo.close()


def in_view(page, selector: str, name: str) -> None:
    """The element's top is inside the 1280x800 viewport once the page has settled; a viewport screenshot."""
    page.wait_for_timeout(800)  # Gradio's scroll to the output is smooth: let it land
    box = page.locator(selector).first.bounding_box()
    page.screenshot(path=str(ARTIFACTS / f"lesson_{name}.jpg"), type="jpeg", quality=85)
    assert box is not None and 0 <= box["y"] < HEIGHT - 20, (name, selector, box)


def test_a_class_walks_the_lesson_with_every_result_in_view(page, lesson_url):
    page.set_viewport_size({"width": 1280, "height": HEIGHT})
    page.goto(lesson_url)
    expect(page.locator("#welcome")).to_contain_text("New to GRPO?", timeout=LONG)
    in_view(page, "#welcome-btn", "welcome")
    page.click("#welcome-btn")
    expect(page.locator("#learn-claim")).to_contain_text("measured over 6 groups", timeout=LONG)
    page.click("#learn-btn")
    expect(page.locator("#learn-status")).to_contain_text("example ready", timeout=4 * LONG)
    in_view(page, "#learn-status", "learn_example")
    expect(page.locator("#learn-text-4")).to_contain_text("This group against the set")

    # exercise 1: mark cells on a fresh group, then the score
    page.click("#exercise-sample-btn")
    expect(page.locator("#exercise-status")).to_contain_text("fresh group sampled", timeout=LONG)
    in_view(page, "#exercise-status", "exercise_sampled")
    boxes = page.locator("#exercise-table [role=gridcell] input[type=checkbox]")  # the header has one per column
    expect(boxes).to_have_count(4 * 6, timeout=LONG)
    for n in (0, 1, 8):
        boxes.nth(n).click()
    expect(boxes.nth(8)).to_be_checked()
    in_view(page, "#exercise-table", "exercise_marked")
    page.click("#exercise-check-btn")
    expect(page.locator("#exercise-score")).to_contain_text("You marked 3 cells", timeout=LONG)
    in_view(page, "#exercise-check-status", "exercise_score")
    # exercise 2: predict the schedule
    page.locator("#exercise-choice").get_by_text("chunks of 4").click()
    page.click("#exercise-predict-btn")
    expect(page.locator("#exercise-verdict")).to_contain_text("You chose chunks of 4", timeout=LONG)
    in_view(page, "#exercise-predict-status", "exercise_prediction")

    # each tab with the example's group
    page.get_by_role("tab", name="Generate").click()
    expect(page.locator("#generate-status")).to_contain_text("G=4 trajectories of T=6 steps", timeout=LONG)
    page.evaluate("window.scrollTo(0, 0)")  # a tab opens instantly: the student reads it from its top
    page.screenshot(path=str(ARTIFACTS / "lesson_generate.jpg"), type="jpeg", quality=85)
    page.click("#generate-btn")  # a new group of the same prompt and seed
    expect(page.locator("#generate-status")).to_contain_text("sampled G=4 trajectories", timeout=LONG)
    in_view(page, "#generate-status", "generated")
    page.get_by_role("tab", name="Attribution").click()
    page.click("#credit-btn")
    expect(page.locator("#credit-status")).to_contain_text("measured credit", timeout=LONG)
    in_view(page, "#credit-status", "attribution_measured")
    page.get_by_role("tab", name="Chunks").click()
    expect(page.locator("#chunks-status")).to_contain_text("over T=6 steps", timeout=LONG)
    page.locator("#chunk-spec textarea").fill("2,4")
    page.click("#apply-spec-btn")
    expect(page.locator("#chunks-status")).to_contain_text("chunks 2,4", timeout=LONG)
    in_view(page, "#chunks-status", "chunks_applied")
    page.get_by_role("tab", name="Objectives").click()
    page.click("#objectives-btn")
    expect(page.locator("#objectives-status")).to_contain_text("explained", timeout=LONG)
    in_view(page, "#objectives-status", "objectives_computed")
    for tab in ("Fine-tune", "Runs", "Glossary"):
        page.get_by_role("tab", name=tab).click()
        page.wait_for_timeout(500)
        page.screenshot(path=str(ARTIFACTS / f"lesson_tab_{tab.lower()}.jpg"), type="jpeg", quality=85)

    # Compare: the headline names both policies, and so does the images' caption
    page.get_by_role("tab", name="Attribution").click()
    page.click("#compare-credit-btn")
    expect(page.locator("#credit-status")).to_contain_text("compared two policies", timeout=2 * LONG)
    text = page.locator("#compare-credit-text")
    expect(text).to_contain_text("In one sentence:")
    in_view(page, "#compare-credit-plot", "compared")  # the comparison itself, under the button
    expect(page.locator("#compare-images")).to_contain_text("top row")

    # Export and Copy link of the Compare: both groups and the table travel
    page.click("#export-btn")
    expect(page.locator("#share-status")).to_contain_text("page of both compared groups written", timeout=LONG)
    in_view(page, "#share-status", "compare_exported")
    page.click("#share-btn")
    expect(page.locator("#share-link textarea, #share-link input").first).to_have_value(re.compile("compare="),
                                                                                       timeout=LONG)
    link = page.locator("#share-link textarea, #share-link input").first.input_value()
    shared = page.context.new_page()
    shared.set_viewport_size({"width": 1280, "height": HEIGHT})
    shared.goto(link)
    expect(shared.locator("#share-status")).to_contain_text("compared with", timeout=4 * LONG)
    in_view(shared, "#share-status", "shared_compare_opened")
    expect(shared.locator("#compare-credit-text")).to_contain_text("In one sentence:")
    expect(shared.locator("#compare-credit-text")).to_contain_text("misattributed among determined")
    expect(shared.locator("#compare-images")).to_contain_text("top row")
    shared.locator("#compare-credit-plot").scroll_into_view_if_needed()
    in_view(shared, "#compare-credit-plot", "shared_compare_plot")
