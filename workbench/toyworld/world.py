"""The embedded "shapes" world: scenes, their renderer and the prompt grammar.

A scene is one object (shape, colour, size, position on a 3x3 grid) on a plain coloured background,
rendered at 32x32 RGB with anti-aliased edges. Prompts such as
"a large red circle in the top left on a white background" parse back into the same attributes, which
the attribute checks (`workbench.toyworld.perception`) and the rewards compare images against.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from functools import cache

import numpy as np

from workbench.core.errors import WorkbenchError

IMAGE_SIZE = 32
# Shapes whose silhouettes differ at low spatial frequency (a hole, arms, an aspect ratio): circle,
# square and diamond differ only in a few edge pixels, which a tiny pixel-space model could not learn.
SHAPES = ("circle", "ring", "cross", "bar")
COLORS = {  # object colours, RGB 0-255
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 80, 220),
    "yellow": (235, 205, 40),
    "purple": (140, 60, 180),
    "orange": (245, 135, 30),
}
BACKGROUNDS = {"white": (245, 245, 245), "black": (20, 20, 20), "gray": (128, 128, 128)}
SIZES = {"small": 5.0, "large": 7.5}  # half-extent of the object in pixels
ROWS = ("top", "middle", "bottom")
COLS = ("left", "middle", "right")
GRID_CENTERS = (7.5, 15.5, 23.5)  # pixel coordinate of the 3 grid rows / columns
FILLER_WORDS = ("a", "an", "the", "in", "on", "at", "background")


def position_name(row: int, col: int) -> str:
    """Grid cell (row, col) in 0..2 as words: (0, 0) -> "top left", (1, 1) -> "center"."""
    if (row, col) == (1, 1):
        return "center"
    return f"{ROWS[row]} {COLS[col]}"


POSITIONS = tuple(position_name(r, c) for r in range(3) for c in range(3))
VOCABULARY = tuple(
    sorted(set(FILLER_WORDS) | set(SHAPES) | set(COLORS) | set(BACKGROUNDS) | set(SIZES)
           | set(ROWS) | set(COLS) | {"center"})
)


@dataclass(frozen=True)
class Scene:
    """Attributes of one scene; None means "not specified" (only possible for parsed prompts)."""

    shape: str | None = None
    color: str | None = None
    size: str | None = None
    position: str | None = None
    background: str | None = None

    @property
    def cell(self) -> tuple[int, int] | None:
        """(row, col) of the position on the 3x3 grid."""
        return None if self.position is None else divmod(POSITIONS.index(self.position), 3)

    @property
    def complete(self) -> bool:
        return None not in (self.shape, self.color, self.size, self.position, self.background)

    def prompt(self) -> str:
        """The canonical prompt, e.g. "a large red circle in the top left on a white background"."""
        text = " ".join(w for w in ("a", self.size, self.color, self.shape) if w)
        if self.position:
            text += f" in the {self.position}"
        if self.background:
            text += f" on a {self.background} background"
        return text


def all_scenes() -> list[Scene]:
    """Every complete scene of the world (4 x 6 x 2 x 9 x 3 = 1296), in a fixed order."""
    combos = itertools.product(SHAPES, COLORS, SIZES, POSITIONS, BACKGROUNDS)
    return [Scene(*c) for c in combos]


def spread_prompts(count: int) -> list[str]:
    """`count` prompts of complete scenes at a fixed stride through `all_scenes` (every shape, colour, ... in turn)."""
    scenes = all_scenes()
    if not 1 <= count <= len(scenes):
        raise WorkbenchError(f"the number of prompts must be in 1..{len(scenes)} (the scenes of the world), "
                             f"got {count}")
    return [scenes[i * (len(scenes) // count)].prompt() for i in range(count)]


def split_scenes(num_heldout: int = 200, seed: int = 0) -> tuple[list[Scene], list[Scene]]:
    """(train, heldout) split of all scenes; held-out prompts are never seen in pretraining."""
    scenes = all_scenes()
    order = np.random.default_rng(seed).permutation(len(scenes))
    heldout = [scenes[i] for i in order[:num_heldout]]
    train = [scenes[i] for i in order[num_heldout:]]
    return train, heldout


def parse_prompt(prompt: str) -> Scene:
    """Parse a prompt of the grammar back into a `Scene` (unspecified attributes stay None).

    Raises WorkbenchError for an empty prompt, a word outside the vocabulary, or two values of one
    attribute ("a red blue circle").
    """
    words = re.findall(r"[a-z]+|[^a-z\s,.;:!?'\"-]+", prompt.lower())  # punctuation is ignored
    if not words:
        raise WorkbenchError("the prompt is empty: describe an object, e.g. 'a red circle in the center'")
    found: dict[str, str] = {}
    pending_row: str | None = None
    for word in words + [""]:
        if pending_row is not None:  # a row word waits for its column word
            if word in COLS:
                _set(found, "position", "center" if (pending_row, word) == ("middle", "middle")
                     else f"{pending_row} {word}", prompt)
                pending_row = None
                continue
            raise WorkbenchError(f"'{pending_row}' must be followed by left, middle or right in: {prompt!r}")
        if word == "":
            break
        if word in FILLER_WORDS:
            continue
        if word in ROWS:
            pending_row = word
        elif word == "center":
            _set(found, "position", "center", prompt)
        elif word in SHAPES:
            _set(found, "shape", word, prompt)
        elif word in COLORS:
            _set(found, "color", word, prompt)
        elif word in SIZES:
            _set(found, "size", word, prompt)
        elif word in BACKGROUNDS:
            _set(found, "background", word, prompt)
        else:
            raise WorkbenchError(
                f"unknown word '{word}' in prompt {prompt!r}; the vocabulary is: {', '.join(VOCABULARY)}")
    if "shape" not in found:
        raise WorkbenchError(f"the prompt {prompt!r} names no shape; use one of: {', '.join(SHAPES)}")
    return Scene(**found)


def _set(found: dict[str, str], key: str, value: str, prompt: str) -> None:
    if key in found and found[key] != value:
        raise WorkbenchError(f"the prompt {prompt!r} names two {key}s: '{found[key]}' and '{value}'")
    found[key] = value


@cache
def _subpixel_grid(size: int, supersample: int) -> tuple[np.ndarray, np.ndarray]:
    """(y, x) sub-pixel centres in pixel units, each (size * supersample,) * 2, read-only: built once, as the
    reward's detector draws four templates per image (half its time went to building this grid)."""
    coords = (np.arange(size * supersample) + 0.5) / supersample
    grid = np.meshgrid(coords, coords, indexing="ij")
    for axis in grid:
        axis.flags.writeable = False
    return grid[0], grid[1]


