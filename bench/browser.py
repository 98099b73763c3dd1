"""Benchmark the browser workbench: start-up, chunk-edit and curve-click latency in the browser, the Objectives
tab, memory. Prints figures.

    .venv/bin/python bench/browser.py [--model PATH] [--edits 7] [--read 0] [--lesson] [--slow-page 1]
                                          [--json FILE]

1. Start `python app.py` and time it to HTTP 200 with the page title, and to the Generate button
   visible in headless chromium (target 10 s).
2. Generate a group (G=8, T=16; with --read S once the page has stayed idle S seconds, as while a person reads),
   open the Attribution tab (timed to its first render), measure its credit (M=4) three times (with the CPU the app
   and chromium spend meanwhile in the last two, `credit_cpu_per_s`), then type chunk
   specs in the Chunks tab and time each from Enter to the first frame in which the status, the curve's title and
   lines and the chunk map's boundary lines show the new chunks (target 150 ms, issue 24). The
   page times itself (`WATCH`).
3. Click the temporal-dynamics curve to toggle boundaries and time each from the click to the same
   (target 150 ms).
4. The Objectives tab: N=3 inner updates and every objective's maps, from Compute to the status; then click cells
   of the maps and time each from the click to the first frame in which the status, the formula and the maps'
   outline show the cell (issue 24's 150 ms, as for the curve).
5. Resident memory of the app process after each stage (target 700 MB after Generate + credit), and its split into
   what the app allocated and the pages of files it maps (`memory_mb`).
6. With --lesson: start the crosses lesson from the Fine-tune tab, watch it to the end, and read the app's
   memory again (target 1 GB; about 7 minutes on 2 quiet cores) and the CPU-seconds that the app, its trainer and
   chromium spent meanwhile (`lesson_cpu_s`).

Each edit's and click's time is also split in three (`split_ms`): the page before its request (Gradio's dispatch),
the request to its reply (the app's handler and the way there and back), the page after the reply (Gradio's update of
the outputs and plotly's draws). `--slow-page F` runs the page's main thread F times slower (chromium's CPU throttling,
as DevTools offers it), to see the page of a slower processor; the app and chromium's other threads keep their speed,
so the middle part is this machine's.

Without the embedded weights (workbench/weights/embedded/) a random-init model of the same size is
used, so the timings still hold. Needs /usr/bin/chromium and playwright.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TITLE = "Chunk-GRPO Workbench"
CREDIT_AGAIN = 2  # further presses of Measure credit after the first, timed too
SPECS = ["4,4,4,4", "2,3,4,7", "8,8", "1,1,2,4,8", "16", "2,2,2,2,2,2,2,2", "3,5,8"]
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def model_folder(given: str | None) -> str | None:
    """The model to benchmark: the given folder, the embedded weights, or a random-init stand-in."""
    sys.path.insert(0, str(ROOT))
    from workbench.models.embedded import DEFAULT_WEIGHTS, build_embedded, save_embedded

    if given or (DEFAULT_WEIGHTS / "model.safetensors").is_file():
        return given
    print("embedded weights not found: benchmarking a random-init model of the same size")
    return str(save_embedded(build_embedded(seed=0), tempfile.mkdtemp(prefix="bench-model-")))


def start_app() -> tuple[subprocess.Popen, str]:
    """`python app.py` on a free port with a throwaway runs folder, as the probe scripts start it: (process, url)."""
    port = free_port()
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
    app = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--port", str(port), "--runs", tempfile.mkdtemp()],
                           cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return app, f"http://127.0.0.1:{port}/"


def open_and_generate(page, url: str, app: subprocess.Popen) -> None:
    """Once the app answers, open its page and generate a group (G=8, T=16, the defaults), untimed."""
    from playwright.sync_api import expect

    wait_http(url, app)
    page.goto(url)
    expect(page.locator("#generate-btn")).to_be_visible(timeout=120_000)
    page.click("#generate-btn")
    until(page, SHOWS, ["#generate-status", "sampled G=8"], 300_000)


def wait_http(url: str, process: subprocess.Popen, timeout: float = 120.0) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if process.poll() is not None:
            raise SystemExit(f"app.py exited with code {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200 and TITLE in response.read().decode(errors="replace"):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"no page at {url} after {timeout:.0f} s")


def memory_mb(pid: int) -> dict[str, float]:
    """Resident memory of a process in MB: rss (the target's figure) and, where /proc has them, its anon part (what
    the process allocated) and its file part (pages of shared libraries and other files it maps). The file part
    follows the page cache, not the app: libtorch_cpu.so alone held 153 MB of the app's RSS in a venv installed
    minutes before and 81 MB some 25 minutes later, the anon part the same (issue 24,
    140b72a:docs/perf-data/epyc/README.md)."""
    status = Path(f"/proc/{pid}/status")
    if status.exists():
        fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        out = {key: int(fields[name].split()[0]) / 1024 for key, name in
               (("rss", "VmRSS"), ("anon", "RssAnon"), ("file", "RssFile")) if name in fields}
        if "rss" in out:
            return out
    import psutil

    return {"rss": psutil.Process(pid).memory_info().rss / 2**20}


def record_memory(out: dict, pid: int, stage: str) -> None:
    """The app's memory after `stage` into out["rss_mb"] and, split, out["memory_mb"]."""
    memory = memory_mb(pid)
    out.setdefault("rss_mb", {})[stage] = memory["rss"]
    out.setdefault("memory_mb", {})[stage] = memory


