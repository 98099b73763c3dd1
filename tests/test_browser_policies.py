"""In headless chromium: load a run's checkpoint with the model picker, measure a group's credit under it and
under its base model (Attribution's Compare), and come back to the run in Runs. Screenshots: test-artifacts/."""

from __future__ import annotations

import pytest
from app_support import free_port
from browser_support import ARTIFACTS, BROWSER, LONG, expect, generate, set_number, snap
from support import make_run

pytestmark = BROWSER


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    """The app on a random-init tiny model with one run of it on disk (checkpoints at iterations 10 and 20)."""
    from workbench.models.embedded import build_embedded, save_embedded
    from workbench.ui.launch import launch_options
    from workbench.ui.layout import build_app
    from workbench.ui.workbench import Workbench

    model = save_embedded(build_embedded(seed=0), tmp_path_factory.mktemp("model"))
    wb = Workbench(model=str(model), device="cpu", runs_root=str(tmp_path_factory.mktemp("runs")), curve_prompts=2)
    run = make_run(wb.jobs.root, model, iterations=(10, 20), name="lesson")
    demo = build_app(wb)
    port = free_port()
    demo.queue().launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True,
                        **launch_options())
    ARTIFACTS.mkdir(exist_ok=True)
    yield f"http://127.0.0.1:{port}/", run
    demo.close()


def test_load_a_checkpoint_and_compare_credit_before_and_after(page, app):
    url, run = app
    page.goto(url)
    expect(page.locator("#model-header")).to_contain_text("Every tab uses", timeout=LONG)
    picker = page.locator("#model-picker input")
    picker.fill(str(run / "checkpoints" / "iter_0010"))
    picker.press("Enter")
    page.click("#model-load-btn")
    expect(page.locator("#model-header")).to_contain_text("run lesson, iteration 10", timeout=LONG)
    expect(page.locator("#model-status")).to_contain_text("loaded run lesson, iteration 10")
    generate(page, group=4, steps=6)
    page.get_by_role("tab", name="Attribution").click()
    set_number(page, "credit-k", 2)
    page.click("#compare-credit-btn")
    expect(page.locator("#credit-status")).to_contain_text("compared two policies", timeout=LONG)
    expect(page.locator("#compare-credit-plot .js-plotly-plot")).to_be_visible(timeout=LONG)
    text = page.locator("#compare-credit-text")
    expect(text).to_contain_text("misattributed among determined")
    expect(text).to_contain_text("run lesson @ 10")
    expect(page.locator("#model-picker input")).to_have_value("run lesson · iteration 10")  # the choice's label
    expect(page.locator("#compare-images img")).to_be_visible()
    page.locator("#compare-credit-plot").screenshot(path=str(ARTIFACTS / "browser_compare_maps.png"))
    snap(page, "browser_compare")
    picker.fill("/no/such/model")
    picker.press("Enter")
    page.click("#model-load-btn")
    expect(page.locator("#model-status")).to_contain_text("is not a folder this app offers", timeout=LONG)
    expect(page.locator("#model-header")).to_contain_text("iteration 10")  # the loaded policy stays


def test_a_run_is_shown_again_in_a_fresh_page(page, app):
    url, _ = app
    page.goto(url)
    page.get_by_role("tab", name="Runs").click()
    expect(page.locator("#runs-table")).to_contain_text("lesson", timeout=LONG)
    expect(page.locator("#runs-line")).to_contain_text("finished", timeout=LONG)
    expect(page.locator("#runs-progress")).to_contain_text("iteration 20/20")
    snap(page, "browser_runs_shown")
