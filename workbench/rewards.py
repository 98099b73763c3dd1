"""Rewards: one score per generated image, given the prompt it was generated for.

A reward is `fn(images, prompts) -> scores`: images (B, 3, H, W) float RGB in [0, 1], prompts a list
of B strings, scores (B,) float32 with a documented range. The weight-free rewards live in `REWARDS`;
the model-based ones (`clip_score`, `pickscore`) load a CLIP model from a local folder. A reward spec
such as "adherence:1,sharpness:0.5" names a weighted sum of rewards, built by `build_reward`.

    reward = build_reward("adherence:1,sharpness:0.5")
    reward(images, prompts)             # (B,) weighted sum
    reward.components(images, prompts)  # {"adherence": (B,), "sharpness": (B,)}
"""

from __future__ import annotations

import io
import json
from functools import lru_cache
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from workbench.errors import WorkbenchError
from workbench.imaging import to_uint8
from workbench.perception import Detection, detect
from workbench.registry import Registry
from workbench.world import BACKGROUNDS, COLORS, GRID_CENTERS, Scene, parse_prompt, render

RewardFn = Callable[[torch.Tensor, list[str]], torch.Tensor]
REWARDS: Registry[RewardFn] = Registry("reward")

COLOR_SCALE = 0.12  # RGB distance (0-1 units) scoring exp(-1/2); the closest palette pair is 0.28 apart
POSITION_SCALE = 4.0  # pixels; the neighbouring grid cell (8 px away) scores exp(-2) = 0.14
SIZE_SCALE = 0.3  # log-area; "small" and "large" differ by ~0.8, i.e. a score of ~0.02
SHAPE_POWER = 20.0  # a wrong shape's IoU ratio (0.85-0.93 in this world) becomes 0.04-0.23
CLEAN_SCALE = 0.05  # RMS colour deviation of the background scoring exp(-1/2) in `composition`
OBJECT_THRESHOLD = 0.3  # colour distance to the background above which a pixel belongs to a blob


# ----------------------------------------------------------------------------------------- adherence
def _gaussian(distance: float, scale: float) -> float:
    return float(np.exp(-distance**2 / (2 * scale**2)))


def _rgb(values: tuple[int, int, int]) -> np.ndarray:
    return np.array(values, dtype=np.float32) / 255.0


@lru_cache(maxsize=None)
def _canonical_area(scene: Scene) -> float:
    """Area `detect` measures on the canonical render of a scene (soft edges included)."""
    return detect(render(scene)).area


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


@lru_cache(maxsize=4096)
def _scene(prompt: str) -> Scene:
    return parse_prompt(prompt)


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


@REWARDS.register("adherence")
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