DONE = """([status, title, lines]) => {
    const s = document.querySelector('#chunks-status'), t = document.querySelector('#curve-plot svg text');
    const drawn = (plot) => [...document.querySelectorAll(`#${plot} svg line.boundary`)].map(line => line.dataset.x)
        .join(',');
    return !!s && !!t && s.innerText.includes(status) && t.textContent.includes(title)
        && drawn('chunk-credit-plot') === lines && drawn('curve-plot') === lines;
}"""  # the status, the curve's title and lines and the chunk map's lines show the new chunks (viz/dynamics_svg.py,
# viz/chunk_map.py)


WATCH = """([kind, args]) => {
    const done = (DONE);
    window.wbLatency = null;
    const input = (event) => {
        if (kind === "keydown" && event.key !== "Enter") return;
        document.removeEventListener(kind, input, true);
        window.wbInput = event.timeStamp;
        const frame = () => done(args) ? window.wbLatency = (window.wbDone = performance.now()) - event.timeStamp
                                       : requestAnimationFrame(frame);
        requestAnimationFrame(frame);
    };
    document.addEventListener(kind, input, true);
}"""  # a stopwatch in the page, from the input event to the first frame that shows DONE
FETCHES = """() => {
    if (window.wbFetches) return;
    window.wbFetches = [];
    const fetch = window.fetch.bind(window);
    window.fetch = async (...args) => {
        const sent = performance.now();
        const reply = await fetch(...args);
        window.wbFetches.push([sent, performance.now()]);
        return reply;
    };
}"""  # every request the page sends, with the time the page had its reply's headers (a page init script)
SPLIT = """() => {
    const first = window.wbFetches.find(([sent]) => sent >= window.wbInput && sent <= window.wbDone);
    return first ? [first[0] - window.wbInput, first[1] - first[0], window.wbDone - first[1]] : null;
}"""  # the stopwatch's reading in three: the page before the request, the request, the page after its reply
MAP_DONE = """([name, key, i, t]) => {
    const s = document.querySelector('#objectives-status'), f = document.querySelector('#cell-formula');
    const panel = [...document.querySelectorAll('#objectives-plot g.panel')]
        .find(g => g.dataset.trace === `${key}|${name}`);
    const box = document.querySelector('#objectives-plot rect.wb-outline'), svg = box?.ownerSVGElement;
    const at = (k, n, size, cells) => Math.abs(box.getAttribute(k) - panel.dataset[k]
        - n * panel.dataset[size] / cells);
    return !!s && !!f && s.innerText.includes(`${name} at i=${i}, t=${t}`)
        && f.innerText.includes(`trajectory i = ${i}, step t = ${t}`) && !!panel && !!box
        && at('x', t, 'w', svg.dataset.cols) < 0.2 && at('y', i, 'h', svg.dataset.rows) < 0.2;
}"""  # the status, the formula and the maps' gold outline show the clicked cell (viz/push_maps.py)
WATCH_MAP = WATCH.replace("(DONE)", MAP_DONE)
WATCH = WATCH.replace("(DONE)", DONE)


