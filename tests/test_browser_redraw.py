"""In headless chromium: each figure is drawn once per change (`workbench/ui/redraw.py`), and still updates."""

from __future__ import annotations

import pytest

pytest.importorskip("playwright", reason="pytest-playwright is not installed (pip install pytest-playwright)")

from playwright.sync_api import expect

from tests.test_browser import (  # noqa: F401 - its app, chromium launch fixture, skip marks and helpers
    LONG,
    browser_type_launch_args,
    generate,
    pytestmark,
    url,
)


def counts(page) -> dict:
    return page.evaluate("() => ({...window.wbRedraw})")


def test_a_chunk_edit_draws_the_changed_figure_once(page, url):  # noqa: F811 - the fixture
    page.goto(url)
    generate(page, group=2, steps=8)
    page.get_by_role("tab", name="Chunks").click()
    status, spec = page.locator("#chunks-status"), page.locator("#chunk-spec textarea")
    title = page.locator("#curve-plot .gtitle")
    expect(status).to_contain_text("over T=8 steps", timeout=LONG)
    expect(title).to_contain_text("[1, 2, 2, 3]", timeout=LONG)
    page.wait_for_timeout(500)
    for sizes in ("4,4", "2,6", "8"):
        before = counts(page)
        spec.fill(sizes)
        spec.press("Enter")
        expect(status).to_contain_text(f"typed: chunks {sizes}", timeout=LONG)
        expect(title).to_contain_text("[" + sizes.replace(",", ", ") + "]", timeout=LONG)  # the new figure shows
        page.wait_for_timeout(300)  # any late call of Gradio's has run by now
        after = counts(page)
        # the curve changed and is drawn once (Gradio asked twice, once on the element it then re-mounted); the
        # chunk map is the same "measure credit first" figure and is not redrawn
        assert after["drawn"] - before["drawn"] == 1, (before, after)
        assert after["dropped"] > before["dropped"], (before, after)
    expect(page.locator("#curve-plot .js-plotly-plot")).to_have_count(1)
