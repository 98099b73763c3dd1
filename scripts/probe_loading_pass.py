"""What Gradio's loading-status pass costs a chunk edit in the page (issue 24; the finding behind `ui/direct.py`).

    .venv/bin/python scripts/probe_loading_pass.py [--slow-page 2] [--rounds 3]

Whenever Gradio's page dispatches an event that has a server function, it updates the loading status of every
component that any event so far has had as an input or an output (`update_loading_stati_state` in its Blocks
script), as the request leaves and as the reply lands. This script serves the page with that method patched (the
page's copy only, through Playwright's request routing) so that it can be switched off, and times the same chunk
edits in the same page with the pass and without it, alternated round by round, with `scripts/bench_app.py`'s
stopwatch. It also prints which components the pass visited and how many `structuredClone` calls (Svelte's
`$state.snapshot`, one per leaf value) an edit made.

On the commit before `ui/direct.py` the edits took the pass on every edit; since then the edits have no server
function and both columns read the same (the pass is not run): the script then measures that nothing is left to
gain there. The patch matches Gradio 6's minified script; another Gradio prints that the pattern is missing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_app as b  # the stopwatch and the page's steps of scripts/bench_app.py

PASS = "async update_loading_stati_state(){await"
SWITCHED = ("async update_loading_stati_state(){window.wbPass=window.wbPass||{};if(window.wbNoPass)return;"
            "for(const e of Object.keys(this.loading_stati.current))window.wbPass[e]=1;await")
CLONES = """() => {
  const clone = window.structuredClone;
  window.wbClones = 0;
  window.structuredClone = (...args) => { window.wbClones++; return clone(...args); };
}"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--slow-page", type=float, default=2.0, metavar="F", help="the page's main thread F times slower")
    p.add_argument("--rounds", type=int, default=3, help="rounds of the seven edits with and without the pass")
    args = p.parse_args()
    from playwright.sync_api import expect, sync_playwright

    def patch(route):
        reply = route.fetch()
        body = reply.text()
        if PASS not in body:
            print("this Gradio's Blocks script has no update_loading_stati_state as Gradio 6.31 wrote it")
        route.fulfill(response=reply, body=body.replace(PASS, SWITCHED))

    app, url = b.start_app()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=b.CHROMIUM_ARGS)
        page = browser.new_page()
        page.add_init_script(f"({b.FETCHES})()")
        page.add_init_script(f"({CLONES})()")
        page.route("**/Blocks-*.js", patch)
        try:
            b.open_and_generate(page, url, app)
            page.get_by_role("tab", name="Attribution").click()
            expect(page.locator("#credit-plot .js-plotly-plot")).to_be_visible(timeout=120_000)
            page.click("#credit-btn")
            b.until(page, b.CREDIT_DONE)
            page.get_by_role("tab", name="Chunks").click()
            expect(page.locator("#chunks-status")).to_contain_text("over T=16 steps", timeout=300_000)
            b.chunk_edit_ms(page, b.SPECS[:2])  # warm
            clones = page.evaluate("() => window.wbClones")
            b.chunk_edit_ms(page, b.SPECS)
            per_edit = (page.evaluate("() => window.wbClones") - clones) / len(b.SPECS)
            visited = len(page.evaluate("() => window.wbPass || {}"))
            if args.slow_page != 1:
                page.context.new_cdp_session(page).send("Emulation.setCPUThrottlingRate", {"rate": args.slow_page})
            times, splits = {"with": [], "without": []}, {"with": [], "without": []}
            for _ in range(args.rounds):
                for case in ("with", "without"):
                    page.evaluate(f"() => {{ window.wbNoPass = {str(case == 'without').lower()}; }}")
                    times[case] += b.chunk_edit_ms(page, b.SPECS, splits[case])
        finally:
            app.terminate()
            app.wait(timeout=30)
            browser.close()
    print(f"components the pass visited so far: {visited}; structuredClone calls per edit: {per_edit:.0f}")
    for case in ("with", "without"):
        print(f"page slowed {args.slow_page:g}x, {case} the pass: chunk edit {statistics.median(times[case]):.0f} ms "
              f"(median of {len(times[case])}) {b.parts(splits[case]).strip()}")


if __name__ == "__main__":
    main()