SHOWS = """([selector, text]) => (document.querySelector(selector)?.innerText || "").includes(text)"""
CREDIT_DONE = """() => !document.querySelector('#credit-plot [data-testid=status-tracker]:not(.hide)')
    && (document.querySelector('#credit-status')?.innerText || "").includes("measured credit")"""


def until(page, check: str, arg=None, timeout: int = 600_000) -> None:
    """Wait until the page's `check` holds, looking every 50 ms. Playwright's `expect` backs off to a look every
    500 ms, so the timed presses ended at its next look: credit presses read 3.4 or 3.9 s, and nothing between,
    for measurements of 3.1-3.5 s (140b72a:docs/perf-data/epyc/README.md, "The app's threads measured again")."""
    page.wait_for_function(check, arg=arg, polling=50, timeout=timeout)


def measured_seconds(page) -> float:
    """The seconds measure_credit took by its own clock, from the Attribution status ('... (4.2 s)')."""
    import re

    found = re.search(r"\(([0-9.]+) s\)", page.locator("#credit-status").inner_text())
    return float(found.group(1)) if found else float("nan")


def stopwatch(page, kind: str, args: list, watch: str = WATCH) -> None:
    """Arm the page's stopwatch for the next `kind` event (keydown of Enter, or mouseup)."""
    page.evaluate(watch, [kind, args])


def latency_ms(page, splits: list | None = None) -> float:
    """The armed stopwatch's reading once it stopped. The page times itself: it checks DONE on every animation frame
    and stamps the input with the event's own time, so neither Playwright's messages nor a polling loop of its
    (which ran the check over CDP on every frame, loading the 2 cores the app shares) enter the figure. The reading's
    three parts (`split_ms`) are appended to splits when given."""
    page.wait_for_function("() => window.wbLatency !== null", polling=50, timeout=60_000)
    if splits is not None:
        splits.append(split_ms(page))
    return page.evaluate("() => window.wbLatency")


def split_ms(page) -> list[float] | None:
    """The stopwatch's last reading in three (ms): from the input to the request the page sends, from that request to
    its reply's headers (the server's work and the way there and back), and from the reply to the frame the stopwatch
    stopped at (Gradio's update of the outputs and plotly's draws). None when the page sent no request meanwhile."""
    return page.evaluate(SPLIT)


def lines(sizes: list[int]) -> str:
    """The chunk map's boundary lines for sizes, as DONE reads them."""
    from workbench.rl.chunking import chunk_boundaries

    return ",".join(f"{b - 0.5:g}" for b in chunk_boundaries(sizes))


def chunk_edit_ms(page, specs: list[str], splits: list | None = None) -> list[float]:
    """Milliseconds from Enter in the spec box to the first frame in which the status, the curve's title and the chunk
    map's lines show the new chunks (`latency_ms`)."""
    box = page.locator("#chunk-spec textarea")
    times = []
    for spec in specs:
        box.fill(spec)
        sizes = [int(n) for n in spec.split(",")]
        stopwatch(page, "keydown", [f"typed: chunks {spec}", str(sizes), lines(sizes)])
        box.press("Enter")
        times.append(latency_ms(page, splits))
    return times


