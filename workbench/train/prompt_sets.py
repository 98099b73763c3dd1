"""The prompts a run uses when none are given: the toy world's scenes for the embedded model, and a small set
of real prompts (workbench/data/real_prompts.txt) for SD3 / FLUX, whose pictures the toy grammar cannot describe.

    train, held_out = real_prompts()   # 48 training prompts, 16 held-out prompts
"""

from __future__ import annotations

from pathlib import Path

from workbench.core.errors import WorkbenchError

REAL_PROMPTS = Path(__file__).resolve().parents[1] / "data" / "real_prompts.txt"
REAL_HELD_OUT = 16  # the last 16 prompts of the file are held out for evaluation


def read_prompt_file(path: str | Path) -> list[str]:
    """One prompt a line; blank lines and '#' comments are skipped."""
    lines = [line.strip() for line in Path(path).read_text().splitlines()]
    prompts = [line for line in lines if line and not line.startswith("#")]
    if not prompts:
        raise WorkbenchError(f"prompt file {path} has no prompts")
    return prompts


def real_prompts() -> tuple[list[str], list[str]]:
    """(training prompts, held-out prompts) of the shipped real prompt set."""
    prompts = read_prompt_file(REAL_PROMPTS)
    return prompts[:-REAL_HELD_OUT], prompts[-REAL_HELD_OUT:]


def is_pipeline_folder(model: str | Path | None) -> bool:
    """Whether `model` names a diffusers SD3 / FLUX folder (a real model), not the embedded toy model."""
    return model is not None and (Path(model).expanduser() / "model_index.json").is_file()
