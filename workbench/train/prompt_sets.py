"""The prompts a run uses when none are given: the toy world's scenes for the embedded model, and a small set
of real prompts (workbench/data/real_prompts.txt) for SD3 / FLUX, whose pictures the toy grammar cannot describe.

    train, held_out = real_prompts()   # 48 training prompts, 16 held-out prompts
    world_prompts(toy_world, 8)        # 8 prompts spread over a model's world (examples, the L1_rel curve)
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


def world_prompts(toy_world: bool, count: int) -> list[str]:
    """`count` prompts spread over a model's world, for examples and the L1_rel curve: the toy world's complete
    scenes (`toyworld.world.spread_prompts`) for the embedded model, else the shipped real training prompts at a fixed
    stride (a real model is never shown the toy grammar)."""
    if toy_world:
        from workbench.toyworld.world import spread_prompts

        return spread_prompts(count)
    train, _ = real_prompts()
    if not 1 <= count <= len(train):
        raise WorkbenchError(f"the number of prompts must be in 1..{len(train)} (the shipped real training prompts, "
                             f"{REAL_PROMPTS.name}), got {count}")
    return [train[i * (len(train) // count)] for i in range(count)]


def is_pipeline_folder(model: str | Path | None) -> bool:
    """Whether `model` names a diffusers SD3 / FLUX folder (a real model), not the embedded toy model."""
    return model is not None and (Path(model).expanduser() / "model_index.json").is_file()