POINT = """([plot, step]) => {
    const column = document.querySelector(`#${plot} rect.step[data-step="${step}"]`);
    column.scrollIntoView({block: "center"});
    const box = column.getBoundingClientRect();
    return [box.left + box.width / 2, box.top + box.height / 2];
}"""  # the page position above step `step` of the curve, half-way up the plot (viz/dynamics_svg.py)


def click_toggle_ms(page, clicks: int, splits: list | None = None) -> list[float]:
    """Milliseconds from a click on the curve (the button's release) to the first frame in which the status, the curve's
    title and the chunk map's lines show the toggled boundary (`latency_ms`)."""
    sys.path.insert(0, str(ROOT))
    from workbench.rl.chunking import toggle_boundary

    box = page.locator("#chunk-spec textarea")
    box.fill("2,3,4,7")
    box.press("Enter")
    page.wait_for_function(DONE, arg=["typed: chunks 2,3,4,7", "[2, 3, 4, 7]", lines([2, 3, 4, 7])], polling="raf",
                           timeout=60_000)
    sizes, times = [2, 3, 4, 7], []
    for k in range(clicks):
        step = (6, 10, 3)[k % 3]
        new = toggle_boundary(sizes, step)
        verb = "added" if len(new) > len(sizes) else "removed"
        where = page.evaluate(POINT, ["curve-plot", step])
        page.mouse.move(*where)  # the pointer reaches the step first (the column lights up), then clicks
        page.wait_for_timeout(300)
        stopwatch(page, "mouseup", [f"{verb} the boundary after step {step}: chunks {','.join(map(str, new))}",
                                    str(new), lines(new)])
        page.mouse.down()  # the click happens on release (the browser's click): the stopwatch starts at mouseup
        page.mouse.up()
        times.append(latency_ms(page, splits))
        sizes = new
        page.wait_for_timeout(200)  # as a user would between clicks
    return times


CELL = """([plot, name, x, y]) => {
    const panel = [...document.querySelectorAll(`#${plot} g.panel`)].find(g => g.dataset.trace === name);
    panel.scrollIntoView({block: "center"});
    const svg = panel.ownerSVGElement, box = panel.getBoundingClientRect();
    return [box.left + (x + 0.5) * box.width / svg.dataset.cols, box.top + (y + 0.5) * box.height / svg.dataset.rows];
}"""  # the page position of cell (step x, trajectory y) of the map `name` (viz/push_maps.py)


MAPS_DRAWN = """plot => document.querySelector(`#${plot} g.panel[data-trace^="moved|"]`) !== null"""  # maps drawn


def map_click_ms(page, clicks: int, splits: list | None = None) -> list[float]:
    """Milliseconds from a click on a cell of an objective's map (the button's release) to the first frame in which
    the status, the formula and the maps' outline show that cell (Objectives tab, maps computed)."""
    times = []
    for k in range(clicks):
        name, t, i = ("gspo", "chunk_grpo", "dapo")[k % 3], (3 + 5 * k) % 16, (1 + 3 * k) % 8
        where = page.evaluate(CELL, ["objectives-plot", f"moved|{name}", t, i])
        page.mouse.move(*where)
        page.wait_for_timeout(300)
        stopwatch(page, "mouseup", [name, "moved", i, t], WATCH_MAP)
        page.mouse.down()
        page.mouse.up()
        times.append(latency_ms(page, splits))
        page.wait_for_timeout(200)
    return times


