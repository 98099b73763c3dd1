"""Attribute checks: read the shape, colour, size, position and background back off an image.

Weight-free and deterministic. The pretraining quality report and the adherence rewards use the same
`detect`, so "the model draws the right colour" means one thing everywhere.

    >>> detect(render(Scene("circle", "red", "large", "top left", "white"))).scene()
    Scene(shape='circle', color='red', size='large', position='top left', background='white')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

import numpy as np

from workbench.toyworld.world import (
    BACKGROUNDS,
    COLORS,
    GRID_CENTERS,
    IMAGE_SIZE,
    SHAPES,
    Scene,
    position_name,
    shape_mask,
)

MIN_AREA = 4.0  # pixels; less than this and we say no object was drawn
MIN_CONTRAST = 0.15  # RGB distance from the background below which nothing counts as an object
SIZE_THRESHOLD = 6.25  # half-extent in pixels between "small" (5.0 +- 10 %) and "large" (7.5 +- 10 %)
_PALETTE = np.array(list(COLORS.values()), dtype=np.float32) / 255.0  # (6, 3)
_BG_PALETTE = np.array(list(BACKGROUNDS.values()), dtype=np.float32) / 255.0  # (3, 3)


@dataclass
class Detection:
    """What `detect` read off one image. Coordinates in pixels, colours RGB in [0, 1]."""

    found: bool
    background_rgb: np.ndarray
    color_rgb: np.ndarray | None = None
    centroid: tuple[float, float] | None = None  # (x, y)
    area: float = 0.0
    shape_iou: dict[str, float] = field(default_factory=dict)  # soft IoU with each shape's template

    @property
    def background(self) -> str:
        return _nearest(self.background_rgb, _BG_PALETTE, list(BACKGROUNDS))

    @property
    def color(self) -> str | None:
        return None if self.color_rgb is None else _nearest(self.color_rgb, _PALETTE, list(COLORS))

    @property
    def center(self) -> tuple[float, float] | None:
        """Drawing centre (x, y): the centroid corrected for the detected shape's offset (zero for the
        current, symmetric shapes; kept so an asymmetric shape such as a triangle needs no change here)."""
        if self.centroid is None:
            return None
        half = self.half_extent
        ox, oy = _centroid_offset(self.shape)
        return self.centroid[0] - ox * half, self.centroid[1] - oy * half

    @property
    def position(self) -> str | None:
        if self.center is None:
            return None
        x, y = self.center
        return position_name(_grid_index(y), _grid_index(x))

    @property
    def size(self) -> str | None:
        return None if not self.found else ("large" if self.half_extent >= SIZE_THRESHOLD else "small")

    @property
    def half_extent(self) -> float:
        """Half-extent in pixels of the detected shape with the detected area."""
        return float(np.sqrt(self.area / _area_per_half_squared(self.shape))) if self.shape_iou else 0.0

    @property
    def shape(self) -> str | None:
        return max(self.shape_iou, key=self.shape_iou.get) if self.shape_iou else None

    def scene(self) -> Scene:
        return Scene(self.shape, self.color, self.size, self.position, self.background)


def _nearest(rgb: np.ndarray, palette: np.ndarray, names: list[str]) -> str:
    return names[int(np.argmin(((palette - rgb) ** 2).sum(axis=1)))]


def _grid_index(coord: float) -> int:
    edges = [(GRID_CENTERS[0] + GRID_CENTERS[1]) / 2, (GRID_CENTERS[1] + GRID_CENTERS[2]) / 2]
    return int(np.searchsorted(edges, coord))


@cache
def _area_per_half_squared(shape: str) -> float:
    """Pixel area of a shape divided by its half-extent squared (to size templates from an area)."""
    half = 8.0
    return float(shape_mask(shape, 16.0, 16.0, half).sum() / half**2)


@cache
def _centroid_offset(shape: str) -> tuple[float, float]:
    """Centroid minus drawing centre, per unit of half-extent (zero for symmetric shapes)."""
    half, c = 8.0, 16.0
    m = shape_mask(shape, c, c, half)
    ys, xs = np.indices(m.shape) + 0.5
    return float((m * xs).sum() / m.sum() - c) / half, float((m * ys).sum() / m.sum() - c) / half


def _template(shape: str, centroid: tuple[float, float], area: float) -> np.ndarray:
    half = float(np.sqrt(area / _area_per_half_squared(shape)))
    ox, oy = _centroid_offset(shape)
    return shape_mask(shape, centroid[0] - ox * half, centroid[1] - oy * half, half)


def detect(image) -> Detection:
    """Detect the object in one image, float RGB in [0, 1] of shape (3, 32, 32) (numpy or torch)."""
    img = np.asarray(image.detach().cpu() if hasattr(image, "detach") else image, dtype=np.float32)
    img = np.clip(img, 0.0, 1.0)  # (3, H, W)
    border = np.concatenate([img[:, 0], img[:, -1], img[:, 1:-1, 0], img[:, 1:-1, -1]], axis=1)
    bg = np.median(border, axis=1)  # (3,)
    dist = np.sqrt(((img - bg[:, None, None]) ** 2).sum(axis=0))  # (H, W)
    contrast = float(np.percentile(dist, 99))  # distance of the object's colour from the background
    if contrast < MIN_CONTRAST:
        return Detection(found=False, background_rgb=bg, area=0.0)
    weight = np.clip((dist - 0.3 * contrast) / (0.4 * contrast), 0.0, 1.0)  # soft object mask
    area = float(weight.sum())
    if area < MIN_AREA:
        return Detection(found=False, background_rgb=bg, area=area)
    ys, xs = np.indices(weight.shape) + 0.5
    centroid = (float((weight * xs).sum() / area), float((weight * ys).sum() / area))
    core = dist >= 0.6 * dist.max()  # pixels well inside the object, away from blended edges
    color = img[:, core].mean(axis=1)  # (3,)
    ious = {s: _soft_iou(weight, _template(s, centroid, area)) for s in SHAPES}
    return Detection(True, bg, color, centroid, area, ious)


def _soft_iou(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.minimum(a, b).sum() / max(np.maximum(a, b).sum(), 1e-6))


def check(image, scene: Scene) -> dict[str, bool]:
    """Which specified attributes of `scene` the image shows, e.g. {"color": True, "shape": False}."""
    det = detect(image)
    got = det.scene()
    return {k: det.found and getattr(got, k) == v for k, v in vars(scene).items() if v is not None}


assert IMAGE_SIZE == 32  # the thresholds above are tuned for 32x32 scenes
