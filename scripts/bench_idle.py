"""CPU an idle app spends: `python app.py` started on the embedded model, left alone until its model has loaded, then
its CPU-seconds per second over a quiet span, with no page open (Linux: read from /proc). Prints the figure of each
round and their median.

    .venv/bin/python scripts/bench_idle.py [--rounds 3] [--settle 25] [--span 20] [--page] [--json FILE]

An idle app should cost nothing: on two cores whatever it spends is taken from a fine-tune or the browser. Gradio's
queue looks for work every 1 ms while it has none, which cost ~5 % of a core (`workbench/ui/layout.py` `queued`).
With --page the app's page is open in headless chromium meanwhile (Generate tab, nothing pressed), and chromium's
CPU is measured too: Gradio's status tracker left the page drawing 60 frames a second for ever, chromium 0.067-0.068
CPU-s per second, 0.009-0.014 once `workbench/ui/frames.py` parked those frames.
Run it from another checkout to compare commits (`cd /tmp/old && python /work/main/scripts/bench_idle.py` runs that
checkout's app.py: the app is the one beside the working directory's scripts/ folder, `--root`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_app import CHROMIUM_ARGS, CpuWatch, cpu_seconds, free_port, wait_http


def idle_cpu(root: Path, settle: float, span: float, page: bool = False) -> dict[str, float]:
    """CPU-seconds per second of one app process ("app") over `span` seconds, `settle` seconds after its page answered;
    with `page`, chromium's processes too ("chromium"), the page opened as soon as it answered."""
    port = free_port()
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
    app = subprocess.Popen([sys.executable, str(root / "app.py"), "--port", str(port), "--runs", tempfile.mkdtemp()],
                           cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{port}/", app)
        if not page:
            time.sleep(settle)  # the model loads in the background once the server is up (app.py: wb.warm_up)
            start, t = cpu_seconds(app.pid)[1], time.time()
            time.sleep(span)
            return {"app": (cpu_seconds(app.pid)[1] - start) / (time.time() - t)}
        from playwright.sync_api import expect, sync_playwright

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            tab = browser.new_page(viewport={"width": 1280, "height": 900})
            tab.goto(f"http://127.0.0.1:{port}/")
            expect(tab.locator("#generate-btn")).to_be_visible(timeout=120_000)
            time.sleep(settle)
            with CpuWatch(app.pid) as cpu:
                t = time.time()
                time.sleep(span)
            seconds = time.time() - t
            browser.close()
        return {kind: cpu.seconds.get(kind, 0.0) / seconds for kind in ("app", "chromium")}
    finally:
        app.terminate()
        app.wait(timeout=30)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--settle", type=float, default=25.0, help="seconds from the page answering to the span")
    p.add_argument("--span", type=float, default=20.0, help="seconds measured")
    p.add_argument("--root", default=os.getcwd(), help="the checkout whose app.py runs (default: the working "
                   "directory)")
    p.add_argument("--json", default=None)
    p.add_argument("--page", action="store_true", help="the app's page open in headless chromium meanwhile")
    args = p.parse_args()
    rounds = [idle_cpu(Path(args.root), args.settle, args.span, args.page) for _ in range(args.rounds)]
    for kind in rounds[0]:
        figures = [r[kind] for r in rounds]
        print(f"idle {kind:9s} CPU-seconds per second{' (page open)' if args.page else ' with no page open'}: median "
              f"{statistics.median(figures):.3f} (rounds: {' / '.join(f'{f:.3f}' for f in figures)})")
    if args.json:
        out = {"idle_cpu_per_s": [r["app"] for r in rounds], "root": args.root, "page": args.page}
        if args.page:
            out["chromium_cpu_per_s"] = [r["chromium"] for r in rounds]
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
