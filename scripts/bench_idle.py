"""CPU an idle app spends: `python app.py` started on the embedded model, left alone until its model has loaded, then
its CPU-seconds per second over a quiet span, with no page open (Linux: read from /proc). Prints the figure of each
round and their median.

    .venv/bin/python scripts/bench_idle.py [--rounds 3] [--settle 25] [--span 20] [--json FILE]

An idle app should cost nothing: on two cores whatever it spends is taken from a fine-tune or the browser. Gradio's
queue looks for work every 1 ms while it has none, which cost ~5 % of a core (`workbench/ui/layout.py` `queued`).
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
from bench_app import cpu_seconds, free_port, wait_http


def idle_cpu(root: Path, settle: float, span: float) -> float:
    """CPU-seconds per second of one app process over `span` seconds, `settle` seconds after its page answered."""
    port = free_port()
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
    app = subprocess.Popen([sys.executable, str(root / "app.py"), "--port", str(port), "--runs", tempfile.mkdtemp()],
                           cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{port}/", app)
        time.sleep(settle)  # the model loads in the background once the server is up (app.py: wb.warm_up)
        start, t = cpu_seconds(app.pid)[1], time.time()
        time.sleep(span)
        return (cpu_seconds(app.pid)[1] - start) / (time.time() - t)
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
    args = p.parse_args()
    rounds = [idle_cpu(Path(args.root), args.settle, args.span) for _ in range(args.rounds)]
    print(f"idle app      CPU-seconds per second with no page open: median {statistics.median(rounds):.3f} "
          f"(rounds: {' / '.join(f'{r:.3f}' for r in rounds)})")
    if args.json:
        Path(args.json).write_text(json.dumps({"idle_cpu_per_s": rounds, "root": args.root}, indent=1))


if __name__ == "__main__":
    main()