def browse(page, url: str, started: float, edits: int, pid: int, lesson: bool, read: float = 0.0) -> dict:
    """Drive the page in chromium; returns the timings and the app's memory after each stage (MB)."""
    from playwright.sync_api import expect

    out = {}
    record_memory(out, pid, "start")
    page.goto(url)
    expect(page.locator("#generate-btn")).to_be_visible(timeout=120_000)
    out["interactive_s"] = time.time() - started
    if read:  # a person reads the welcome before the first Generate: the page is idle meanwhile
        out["read_s"] = read
        page.wait_for_timeout(1000 * read)
    t = time.time()
    page.click("#generate-btn")
    until(page, SHOWS, ["#generate-status", "sampled G=8"], 300_000)
    out["generate_s"] = time.time() - t
    page.get_by_role("tab", name="Attribution").click()
    # The tab's first render (its four figures mounted) apart from the credit: until it is over Playwright's click
    # waits for the button to stop moving, which put 0.4-1.9 s of it into some first presses' credit times (a
    # press 0.1 s after the tab opened reached the server 1.2 s later, when the tab had no figure yet; ad hoc).
    t = time.time()
    expect(page.locator("#credit-plot .js-plotly-plot")).to_be_visible(timeout=120_000)
    page.locator("#credit-btn").click(trial=True)  # Playwright's checks before a click, without the click
    out["attribution_open_s"] = time.time() - t
    t = time.time()
    page.click("#credit-btn")
    until(page, CREDIT_DONE)
    out["credit_s"] = time.time() - t
    out["credit_measure_s"] = [measured_seconds(page)]  # measure_credit's own time, as the status reports it
    record_memory(out, pid, "generate_credit")
    out["credit_again_s"] = []  # the same measurement pressed again: one run on this machine class varies by ~20 %
    busy = page.locator("#credit-plot [data-testid=status-tracker]:not(.hide)")
    with CpuWatch(pid) as cpu:  # the app and chromium while a press computes (the cores they share: app_threads)
        for _ in range(CREDIT_AGAIN):
            t = time.time()
            page.click("#credit-btn")
            expect(busy).to_have_count(1, timeout=60_000)  # this press has started; its end is looked for finely
            until(page, CREDIT_DONE)
            out["credit_again_s"].append(time.time() - t)
            out["credit_measure_s"].append(measured_seconds(page))
    span = sum(out["credit_again_s"])
    out["credit_cpu_per_s"] = {name: seconds / span for name, seconds in cpu.seconds.items() if name != "trainer"}
    page.get_by_role("tab", name="Chunks").click()
    expect(page.locator("#chunks-status")).to_contain_text("over T=16 steps", timeout=300_000)
    out["edit_ms"] = chunk_edit_ms(page, (SPECS * edits)[:edits], out.setdefault("edit_split_ms", []))
    out["click_ms"] = click_toggle_ms(page, edits, out.setdefault("click_split_ms", []))
    record_memory(out, pid, "chunks")
    page.get_by_role("tab", name="Objectives").click()
    t = time.time()
    page.click("#objectives-btn")
    until(page, SHOWS, ["#objectives-status", "after 3 updates"])
    out["objectives_s"] = time.time() - t
    # The clicks start once the maps are in the page.
    page.wait_for_function(MAPS_DRAWN, arg="objectives-plot", timeout=120_000)
    page.wait_for_timeout(2000)  # the Compute's reveal (ui/reveal.py) scrolls the page after the maps are drawn: a
    # click placed before that scroll missed its cell, and the map clicks timed out (7cc46a2 and b6c65b0, 2026-12-07)
    out["map_click_ms"] = map_click_ms(page, edits, out.setdefault("map_click_split_ms", []))
    record_memory(out, pid, "objectives")
    if lesson:
        out["lesson_s"], out["lesson_cpu_s"] = run_lesson(page, pid)
        record_memory(out, pid, "lesson")
    return out


