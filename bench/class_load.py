"""A class on one server: simulated students walk the Learn path and measure credit through gradio_client against one
`app.py --class` on this machine (loopback only); prints and writes each request's wait, the errors and the server's
peak memory.

    .venv/bin/python bench/class_load.py --students 30 --json /tmp/class.json --into docs/performance.md

Each student logs in with the class password, runs Learn's example (`/learn_example`: G=8, T=16, M=4, long work),
generates a group of their own (`/generate`: G=8, T=16, seed = the student's number, short work) and measures its
credit (`/attribute`: M=4, long work), which adds it to the class's experiment. The students start within
`--stagger` seconds of each other, as a class does when the teacher says "go". A request's *wait* is the time from its
submission to the moment the server starts it (gradio_client's status stream: the first PROCESSING), its *time* the
time to its answer. An answer whose status starts with ⚠, an exception, or a student not done within `--timeout`
seconds is an error. The server's peak resident memory is the kernel's high-water mark (VmHWM in /proc/PID/status).

`--into PAGE` writes the section "A class on one server" into the page (replacing the one there); bench/report.py
`--class-load FILE` writes the same section when it writes docs/performance.md. Linux only (/proc).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PASSWORD, TOKEN = "class-load", "class-load-teacher"
STEPS = ("learn_example", "generate", "attribute")
SECTION = "## A class on one server"
CONNECT_S = 120.0  # gradio_client's HTTP timeout (its default, 5 s, is shorter than a busy server's answer)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int, runs: str) -> subprocess.Popen:
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--class", "--password", PASSWORD,
                             "--teacher-token", TOKEN, "--port", str(port), "--runs", runs],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait_up(url: str, timeout: float = 120.0) -> None:
    end = time.time() + timeout
    while time.time() < end:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except urllib.error.HTTPError:  # the login page answers: the server is up
            return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"the server at {url} did not come up in {timeout:.0f} s")


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident memory so far (VmHWM), in MB."""
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", text).group(1)) / 1024


def timed(client, api_name: str, *args) -> dict:
    """Submit one request and follow its status: {wait, time, status}."""
    from gradio_client.utils import Status

    working = (Status.PROCESSING, Status.ITERATING, Status.PROGRESS, Status.FINISHED)  # a generator: ITERATING
    submitted = time.perf_counter()
    job = client.submit(*args, api_name=api_name)
    started = None
    while not job.done():
        if started is None and job.status().code in working:
            started = time.perf_counter()
        time.sleep(0.02)
    done = time.perf_counter()
    out = job.result()
    status = out[-1] if isinstance(out, (list, tuple)) else out
    return {"wait": (started or done) - submitted, "time": done - submitted, "status": str(status)}


def student(url: str, number: int, delay: float, results: list, errors: list) -> None:
    from gradio_client import Client

    time.sleep(delay)
    stage = "logging in"
    try:  # a page waits for a busy server as long as it takes: no 5-second read timeout
        client = Client(url, auth=(f"student{number}", PASSWORD), verbose=False, httpx_kwargs={"timeout": CONNECT_S})
        calls = {"learn_example": (), "generate": ("a large red circle in the top left on a white background", 8, 16,
                                                   0.7, number, "adherence"),
                 "attribute": (4, "mc", True, 2.0, "auto")}
        for name in STEPS:
            stage = name
            result = timed(client, f"/{name}", *calls[name])
            results.append({"student": number, "call": name, **result})
            if result["status"].startswith("⚠"):
                errors.append(f"student {number} {name}: {result['status']}")
    except Exception as err:  # noqa: BLE001 - a load check counts every failure
        errors.append(f"student {number}, {stage}: {type(err).__name__}: {err}")


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, max(0, round(q * (len(values) - 1))))]


def summary(results: list[dict]) -> dict:
    out = {}
    for name in (*STEPS, "all"):
        rows = [r for r in results if name in ("all", r["call"])]
        out[name] = {"n": len(rows), **{f"{kind}_p{q}": percentile([r[kind] for r in rows], q / 100)
                                        for kind in ("wait", "time") for q in (50, 95)},
                     "wait_max": max((r["wait"] for r in rows), default=None)}
    return out


