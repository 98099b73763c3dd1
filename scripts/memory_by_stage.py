"""The app's memory after Generate and after credit, split into what it allocated and the files it maps, and the
mappings that hold most of it. Prints figures (issue 24; docs/perf-data/epyc/README.md cites them).

    .venv/bin/python scripts/memory_by_stage.py [--precision auto|float32|bfloat16] [--top 6]

Starts `python app.py` on a free port with this environment (so `ONEDNN_PRIMITIVE_CACHE_CAPACITY=64 ...` reaches
it), then calls the app's /generate (G=8, T=16) and /attribute (M=4) endpoints as scripts/bench_app.py's browser
does, and reads /proc/PID/status and /proc/PID/smaps after each. Linux only (/proc).
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from bench_app import free_port, memory_mb  # noqa: E402 - the same reading as the browser benchmark's


def mappings_mb(pid: int) -> collections.Counter:
    """Resident MB of each mapping of a process, by file name ([heap], [anon] for the unnamed ones)."""
    held, name = collections.Counter(), None
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        parts = line.split()
        if parts and "-" in parts[0] and not parts[0].endswith(":"):  # a mapping's header: range perms offset ...
            name = Path(parts[5]).name if len(parts) > 5 else "[anon]"
        elif parts and parts[0] == "Rss:":
            held[name] += int(parts[1]) / 1024
    return held


def show(stage: str, pid: int) -> None:
    m = memory_mb(pid)
    print(f"{stage:9s} RSS {m['rss']:.0f} MB: anon {m.get('anon', float('nan')):.0f} MB, "
          f"file {m.get('file', float('nan')):.0f} MB", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--precision", default="auto", choices=["auto", "float32", "bfloat16"],
                   help="the credit's numerics (the Attribution tab's Numerics)")
    p.add_argument("--top", type=int, default=6, help="mappings to list after the credit")
    args = p.parse_args()
    if not Path("/proc/self/smaps").exists():
        raise SystemExit("needs Linux's /proc")
    from gradio_client import Client

    port = free_port()
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, str(ROOT / "app.py"), "--port", str(port), "--runs", tempfile.mkdtemp()]
    app = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5)
                break
            except OSError:
                time.sleep(0.5)
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        print(f"ONEDNN_PRIMITIVE_CACHE_CAPACITY={os.environ.get('ONEDNN_PRIMITIVE_CACHE_CAPACITY', '(default)')}")
        *_, status = client.predict("a red circle", 8, 16, 0.7, 0, "adherence", api_name="/generate")
        print(status.splitlines()[0][:80])
        show("generate", app.pid)
        *_, status = client.predict(4, "mc", True, 2.0, args.precision, api_name="/attribute")
        print(status.splitlines()[0][:80])
        show("credit", app.pid)
        held = mappings_mb(app.pid)
        print("largest mappings after the credit: "
              + ", ".join(f"{name} {mb:.0f} MB" for name, mb in held.most_common(args.top)))
    finally:
        app.terminate()
        app.wait(timeout=30)


if __name__ == "__main__":
    main()
