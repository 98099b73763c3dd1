"""What the cell's formula costs an Objectives map click in the page (issue 24; docs/perf-data/epyc/README.md).

    .venv/bin/python scripts/probe_formula_cost.py [--slow-page 2] [--rounds 3]

A map click's reply carries the clicked cell's formula, four or five display equations: until 2026-12-05 Markdown that
Gradio's Markdown typeset with KaTeX (about 860 elements), since then HTML with the equations as MathML
(`workbench/ui/mathml.py`, about 230 elements). This script times the same map clicks in the same page
(`scripts/bench_app.py`'s clicks and stopwatch) with the formula as the app sends it and with the formula cut to its
first paragraph (of the Markdown or of the HTML), the plain sentence that names the cell (so the stopwatch, which waits
for that sentence, still stops), alternated round by round. The page's copy of each reply is rewritten in the page (a
wrapper of `fetch`, in both cases, so both pay the wrapper); the app is the same. The difference is what drawing the
formula costs the click. It also prints the drawn formula's element count.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_app as b  # the stopwatch and the page's steps of scripts/bench_app.py

PLAIN = """() => {
  const fetch = window.fetch;  // bench_app's FETCHES wrapper (it times the reply), wrapped once more
  window.fetch = async (...args) => {
    const reply = await fetch(...args);
    if (!String(args[0]).includes("/run/objectives_click")) return reply;
    const body = await reply.json();  // both cases read and rebuild the reply
    if (window.wbPlainFormula && Array.isArray(body.data)) {
      const first = (v) => v.startsWith("<") ? v.slice(0, v.indexOf("</p>") + 4) + "</div>" : v.split("\\n\\n")[0];
      body.data = body.data.map((v) => typeof v === "string" && v.includes("trajectory i = ") ? first(v) : v);
    }
    return new Response(JSON.stringify(body), {status: reply.status, headers: reply.headers});
  };
}"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--slow-page", type=float, default=2.0, metavar="F", help="the page's main thread F times slower")
    p.add_argument("--rounds", type=int, default=3, help="rounds of seven clicks with each formula")
    args = p.parse_args()
    from playwright.sync_api import sync_playwright

    app, url = b.start_app()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=b.CHROMIUM_ARGS)
        page = browser.new_page()
        page.add_init_script(f"({b.FETCHES})()")
        page.add_init_script(f"({PLAIN})()")
        try:
            b.open_and_generate(page, url, app)
            page.get_by_role("tab", name="Objectives").click()
            page.click("#objectives-btn")
            b.until(page, b.SHOWS, ["#objectives-status", "after 3 updates"])
            page.wait_for_function(b.MAPS_DRAWN, arg="objectives-plot", timeout=120_000)
            b.map_click_ms(page, 3)  # warm: the formula's scripts and fonts loaded
            elements = page.evaluate("() => document.querySelectorAll('#cell-formula *').length")
            if args.slow_page != 1:
                page.context.new_cdp_session(page).send("Emulation.setCPUThrottlingRate", {"rate": args.slow_page})
            times, splits = {"typeset": [], "plain": []}, {"typeset": [], "plain": []}
            for _ in range(args.rounds):
                for case in ("typeset", "plain"):
                    page.evaluate(f"() => {{ window.wbPlainFormula = {str(case == 'plain').lower()}; }}")
                    times[case] += b.map_click_ms(page, 7, splits[case])
        finally:
            app.terminate()
            app.wait(timeout=30)
            browser.close()
    print(f"elements of the drawn formula (after the warm-up clicks): {elements}")
    for case, what in (("typeset", "the formula as sent"), ("plain", "its first paragraph only")):
        print(f"page slowed {args.slow_page:g}x, {what}: map click {statistics.median(times[case]):.0f} ms "
              f"(median of {len(times[case])}) {b.parts(splits[case]).strip()}")


if __name__ == "__main__":
    main()
