"""The crosses lesson's result, shipped with the package so a reader sees a fine-tune without waiting for one.

`scripts/ship_lesson.py` writes it from a finished `workbench train --preset crosses` run: the final model
(embedded format, float16 weights: half the size, loaded back as float32), the first and the last held-out
grid (Before / Now) and the held-out accuracy at every evaluation. Notebook 03 shows it and reruns the lesson
on request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from workbench.core.errors import WorkbenchError

SHIPPED = Path(__file__).resolve().parents[1] / "weights" / "crosses_lesson"
MODEL_DIR = "crosses-lesson"  # the model folder (its name is the label the app's comparisons show)
ACCURACY_FILE = "accuracy.json"  # {"run": {...}, "rows": [{"iteration", "eval/cross_accuracy", ...}]}


@dataclass
class LessonResult:
    model: Path  # a model folder load_policy takes
    before: Path  # the held-out grid before training (top row no CFG, bottom row the model's CFG)
    now: Path  # the same prompts and noise after the last iteration
    rows: list[dict]  # held-out accuracy per evaluation: iteration, eval/cross_accuracy, eval_cfg/cross_accuracy
    about: dict  # how it was made: preset, iterations, seed, the command

    @property
    def iterations(self) -> int:
        return int(self.rows[-1]["iteration"])


def shipped_lesson(folder: str | Path = SHIPPED) -> LessonResult:
    """The lesson result in `folder` (default: the one shipped with the package)."""
    folder = Path(folder)
    paths = [folder / MODEL_DIR / "config.json", folder / "before.png", folder / "now.png", folder / ACCURACY_FILE]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise WorkbenchError(f"the lesson result is incomplete ({', '.join(missing)} missing); "
                             "remake it with `python scripts/ship_lesson.py`")
    data = json.loads((folder / ACCURACY_FILE).read_text())
    return LessonResult(folder / MODEL_DIR, folder / "before.png", folder / "now.png", data["rows"], data["run"])