@REWARDS.register("color_match")
def color_match(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
    """Colour score of `adherence` alone, in [0, 1] (1 if the prompt names no colour and an object is drawn).

    >>> image = torch.from_numpy(render(Scene("circle", "orange", "large", "center", "white")))[None]
    >>> color_match(image, ["a red circle"])
    tensor([0.00...])
    """
    return _mean_scores(images, prompts, ("color",))


@REWARDS.register("shape_match")
def shape_match(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
    """Shape score of `adherence` alone, in [0, 1]: (IoU_target / IoU_best)^20.

    >>> image = torch.from_numpy(render(Scene("circle", "blue", "large", "center", "white")))[None]
    >>> shape_match(image, ["a red circle"])
    tensor([1.])
    """
    return _mean_scores(images, prompts, ("shape",))


@REWARDS.register("position_match")
def position_match(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
    """Position score of `adherence` alone, in [0, 1] (1 if the prompt names no position and an object is drawn).

    >>> image = torch.from_numpy(render(Scene("circle", "red", "large", "top middle", "white")))[None]
    >>> position_match(image, ["a red circle in the center"])
    tensor([0.13...])
    """
    return _mean_scores(images, prompts, ("position",))


@REWARDS.register("size_match")
def size_match(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
    """Size score of `adherence` alone, in [0, 1] (1 if the prompt names no size and an object is drawn).

    >>> image = torch.from_numpy(render(Scene("circle", "red", "small", "center", "white")))[None]
    >>> size_match(image, ["a large red circle"])
    tensor([0.01...])
    """
    return _mean_scores(images, prompts, ("size",))


# ------------------------------------------------------------------------------ fine detail, layout
def _background_and_distance(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Background colour (median of the border pixels) (B, 3) and each pixel's distance to it (B, H, W)."""
    x = images.detach().float().clamp(0, 1)  # (B, 3, H, W)
    border = torch.cat([x[:, :, 0], x[:, :, -1], x[:, :, 1:-1, 0], x[:, :, 1:-1, -1]], dim=2)  # (B, 3, N)
    background = border.median(dim=2).values  # (B, 3)
    distance = (x - background[:, :, None, None]).norm(dim=1)  # (B, H, W)
    return background, distance


@REWARDS.register("sharpness")
def sharpness(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
    """Edge sharpness in [0, 1]: the |g|-weighted mean of |g| / C over all pixel differences g.

    g are the RGB differences between horizontal and vertical neighbours and C the image contrast (the
    largest colour distance to the background). An edge that jumps from background to object within
    one pixel scores 1, a ramp w pixels wide 1/w, whatever its length or colours; anti-aliased renders
    score about 0.6 and a 3x3 box blur brings that to about 0.25. A flat image scores 0.

    >>> image = torch.from_numpy(render(Scene("circle", "red", "large", "center", "white")))[None]
    >>> sharpness(image, ["a red circle"])
    tensor([0.60...])
    """
    x = images.detach().float().clamp(0, 1)  # (B, 3, H, W)
    gx = (x[..., :, 1:] - x[..., :, :-1]).norm(dim=1).flatten(1)  # (B, H * (W - 1))
    gy = (x[..., 1:, :] - x[..., :-1, :]).norm(dim=1).flatten(1)  # (B, (H - 1) * W)
    g = torch.cat([gx, gy], dim=1)  # (B, N)
    contrast = _background_and_distance(images)[1].flatten(1).max(dim=1).values  # (B,)
    score = (g**2).sum(dim=1) / (g.sum(dim=1) * contrast).clamp_min(1e-8)  # (B,) 0 / eps = 0 when flat
    return score.clamp(0, 1)


def _largest_blob_fraction(mask: torch.Tensor) -> torch.Tensor:
    """Share of the mask's pixels in its largest 8-connected component, (B, H, W) bool -> (B,); 0 if empty."""
    b, h, w = mask.shape
    ids = torch.arange(1, h * w + 1, dtype=torch.float32, device=mask.device).reshape(1, h, w)
    labels = torch.where(mask, ids.expand(b, h, w), 0.0)  # (B, H, W) 0 outside the mask
    for _ in range(h * w):  # spread each component's largest id through it
        spread = F.max_pool2d(labels[:, None], 3, stride=1, padding=1)[:, 0] * mask  # (B, H, W)
        if torch.equal(spread, labels):
            break
        labels = spread
    fractions = []
    for row in labels.flatten(1):  # (H * W,)
        counts = torch.unique(row[row > 0], return_counts=True)[1]
        fractions.append(counts.max() / counts.sum() if counts.numel() else torch.zeros((), device=mask.device))
    return torch.stack(fractions).float()  # (B,)


@REWARDS.register("composition")
def composition(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
    """Global composition in [0, 1]: a clean background times "exactly one object".

    clean = exp(-m / 2s^2), m the mean squared colour distance to the background colour (border median)
    over the pixels away from any blob (s = 0.05); one = the share of blob pixels (distance > 0.3) in
    the largest 8-connected blob. A render of the world scores 1; an empty image 0.

    >>> image = torch.from_numpy(render(Scene("circle", "red", "large", "center", "white")))[None]
    >>> composition(image, ["a red circle"])
    tensor([1.])
    """
    distance = _background_and_distance(images)[1]  # (B, H, W)
    blobs = distance > OBJECT_THRESHOLD  # (B, H, W)
    near_blob = F.max_pool2d(blobs[:, None].float(), 3, stride=1, padding=1)[:, 0] > 0  # (B, H, W)
    away = (~near_blob).float()
    mean_square = (distance**2 * away).flatten(1).sum(1) / away.flatten(1).sum(1).clamp_min(1)  # (B,)
    clean = torch.exp(-mean_square / (2 * CLEAN_SCALE**2))  # (B,)
    return (clean * _largest_blob_fraction(blobs)).float()


def _jpeg_kilobytes(images: torch.Tensor) -> torch.Tensor:
    """(B,) size in kB (1000 bytes) of each image saved as JPEG at quality 95 with PIL, as in DDPO."""
    sizes = []
    for array in to_uint8(images):  # (H, W, 3) uint8
        buffer = io.BytesIO()
        Image.fromarray(array).save(buffer, format="JPEG", quality=95)
        sizes.append(buffer.tell() / 1000)
    return torch.tensor(sizes, dtype=torch.float32, device=images.device)


@REWARDS.register("jpeg_compressibility")
def jpeg_compressibility(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
    """Minus the JPEG size in kB (DDPO, arXiv 2305.13301): about -0.6 (flat) to -1.9 (uniform noise) at 32x32.

    >>> image = torch.from_numpy(render(Scene("circle", "red", "large", "center", "white")))[None]
    >>> jpeg_compressibility(image, ["a red circle"])
    tensor([-1.04...])
    """
    return -_jpeg_kilobytes(images)


@REWARDS.register("jpeg_incompressibility")
def jpeg_incompressibility(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
    """The JPEG size in kB (DDPO, arXiv 2305.13301): about 0.6 (flat) to 1.9 (uniform noise) at 32x32.

    >>> image = torch.from_numpy(render(Scene("circle", "red", "large", "center", "white")))[None]
    >>> jpeg_incompressibility(image, ["a red circle"])
    tensor([1.04...])
    """
    return _jpeg_kilobytes(images)


# ------------------------------------------------------------------------------ CLIP and PickScore
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)  # OpenAI CLIP's normalisation, if no preprocessor_config
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
MODEL_PATH_ARGS = {"clip_score": "clip_path", "pickscore": "pickscore_path"}  # reward -> build_reward arg


def check_model_folder(name: str, path: str | None) -> Path:
    """The folder of a model-based reward, or a WorkbenchError naming what is missing and what to pass."""
    arg = MODEL_PATH_ARGS[name]
    fix = f"pass {arg}=<a folder written by CLIPModel.save_pretrained and CLIPTokenizer.save_pretrained>"
    if path is None:
        raise WorkbenchError(f"the reward '{name}' needs a local CLIP model folder; {fix}")
    folder = Path(path)
    if not folder.is_dir():
        raise WorkbenchError(f"the {arg} folder '{folder}' for reward '{name}' does not exist; {fix}")
    missing = None
    if not (folder / "config.json").is_file():
        missing = "config.json"
    elif not any((folder / f).is_file() for f in WEIGHT_FILES):
        missing = " or ".join(WEIGHT_FILES)
    elif not (folder / "tokenizer.json").is_file() and not all(
            (folder / f).is_file() for f in ("vocab.json", "merges.txt")):
        missing = "tokenizer.json (or vocab.json and merges.txt)"
    if missing:
        raise WorkbenchError(f"the {arg} folder '{folder}' for reward '{name}' has no {missing}; {fix}")
    return folder


def clip_pixels(images: torch.Tensor, size: int, mean: tuple, std: tuple) -> torch.Tensor:
    """CLIP's preprocessing in torch: (B, 3, H, W) in [0, 1] -> (B, 3, size, size) normalised."""
    x = F.interpolate(images.float(), size=(size, size), mode="bicubic", align_corners=False, antialias=True)
    x = x.clamp(0, 1)  # (B, 3, size, size); bicubic overshoots at edges
    mean_t = torch.tensor(mean, device=x.device)[None, :, None, None]  # (1, 3, 1, 1)
    std_t = torch.tensor(std, device=x.device)[None, :, None, None]
    return (x - mean_t) / std_t


class ClipReward:
    """Image-text agreement from a local CLIP model, loaded once on the first call.

    `logit_scaled=False` is CLIPScore's cosine similarity of the image and text embeddings, in [-1, 1]
    (Hessel et al. 2021, without the 2.5 * max(., 0) rescaling). `logit_scaled=True` is PickScore
    (Kirstain et al. 2023, arXiv 2305.01569): exp(logit_scale) * cosine, in [-exp(logit_scale),
    exp(logit_scale)], i.e. [-100, 100] for PickScore's CLIP-H (typical scores 18-23). Images are
    resized to the model's input size and normalised in torch, without a PIL round trip. The example's
    output is illustrative: it depends on the model.

    >>> reward = build_reward("clip_score", clip_path="models/clip-vit-base-patch32")  # doctest: +SKIP
    >>> reward(image, ["a red circle"])  # doctest: +SKIP
    tensor([0.27])
    """

    def __init__(self, name: str, folder: Path, logit_scaled: bool):
        self.name, self.folder, self.logit_scaled = name, folder, logit_scaled
        self._model = self._tokenizer = None

    def _load(self, device: torch.device) -> None:
        from transformers import CLIPModel, CLIPTokenizer

        self._model = CLIPModel.from_pretrained(self.folder, local_files_only=True).eval().to(device)
        self._tokenizer = CLIPTokenizer.from_pretrained(self.folder, local_files_only=True)
        self._mean, self._std = CLIP_MEAN, CLIP_STD
        preprocessor = self.folder / "preprocessor_config.json"
        if preprocessor.is_file():
            config = json.loads(preprocessor.read_text())
            self._mean = tuple(config.get("image_mean", CLIP_MEAN))
            self._std = tuple(config.get("image_std", CLIP_STD))

    @torch.no_grad()
    def __call__(self, images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        """(B, 3, H, W) images and B prompts -> (B,) scores on the images' device."""
        if self._model is None:
            self._load(images.device)
        model = self._model.to(images.device)
        config = model.config
        pixels = clip_pixels(images, config.vision_config.image_size, self._mean, self._std)
        text = self._tokenizer(prompts, padding=True, truncation=True, return_tensors="pt",
                               max_length=config.text_config.max_position_embeddings).to(images.device)
        out = model(input_ids=text["input_ids"], attention_mask=text["attention_mask"], pixel_values=pixels)
        cosine = (out.image_embeds * out.text_embeds).sum(dim=-1)  # (B,) both embeddings unit-norm
        scale = model.logit_scale.exp() if self.logit_scaled else 1.0
        return (scale * cosine).float()


# ------------------------------------------------------------------------------------ reward specs
def reward_names() -> list[str]:
    """Every name a reward spec may use: the weight-free rewards and the model-based ones."""
    return sorted(REWARDS.names() + list(MODEL_PATH_ARGS))


def parse_reward_spec(spec: str) -> dict[str, float]:
    """"adherence:1,sharpness:0.5" -> {"adherence": 1.0, "sharpness": 0.5}; a bare name has weight 1."""
    example = "e.g. 'adherence:1,sharpness:0.5'"
    if not spec or not spec.strip():
        raise WorkbenchError(f"the reward spec is empty; name rewards with weights, {example}; "
                             f"valid rewards: {', '.join(reward_names())}")
    weights: dict[str, float] = {}
    for item in spec.split(","):
        name, colon, text = (part.strip() for part in item.partition(":"))
        if not name:
            raise WorkbenchError(f"the reward spec {spec!r} has an empty entry; write it as {example}")
        if name not in reward_names():
            raise WorkbenchError(f"unknown reward '{name}'; valid rewards: {', '.join(reward_names())}")
        if name in weights:
            raise WorkbenchError(f"the reward spec {spec!r} names '{name}' twice; give each reward once")
        try:
            weight = float(text) if colon else 1.0
        except ValueError:
            weight = float("nan")
        if not np.isfinite(weight):
            raise WorkbenchError(f"the weight {text!r} of reward '{name}' is not a finite number; {example}")
        weights[name] = weight
    return weights


class RewardFunction:
    """A weighted sum of named rewards: `reward(images, prompts) -> (B,)`, built by `build_reward`."""

    def __init__(self, weights: dict[str, float], functions: dict[str, RewardFn]):
        self.weights = dict(weights)
        self._functions = functions

    @property
    def names(self) -> list[str]:
        return list(self.weights)

    def components(self, images: torch.Tensor, prompts: list[str]) -> dict[str, torch.Tensor]:
        """Each reward's raw (unweighted) score, name -> (B,) float32; raises on NaN or inf."""
        if images.ndim != 4 or images.shape[0] != len(prompts):
            raise WorkbenchError(f"rewards need images (B, 3, H, W) and B prompts; got images of shape "
                                 f"{tuple(images.shape)} and {len(prompts)} prompts")
        bad = (~torch.isfinite(images.flatten(1))).any(dim=1).nonzero()
        if bad.numel():
            i = int(bad[0])
            raise WorkbenchError(f"image {i} (prompt {prompts[i]!r}) contains NaN or inf values; "
                                 "check the sampler or policy that produced it")
        out = {}
        for name in self.names:
            with torch.no_grad():
                scores = self._functions[name](images, prompts)
            _check_scores(name, scores, prompts)
            out[name] = scores.float()
        return out

    def combine(self, components: dict[str, torch.Tensor]) -> torch.Tensor:
        """Weighted sum of `components` (as returned by `components`), (B,)."""
        return sum(self.weights[name] * components[name] for name in self.names)

    def __call__(self, images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        return self.combine(self.components(images, prompts))


def _check_scores(name: str, scores: torch.Tensor, prompts: list[str]) -> None:
    if scores.shape != (len(prompts),):
        raise WorkbenchError(f"reward '{name}' returned shape {tuple(scores.shape)}, expected "
                             f"({len(prompts)},): one score per image")
    bad = (~torch.isfinite(scores)).nonzero()
    if bad.numel():
        i = int(bad[0])
        raise WorkbenchError(f"reward '{name}' is {scores[i].item()} for image {i} (prompt {prompts[i]!r}) "
                             "although the image is finite; fix that reward or leave it out of the spec")


def build_reward(spec: str, clip_path: str | None = None,
                 pickscore_path: str | None = None) -> RewardFunction:
    """The `RewardFunction` of a spec; model folders are checked now and loaded on the first call."""
    weights = parse_reward_spec(spec)
    paths = {"clip_score": clip_path, "pickscore": pickscore_path}
    functions: dict[str, RewardFn] = {}
    for name in weights:
        if name in MODEL_PATH_ARGS:
            folder = check_model_folder(name, paths[name])
            functions[name] = ClipReward(name, folder, logit_scaled=name == "pickscore")
        else:
            functions[name] = REWARDS.get(name)
    return RewardFunction(weights, functions)