def run(students: int, stagger: float, timeout: float, seed: int) -> dict:
    port, runs = free_port(), tempfile.mkdtemp(prefix="class-load-runs-")
    url = f"http://127.0.0.1:{port}/"
    server = start_server(port, runs)
    try:
        wait_up(url)
        from gradio_client import Client

        warm = Client(url, auth=("warm-up", PASSWORD), verbose=False)  # the model loads before the class starts
        warm.predict("a purple circle", 2, 2, 0.7, 0, "adherence", api_name="/generate")
        load_before = os.getloadavg()
        rng = random.Random(seed)
        results, errors = [], []
        threads = [threading.Thread(target=student, args=(url, n, rng.uniform(0, stagger), results, errors),
                                    daemon=True) for n in range(1, students + 1)]
        began = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join(max(0.0, timeout - (time.perf_counter() - began)))
        late = sum(t.is_alive() for t in threads)
        if late:
            errors.append(f"{late} student(s) not done within {timeout:.0f} s")
        wall = time.perf_counter() - began
        return {"students": students, "stagger_s": stagger, "timeout_s": timeout, "wall_s": wall,
                "errors": errors, "summary": summary(results), "results": results,
                "peak_rss_mb": peak_rss_mb(server.pid), "load_before": load_before, "load_after": os.getloadavg(),
                "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(runs, ignore_errors=True)


def class_lines(f: dict | None) -> list[str]:
    """The page's section on a class on one server, from this script's JSON (empty without one)."""
    if not f:
        return []
    s = f["summary"]

    def cell(name: str, kind: str) -> str:
        p50, p95 = s[name][f"{kind}_p50"], s[name][f"{kind}_p95"]
        return "—" if p50 is None else f"{p50:.1f} / {p95:.1f} s"
    lines = [SECTION, "",
             f"`bench/class_load.py --students {f['students']}` ({f['date']}, {f['cores']} cores; load average "
             f"{f['load_before'][0]:.1f} when the students started and {f['load_after'][0]:.1f} when they were done, "
             "on a machine that other work shared): one `app.py --class` on the embedded model; each simulated student "
             "runs Learn's example, generates a group of its own and measures its credit, through gradio_client on "
             "the loopback, all of them starting within "
             f"{f['stagger_s']:.0f} s. **{len(f['errors'])} errors**; the class took {f['wall_s']:.0f} s; the "
             f"server's peak resident memory was {f['peak_rss_mb']:.0f} MB.", "",
             "| Request | Queue | Requests | Wait p50 / p95 | Time to the answer p50 / p95 |", "|---|---|---|---|---|"]
    queues = {"learn_example": "long", "generate": "short", "attribute": "long", "all": ""}
    for name in (*STEPS, "all"):
        lines.append(f"| {name} | {queues[name]} | {s[name]['n']} | {cell(name, 'wait')} | {cell(name, 'time')} |")
    lines += ["", "The wait is the time in the queue before the server starts the request. Generate has a queue of "
              "its own beside the long work (Learn's example, Measure credit, Refine, Compare, Objectives), so it "
              "passes them; the long work of a class of students runs one request at a time.", ""]
    return lines


def write_into(page: Path, lines: list[str]) -> None:
    """Replace the page's section (up to the next '## ') with `lines`, or add it at the end."""
    text = page.read_text()
    section = "\n".join(lines)
    pattern = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^## |\Z)", re.S | re.M)
    text = pattern.sub(section, text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section
    page.write_text(text.rstrip("\n") + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--students", type=int, default=30, help="simulated students (at most 60)")
    p.add_argument("--stagger", type=float, default=10.0, help="the students start within this many seconds")
    p.add_argument("--timeout", type=float, default=1500.0, help="seconds the whole class may take (at most 3600)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write the figures here")
    p.add_argument("--into", default=None, help="write the section into this page (docs/performance.md)")
    args = p.parse_args()
    if not 1 <= args.students <= 60 or not 0 < args.timeout <= 3600:
        raise SystemExit("--students must be in 1..60 and --timeout in (0, 3600]")
    figures = run(args.students, args.stagger, args.timeout, args.seed)
    for error in figures["errors"][:20]:
        print("error:", error)
    print("\n".join(class_lines(figures)))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    if args.into:
        write_into(Path(args.into), class_lines(figures))


if __name__ == "__main__":
    main()
