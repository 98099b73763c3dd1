"""Helpers of the browser tests (tests/test_browser*.py): Debian's chromium, the skip marks, screenshots, typing a
number, generating a group. Their fixtures (the chromium launch, the app on a tiny model) are in conftest.py.

Needs Debian's chromium-headless-shell or chromium (`apt-get install -y chromium-headless-shell chromium`; both come
with `scripts/setup.sh --dev`) and pytest-playwright; never `playwright install`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

# Debian's "old headless shell" of the same Chromium build, the browser Playwright itself runs headless: Blink and V8
# without the browser's own UI (no WebUI renderer, fewer processes). In a whole `make test` chromium took 98-112
# CPU-seconds as the shell against 146 as /usr/bin/chromium (140b72a:scripts/cpu_by_process.py and
# docs/perf-data/epyc/README.md; tests/conftest.py's page costs were measured in chromium). The full chromium
# where the shell is missing; bench/browser.py keeps timing the full one, a learner's browser.
CHROMIUM = next((path for path in map(Path, ("/usr/bin/chromium-headless-shell", "/usr/bin/chromium"))
                 if path.exists()), Path("/usr/bin/chromium"))
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
LONG = 120_000  # ms; the CPU may be shared with a training job

pytest.importorskip("playwright", reason="pytest-playwright is not installed (pip install pytest-playwright)")
BROWSER = [pytest.mark.browser,  # each browser test file's pytestmark
           pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium-headless-shell and /usr/bin/chromium "
                              "are missing: apt-get update && apt-get install -y chromium-headless-shell")]

from playwright.sync_api import expect  # noqa: E402


def snap(page, name: str) -> None:
    """A full-page screenshot test-artifacts/NAME.jpg for a person to read. JPEG (quality 85): half the CPU of a PNG
    of the same page in chromium (0.2 against 0.4 s measured here), and the suite takes 26 of them."""
    page.screenshot(path=str(ARTIFACTS / f"{name}.jpg"), full_page=True, type="jpeg", quality=85)


def set_number(page, elem_id: str, value) -> None:
    """Type into the number box of a gr.Number or gr.Slider and commit it."""
    box = page.locator(f"#{elem_id} input[type=number]")
    box.fill(str(value))
    box.press("Enter")
    box.blur()


def generate(page, group: int = 3, steps: int = 8) -> None:
    set_number(page, "gen-group", group)
    set_number(page, "gen-steps", steps)
    page.click("#generate-btn")
    expect(page.locator("#generate-status")).to_contain_text(f"sampled G={group} trajectories of T={steps}",
                                                             timeout=LONG)


STEP_JS = """([plot, step]) => {
    const column = document.querySelector(`#${plot} rect.step[data-step="${step}"]`);
    column.scrollIntoView({block: "center"});
    const box = column.getBoundingClientRect();
    return [box.left + box.width / 2, box.top + box.height / 3];
}"""  # the page position above step `step` of the curve, a third of the way down the plot (viz/dynamics_svg.py)


def click_step(page, plot: str, step: int) -> None:
    """Click the curve above step `step`, as a user would."""
    page.mouse.click(*page.evaluate(STEP_JS, [plot, step]))