def shape_mask(shape: str, cx: float, cy: float, half: float, size: int = IMAGE_SIZE,
               supersample: int = 4) -> np.ndarray:
    """Anti-aliased coverage in [0, 1] of a shape centred at pixel (cx, cy); shape (size, size).

    Only the pixels of the shape's bounding box (1.05 half on every side, as the widest shapes reach, and one pixel
    more) are computed; the rest is 0. The values are those of the whole grid's computation, element by element
    (tests/test_world.py). The reward's detector draws four templates per image: a detection takes about a sixth
    less time so."""
    if shape not in SHAPES:
        raise WorkbenchError(f"unknown shape '{shape}'; valid shapes: {', '.join(SHAPES)}")
    reach = 1.05 * half + 1.0
    x0, x1 = _pixel_span(cx, reach, size)
    y0, y1 = _pixel_span(cy, reach, size)
    out = np.zeros((size, size))
    if x0 < x1 and y0 < y1:
        y, x = _subpixel_grid(size, supersample)
        rows, cols = slice(y0 * supersample, y1 * supersample), slice(x0 * supersample, x1 * supersample)
        inside = _inside(shape, x[rows, cols] - cx, y[rows, cols] - cy, half)
        # (n, m) sub-pixels -> pixels: mean over each supersample x supersample block
        out[y0:y1, x0:x1] = inside.reshape(y1 - y0, supersample, x1 - x0, supersample).mean(axis=(1, 3))
    return out


def _pixel_span(centre: float, reach: float, size: int) -> tuple[int, int]:
    """The pixels [start, stop) within `reach` of `centre`, clipped to the image."""
    return max(int(np.floor(centre - reach)), 0), min(int(np.ceil(centre + reach)), size)


def _inside(shape: str, dx: np.ndarray, dy: np.ndarray, half: float) -> np.ndarray:
    """Which sub-pixels, at offsets (dx, dy) from the centre, the shape covers."""
    if shape == "circle":
        return dx**2 + dy**2 <= half**2
    if shape == "ring":  # a disc with a hole of half its radius
        r2 = dx**2 + dy**2
        return (r2 <= (1.05 * half) ** 2) & (r2 >= (0.5 * half) ** 2)
    if shape == "cross":  # a plus sign
        arm, reach = 0.4 * half, 1.05 * half
        adx, ady = np.abs(dx), np.abs(dy)
        return ((adx <= reach) & (ady <= arm)) | ((ady <= reach) & (adx <= arm))
    return (np.abs(dx) <= 1.05 * half) & (np.abs(dy) <= 0.45 * half)  # bar: horizontal, over twice as wide as tall


def render(scene: Scene, rng: np.random.Generator | None = None) -> np.ndarray:
    """Render a complete scene as float32 RGB in [0, 1], shape (3, 32, 32).

    With `rng`, the object is jittered (centre +-1.5 px, size +-10 %) so the training data is not 1296
    identical pictures; without it the rendering is canonical.
    """
    if not scene.complete:
        raise WorkbenchError(f"cannot render an incomplete scene: {scene}")
    row, col = scene.cell
    cx, cy, half = GRID_CENTERS[col], GRID_CENTERS[row], SIZES[scene.size]
    if rng is not None:
        cx, cy = cx + rng.uniform(-1.5, 1.5), cy + rng.uniform(-1.5, 1.5)
        half *= rng.uniform(0.9, 1.1)
    alpha = shape_mask(scene.shape, cx, cy, half)[None]  # (1, H, W)
    fg = np.array(COLORS[scene.color], dtype=np.float32)[:, None, None] / 255.0
    bg = np.array(BACKGROUNDS[scene.background], dtype=np.float32)[:, None, None] / 255.0
    return (bg * (1 - alpha) + fg * alpha).astype(np.float32)  # (3, H, W)
