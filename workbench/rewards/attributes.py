"""Prompt-adherence rewards of the toy world: the attribute scores of `detect`, alone or averaged.

Every reward here is `fn(images, prompts) -> (B,)` in [0, 1], registered in `REWARDS`; the prompt's
scene (`parse_prompt`) says which attributes to score.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache, lru_cache

import numpy as np
import torch

from workbench.rewards.base import REWARDS, TOY, Accepts, RewardInfo
from workbench.toyworld.perception import Detection, detect
from workbench.toyworld.world import BACKGROUNDS, COLORS, GRID_CENTERS, IMAGE_SIZE, Scene, parse_prompt, render

TOY_IMAGES = Accepts(IMAGE_SIZE, toy_prompts=True, serves=(TOY,))  # 32x32 renders of the toy world's prompts

COLOR_SCALE = 0.12  # RGB distance (0-1 units) scoring exp(-1/2); the closest palette pair is 0.28 apart
POSITION_SCALE = 4.0  # pixels; the neighbouring grid cell (8 px away) scores exp(-2) = 0.14
SIZE_SCALE = 0.3  # log-area; "small" and "large" differ by ~0.8, i.e. a score of ~0.02
SHAPE_POWER = 20.0  # a wrong shape's IoU ratio (0.85-0.93 in this world) becomes 0.04-0.23


def _gaussian(distance: float, scale: float) -> float:
    return float(np.exp(-distance**2 / (2 * scale**2)))


def _rgb(values: tuple[int, int, int]) -> np.ndarray:
    return np.array(values, dtype=np.float32) / 255.0


def _canonical_area(scene: Scene) -> float:
    """Area `detect` measures on the canonical render of a scene (soft edges included)."""
    return detect(render(scene)).area


_canonical_area = cache(_canonical_area)  # not a decorator: mutmut skips decorated functions


def _color_score(det: Detection, target: Scene) -> float:
    return _gaussian(float(np.linalg.norm(det.color_rgb - _rgb(COLORS[target.color]))), COLOR_SCALE)


def _shape_score(det: Detection, target: Scene) -> float:
    best = max(det.shape_iou.values())
    return float((det.shape_iou[target.shape] / max(best, 1e-6)) ** SHAPE_POWER)


def _position_score(det: Detection, target: Scene) -> float:
    row, col = target.cell
    x, y = det.center
    return _gaussian(float(np.hypot(x - GRID_CENTERS[col], y - GRID_CENTERS[row])), POSITION_SCALE)


def _size_score(det: Detection, target: Scene) -> float:
    # the canonical area uses the *detected* shape and colours, so a wrong shape does not also cost size
    canonical = _canonical_area(Scene(det.shape, det.color, target.size, "center", det.background))
    return _gaussian(float(np.log(det.area / canonical)), SIZE_SCALE)


def _background_score(det: Detection, target: Scene) -> float:
    distance = float(np.linalg.norm(det.background_rgb - _rgb(BACKGROUNDS[target.background])))
    return _gaussian(distance, COLOR_SCALE)


ATTRIBUTE_SCORES: dict[str, Callable[[Detection, Scene], float]] = {
    "color": _color_score, "shape": _shape_score, "position": _position_score,
    "size": _size_score, "background": _background_score,
}


def _scene(prompt: str) -> Scene:
    return parse_prompt(prompt)


_scene = lru_cache(maxsize=4096)(_scene)  # not a decorator: mutmut skips decorated functions


def attribute_scores(det: Detection, target: Scene) -> dict[str, float]:
    """Continuous score in [0, 1] of each attribute `target` specifies; all 0 when no object was found."""
    specified = [name for name in ATTRIBUTE_SCORES if getattr(target, name) is not None]
    return {name: ATTRIBUTE_SCORES[name](det, target) if det.found else 0.0 for name in specified}


def _mean_scores(images: torch.Tensor, prompts: list[str], attributes: tuple[str, ...]) -> torch.Tensor:
    """(B,) mean over `attributes` the prompt specifies; 0 without an object, 1 if none is specified."""
    out = []
    for image, prompt in zip(images, prompts):  # image (3, H, W)
        det = detect(image)
        scores = attribute_scores(det, _scene(prompt))
        chosen = [scores[a] for a in attributes if a in scores]
        out.append(float(np.mean(chosen)) if chosen else float(det.found))
    return torch.tensor(out, dtype=torch.float32, device=images.device)  # (B,)


def adherence(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
    """Prompt adherence in [0, 1]: the mean of the continuous attribute scores the prompt specifies.

    colour exp(-d^2 / 2s^2) with d the RGB distance of the object to the named colour (s = 0.12); shape
    (IoU_target / IoU_best)^20 with the soft template IoUs of `detect`; position a Gaussian (4 px) on the
    distance of the drawn centre to the named grid cell's centre; size a Gaussian (0.3) on the log of
    the area over the canonical area of the named size; background like colour. No object -> 0.

    >>> image = torch.from_numpy(render(Scene("circle", "red", "large", "center", "white")))[None]
    >>> adherence(image, ["a large red circle in the center on a white background"])
    tensor([0.99...])
    """
    return _mean_scores(images, prompts, tuple(ATTRIBUTE_SCORES))


REWARDS.add(adherence, "adherence", info=RewardInfo("prompt adherence of a toy-world image, in [0, 1]", TOY_IMAGES))


def color_match(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
    """Colour score of `adherence` alone, in [0, 1] (1 if the prompt names no colour and an object is drawn).

    >>> image = torch.from_numpy(render(Scene("circle", "orange", "large", "center", "white")))[None]
    >>> color_match(image, ["a red circle"])
    tensor([0.00...])
    """
    return _mean_scores(images, prompts, ("color",))


REWARDS.add(color_match, "color_match", info=RewardInfo("colour score of adherence, in [0, 1]", TOY_IMAGES))


def shape_match(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
    """Shape score of `adherence` alone, in [0, 1]: (IoU_target / IoU_best)^20.

    >>> image = torch.from_numpy(render(Scene("circle", "blue", "large", "center", "white")))[None]
    >>> shape_match(image, ["a red circle"])
    tensor([1.])
    """
    return _mean_scores(images, prompts, ("shape",))


REWARDS.add(shape_match, "shape_match", info=RewardInfo("shape score of adherence, in [0, 1]", TOY_IMAGES))


def position_match(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
    """Position score of `adherence` alone, in [0, 1] (1 if the prompt names no position and an object is drawn).

    >>> image = torch.from_numpy(render(Scene("circle", "red", "large", "top middle", "white")))[None]
    >>> position_match(image, ["a red circle in the center"])
    tensor([0.13...])
    """
    return _mean_scores(images, prompts, ("position",))


REWARDS.add(position_match, "position_match", info=RewardInfo("position score of adherence, in [0, 1]", TOY_IMAGES))


def size_match(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
    """Size score of `adherence` alone, in [0, 1] (1 if the prompt names no size and an object is drawn).

    >>> image = torch.from_numpy(render(Scene("circle", "red", "small", "center", "white")))[None]
    >>> size_match(image, ["a large red circle"])
    tensor([0.01...])
    """
    return _mean_scores(images, prompts, ("size",))


REWARDS.add(size_match, "size_match", info=RewardInfo("size score of adherence, in [0, 1]", TOY_IMAGES))
