"""Ship the crosses lesson's result with the package (workbench/weights/crosses_lesson/, read by
`workbench.train.lesson_result` and notebook 03).

    python scripts/ship_lesson.py --run runs/crosses   # from a finished `workbench train --preset crosses` run
    python scripts/ship_lesson.py                      # runs the lesson first (seed 0, a few CPU minutes)

Writes crosses-lesson/ (the final weights in the embedded format, float16: half the size), before.png and now.png
(the first and the last held-out grid) and accuracy.json (the held-out accuracy, reward and checkerboard share at
every evaluation, and how the run was made).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from safetensors.torch import load_file, save_file

from workbench.models.embedded import WEIGHTS_FILE, save_embedded
from workbench.train.lesson_result import ACCURACY_FILE, MODEL_DIR, SHIPPED, shipped_lesson
from workbench.train.sources import load_policy
from workbench.train.store import RunStore

KEEP = ("iteration", "eval/cross_accuracy", "eval_cfg/cross_accuracy", "eval/reward_mean", "eval_cfg/reward_mean",
        "eval/checkerboard", "eval_cfg/checkerboard")


def ship(run: Path, out: Path) -> None:
    info = RunStore.open(run).info()
    if info.state != "finished":
        raise SystemExit(f"{run} is {info.state}, not finished: let the lesson run to its end")
    grids = info.eval_samples()
    rows = [{k: m[k] for k in KEEP if k in m} for m in info.metrics if "eval/cross_accuracy" in m]
    if len(grids) < 2 or not rows:
        raise SystemExit(f"{run} has no held-out evaluations: is it a crosses lesson (--preset crosses)?")
    shutil.rmtree(out, ignore_errors=True)
    model = save_embedded(load_policy(run, device="cpu").model, out / MODEL_DIR)
    weights = load_file(str(model / WEIGHTS_FILE))
    save_file({k: v.half() if v.is_floating_point() else v for k, v in weights.items()}, str(model / WEIGHTS_FILE))
    shutil.copy(grids[0], out / "before.png")
    shutil.copy(grids[-1], out / "now.png")
    about = {"preset": "crosses", "iterations": rows[-1]["iteration"], "seed": info.config.get("seed"),
             "before": grids[0].name, "now": grids[-1].name,
             "command": "python -m workbench train --preset crosses --out runs/crosses && "
                        "python scripts/ship_lesson.py --run runs/crosses"}
    (out / ACCURACY_FILE).write_text(json.dumps({"run": about, "rows": rows}, indent=1) + "\n")
    result = shipped_lesson(out)
    print(f"shipped {out}: iteration {result.iterations}, held-out cross accuracy "
          f"{rows[0].get('eval/cross_accuracy')} -> {rows[-1].get('eval/cross_accuracy')} (no CFG), "
          f"{rows[0].get('eval_cfg/cross_accuracy')} -> {rows[-1].get('eval_cfg/cross_accuracy')} (CFG)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", type=Path, default=None, help="a finished crosses lesson run (default: run it now)")
    p.add_argument("--out", type=Path, default=SHIPPED, help=f"where to write (default {SHIPPED})")
    args = p.parse_args()
    run = args.run
    if run is None:
        run = Path("runs/crosses-shipped")
        subprocess.run([sys.executable, "-m", "workbench", "train", "--preset", "crosses", "--out", str(run)],
                       check=True)
    ship(run, args.out)


if __name__ == "__main__":
    main()