def run_lesson(page, pid: int) -> tuple[float, dict]:
    """Start the crosses lesson from the Fine-tune tab and wait until the tab says it finished with the tab open;
    (seconds, CPU-seconds spent meanwhile by the app, its trainer and chromium: `CpuWatch`)."""
    from playwright.sync_api import expect

    page.get_by_role("tab", name="Fine-tune").click()
    menu = page.locator("#train-lesson input")
    menu.fill("crosses")
    menu.press("Enter")
    expect(page.locator("#lesson-text")).to_contain_text("cross", timeout=60_000)
    t = time.time()
    with CpuWatch(pid) as cpu:
        page.click("#start-btn")
        expect(page.locator("#run-state")).to_contain_text("finished", timeout=1_800_000)
    return time.time() - t, cpu.seconds


def cpu_seconds(pid: int) -> tuple[int, float] | None:
    """(parent pid, user + system CPU-seconds) of a live process, None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuWatch:
    """CPU-seconds spent while the block runs by the app itself, the processes it starts (the trainer) and
    chromium's processes, read from /proc every 0.5 s (Linux; a process's last half second may be missed)."""

    def __init__(self, app_pid: int):
        self.app, self.first, self.last, self.kind = app_pid, {}, {}, {}
        self.stop = None

    def _sample(self) -> None:
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or (read := cpu_seconds(int(entry))) is None:
                continue
            pid, (ppid, seconds) = int(entry), read
            if pid not in self.kind:
                try:
                    line = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue
                self.kind[pid] = ("app" if pid == self.app else "trainer" if ppid == self.app
                                  else "chromium" if b"chrom" in line else None)
            if self.kind[pid]:
                self.first.setdefault(pid, seconds if self.stop is None else 0.0)  # alive at the start: from then
                self.last[pid] = seconds

    def __enter__(self):
        import threading

        self.stop = None
        self._sample()  # the processes alive now count from here, those started later from zero
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()
        return self

    def _loop(self) -> None:
        while not self.stop.wait(0.5):
            self._sample()

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()
        self._sample()

    @property
    def seconds(self) -> dict:
        out = {"app": 0.0, "trainer": 0.0, "chromium": 0.0}
        for pid, last in self.last.items():
            out[self.kind[pid]] += last - self.first[pid]
        return out


def parts(splits: list | None) -> str:
    """One line: the medians of the three parts of the readings (`split_ms`)."""
    known = [split for split in splits or [] if split]
    if not known:
        return "              (no request seen: the readings were not split)"
    before, server, after = (statistics.median(part) for part in zip(*known))
    return (f"              of which (medians): the page before its request {before:.0f} ms, the request to its reply "
            f"{server:.0f} ms, the page after the reply {after:.0f} ms")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None, help="model folder (default: the embedded model)")
    p.add_argument("--edits", type=int, default=7, help="chunk edits to time")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads of the app (OMP_NUM_THREADS; default: the app's own, every core but one)")
    p.add_argument("--lesson", action="store_true", help="also run the crosses lesson from the Fine-tune tab")
    p.add_argument("--read", type=float, default=0.0,
                   help="seconds the page stays idle before the first Generate, as while a person reads (default 0)")
    p.add_argument("--slow-page", type=float, default=1.0, metavar="F",
                   help="run the page's main thread F times slower (chromium's CPU throttling, as in DevTools): the "
                        "page of a processor 1/F as fast; the app and chromium's other threads keep their speed")
    p.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = p.parse_args()
    if args.slow_page < 1:
        p.error(f"--slow-page must be >= 1 (1 = not slowed), got {args.slow_page:g}")
    model = model_folder(args.model)
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    command = [sys.executable, str(ROOT / "app.py"), "--port", str(port), "--runs", tempfile.mkdtemp()]
    command += ["--model", model] if model else []
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
    env.pop("OMP_NUM_THREADS", None)
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:  # the browser starts first, so start-up time is the app's alone
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.add_init_script(f"({FETCHES})()")  # before the page's own scripts: every request it sends is timed
        if args.slow_page != 1:
            page.context.new_cdp_session(page).send("Emulation.setCPUThrottlingRate", {"rate": args.slow_page})
        started = time.time()
        app = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_http(url, app)
            http_s = time.time() - started
            timings = browse(page, url, started, args.edits, app.pid, args.lesson, args.read)
        finally:
            app.terminate()
            app.wait(timeout=30)
            browser.close()
    timings["slow_page"] = args.slow_page
    edits, rss = timings["edit_ms"], timings["rss_mb"]
    if args.slow_page != 1:
        print(f"slow page     the page's main thread throttled {args.slow_page:g}x (chromium's CPU throttling); "
              "the app and chromium's other threads at full speed")
    print(f"start-up      HTTP 200 with the page: {http_s:.1f} s; Generate button visible in chromium: "
          f"{timings['interactive_s']:.1f} s (target 10 s)")
    again = ", ".join(f"{s:.1f}" for s in timings["credit_again_s"])
    read = f" after {timings['read_s']:g} s idle" if timings.get("read_s") else ""
    print(f"generate      G=8, T=16{read}: {timings['generate_s']:.1f} s; credit M=4: {timings['credit_s']:.1f} s, "
          f"pressed again {again} s (median of the {1 + len(timings['credit_again_s'])}: "
          f"{statistics.median([timings['credit_s'], *timings['credit_again_s']]):.1f} s; the measurement itself, "
          f"as the status says: {', '.join(f'{s:.1f}' for s in timings['credit_measure_s'])} s)")
    cpu = timings["credit_cpu_per_s"]
    print(f"              CPU-seconds per second while pressed again: app {cpu['app']:.2f}, chromium "
          f"{cpu['chromium']:.2f}")
    print(f"attribution   the tab's first render, before the first press: {timings['attribution_open_s']:.1f} s")
    print(f"chunk edit    Enter -> status and both plots updated: median {statistics.median(edits):.0f} ms, "
          f"max {max(edits):.0f} ms over {len(edits)} edits (target 150 ms)")
    print(parts(timings.get("edit_split_ms")))
    clicks = timings["click_ms"]
    print(f"curve click   click -> status and both plots updated: median {statistics.median(clicks):.0f} ms, "
          f"max {max(clicks):.0f} ms over {len(clicks)} clicks (target 150 ms)")
    print(parts(timings.get("click_split_ms")))
    print(f"objectives    N=3 inner updates + maps of every objective (G=8, T=16): {timings['objectives_s']:.1f} s")
    cells = timings["map_click_ms"]
    print(f"map click     click on a map cell -> status, formula and outline updated: median "
          f"{statistics.median(cells):.0f} ms, max {max(cells):.0f} ms over {len(cells)} clicks (target 150 ms)")
    print(parts(timings.get("map_click_split_ms")))
    print(f"memory        app RSS {rss['start']:.0f} MB after start-up, {rss['generate_credit']:.0f} MB after "
          f"generate + credit (target 700 MB), {rss['chunks']:.0f} MB after the chunk edits, "
          f"{rss['objectives']:.0f} MB after Objectives")
    split = timings["memory_mb"]["generate_credit"]
    if "anon" in split and "file" in split:
        print(f"              after generate + credit: {split['anon']:.0f} MB allocated by the app (anon), "
              f"{split['file']:.0f} MB of files it maps (shared libraries: follows the page cache)")
    if "lesson" in rss:
        print(f"lesson        crosses lesson from the Fine-tune tab: {timings['lesson_s']:.0f} s; app RSS after it "
              f"{rss['lesson']:.0f} MB (target 1024 MB)")
        cpu, span = timings["lesson_cpu_s"], timings["lesson_s"]
        print("              CPU while it ran, watched from the tab: " + ", ".join(
            f"{name} {seconds:.0f} s ({seconds / span:.2f} per second)" for name, seconds in cpu.items()))
    if args.json:
        Path(args.json).write_text(json.dumps({"startup_http_s": http_s, **timings}, indent=1))


if __name__ == "__main__":
    main()
