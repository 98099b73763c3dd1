"""Reward specs: the registries, the weighted sum of named rewards, and `build_reward`.

A reward is `fn(images, prompts) -> scores`: images (B, 3, H, W) float RGB in [0, 1], prompts a list
of B strings, scores (B,) float32 with a documented range. Weight-free rewards are registered in
`REWARDS` (`attributes.py`, `pixels.py`); model-based ones in `MODEL_REWARDS` as factories that declare
the one setting naming their local model folder (`clip.py`). A spec such as "adherence:1,sharpness:0.5"
names a weighted sum of rewards, built by `build_reward`.

Each reward declares the models it serves and the images it accepts (`Accepts`, set with `@accepts`; a
model-based reward's on its `ModelReward` record): the toy world's rewards serve only the embedded model (its
32x32 renders of its own prompts, "toy"), the pixel statistics every model, CLIP-family rewards real SD3 / FLUX
models ("real") and, since they resize any picture, the embedded one too; an undeclared reward serves every model
and takes any size and any prompt. A spec whose rewards cannot score a model's images is refused before any
sampling (`RewardFunction.check_images`), and `default_reward` is a spec that works for every model.

    reward = build_reward("adherence:1,sharpness:0.5")
    reward(images, prompts)             # (B,) weighted sum
    reward.components(images, prompts)  # {"adherence": (B,), "sharpness": (B,)}
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from workbench.core.errors import NonFiniteError, WorkbenchError
from workbench.core.registry import Registry

RewardFn = Callable[[torch.Tensor, list[str]], torch.Tensor]
REWARDS: Registry[RewardFn] = Registry("reward")
TOY_REWARD = "adherence"  # the default for the embedded (toy-world) model
ANY_IMAGE_REWARD = "jpeg_compressibility"  # the default for SD3 / FLUX: any size, no model folder (DDPO's task)


TOY, REAL = "toy", "real"  # the models a reward serves: the embedded model's toy world, real SD3 / FLUX models
MODEL_KINDS = {TOY: "the embedded model's toy world", REAL: "real SD3 / FLUX models"}
THIS_MODEL = {TOY: "the embedded model", REAL: "a real SD3 / FLUX model"}


def model_kind(toy_world: bool) -> str:
    """TOY for a model of the toy world (`FlowPolicy.toy_world`), else REAL."""
    return TOY if toy_world else REAL


@dataclass(frozen=True)
class Accepts:
    """What a reward can score: the models it serves, a square side in pixels (None = any) and the prompts it
    reads."""

    size: int | None = None  # the one image side it scores, e.g. the toy world's 32; None = any size
    toy_prompts: bool = False  # it parses the prompt with the toy world's grammar (`toyworld.world.parse_prompt`)
    serves: tuple[str, ...] = (TOY, REAL)  # the model kinds whose images it means something for (MODEL_KINDS)

    def describe(self) -> str:
        size = "any size" if self.size is None else f"{self.size}x{self.size} px images"
        return size + (" of the toy world's prompts" if self.toy_prompts else "")


def accepts(size: int | None = None, toy_prompts: bool = False, serves: tuple[str, ...] = (TOY, REAL)):
    """Decorator: declare the models a reward function serves and the images it accepts (rewards without it serve
    every model and take any image)."""
    unknown = sorted(set(serves) - set(MODEL_KINDS))
    if unknown or not serves:
        raise ValueError(f"serves must name some of {', '.join(MODEL_KINDS)}, got {serves!r}")

    def decorate(fn: RewardFn) -> RewardFn:
        fn.accepts = Accepts(size, toy_prompts, tuple(serves))
        return fn
    return decorate


def reward_accepts(name: str) -> Accepts:
    """What the named reward serves and accepts (model-based rewards resize: any size)."""
    if name in MODEL_REWARDS:
        return Accepts(serves=MODEL_REWARDS.get(name).serves)
    return getattr(REWARDS.get(name), "accepts", Accepts())


def any_size_rewards(toy_world: bool | None = None) -> list[str]:
    """The rewards that score images of every size and prompt (and serve that kind of model, when given)."""
    return [n for n in reward_names() if reward_accepts(n).size is None and not reward_accepts(n).toy_prompts
            and (toy_world is None or model_kind(toy_world) in reward_accepts(n).serves)]


def rewards_for(toy_world: bool) -> list[str]:
    """The rewards that serve this kind of model: what the app offers and a spec may name for it."""
    return [n for n in reward_names() if model_kind(toy_world) in reward_accepts(n).serves]


def default_reward(toy_world: bool) -> str:
    """The reward spec a run uses when none is given: adherence for a model of the toy world (its 32x32 images of
    its prompts), else jpeg_compressibility (DDPO, arXiv 2305.13301): no model folder, any size, any prompt."""
    return TOY_REWARD if toy_world else ANY_IMAGE_REWARD


@dataclass(frozen=True)
class ModelReward:
    """A reward that needs a local model folder: how to check the folder and how to load the reward."""

    folder_arg: str  # the setting that names the folder: build_reward's keyword, TrainConfig's field, the CLI flag
    check: Callable[[str, str | None], Path]  # (reward name, folder or None) -> the folder, else WorkbenchError
    load: Callable[[str, Path], RewardFn]  # (reward name, checked folder) -> the reward (loads lazily)
    serves: tuple[str, ...] = (REAL,)  # the model kinds it serves (MODEL_KINDS)


MODEL_REWARDS: Registry[ModelReward] = Registry("model-based reward")


def register_model_reward(name: str, folder_arg: str, check: Callable[[str, str | None], Path],
                          serves: tuple[str, ...] = (REAL,)):
    """Decorator: register `load(name, folder) -> RewardFn` as the model-based reward `name`, serving `serves`."""
    def decorate(load: Callable[[str, Path], RewardFn]):
        MODEL_REWARDS.register(name)(ModelReward(folder_arg, check, load, tuple(serves)))
        return load
    return decorate


def folder_args() -> dict[str, str]:
    """Model-based reward name -> the setting naming its folder, e.g. {"clip_score": "clip_path"}."""
    return {name: MODEL_REWARDS.get(name).folder_arg for name in MODEL_REWARDS.names()}


def check_folders(names, folders: dict[str, str | None]) -> None:
    """Every model-based reward among `names` has a valid folder, and no folder is given without its reward."""
    for name, arg in folder_args().items():
        if name in names:
            MODEL_REWARDS.get(name).check(name, folders.get(arg))
        elif folders.get(arg) is not None:
            raise WorkbenchError(f"{arg} is set but neither reward nor gfpo_metric uses '{name}'; "
                                 f"add {name} to the reward spec or drop {arg}")

def reward_names() -> list[str]:
    """Every name a reward spec may use: the weight-free rewards and the model-based ones."""
    return sorted(REWARDS.names() + MODEL_REWARDS.names())


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
            raise NonFiniteError(f"image {i} (prompt {prompts[i]!r}) contains NaN or inf values; "
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

    def check_images(self, image_size: int, prompts: list[str] = (), toy_world: bool | None = None) -> None:
        """Refuse, before any sampling, a reward that cannot score `image_size` images of these prompts (or that
        does not serve this kind of model: `toy_world`, the policy's; None = not checked)."""
        check_reward_images(self.names, image_size, prompts, toy_world)


def check_reward_images(names, image_size: int, prompts=(), toy_world: bool | None = None) -> None:
    """Every named reward serves this kind of model (`toy_world`; None = either) and accepts square images of
    `image_size` px and these prompts, else a WorkbenchError that names the reward, what it serves or accepts and
    the rewards that take any image."""
    from workbench.toyworld.world import parse_prompt

    fix = f"use rewards that take any image ({', '.join(any_size_rewards(toy_world))})"
    for name in names:
        need = reward_accepts(name)
        if toy_world is not None and model_kind(toy_world) not in need.serves:
            served = " and ".join(MODEL_KINDS[k] for k in need.serves)
            this = THIS_MODEL[model_kind(toy_world)]
            raise WorkbenchError(f"reward '{name}' serves {served} only, and this is {this}; {fix}")
        if need.size is not None and need.size != image_size:
            raise WorkbenchError(f"reward '{name}' scores {need.describe()}, but this model makes {image_size}x"
                                 f"{image_size} px images; {fix}")
        for prompt in prompts if need.toy_prompts else ():
            try:
                parse_prompt(prompt)
            except WorkbenchError as err:
                raise WorkbenchError(f"reward '{name}' reads the toy world's prompts, and {prompt[:80]!r} is not "
                                     f"one ({err}); {fix}") from None


def _check_scores(name: str, scores: torch.Tensor, prompts: list[str]) -> None:
    if scores.shape != (len(prompts),):
        raise WorkbenchError(f"reward '{name}' returned shape {tuple(scores.shape)}, expected "
                             f"({len(prompts)},): one score per image")
    bad = (~torch.isfinite(scores)).nonzero()
    if bad.numel():
        i = int(bad[0])
        raise WorkbenchError(f"reward '{name}' is {scores[i].item()} for image {i} (prompt {prompts[i]!r}) "
                             "although the image is finite; fix that reward or leave it out of the spec")


def build_reward(spec: str, **folders: str | None) -> RewardFunction:
    """The `RewardFunction` of a spec; model folders (e.g. clip_path=...) are checked now, loaded on first call."""
    weights = parse_reward_spec(spec)
    unknown = sorted(set(folders) - set(folder_args().values()))
    if unknown:
        valid = ", ".join(sorted(folder_args().values()))
        raise WorkbenchError(f"unknown reward folder setting(s) {unknown}; valid: {valid}")
    functions: dict[str, RewardFn] = {}
    for name in weights:
        if name in MODEL_REWARDS:
            entry = MODEL_REWARDS.get(name)
            functions[name] = entry.load(name, entry.check(name, folders.get(entry.folder_arg)))
        else:
            functions[name] = REWARDS.get(name)
    return RewardFunction(weights, functions)
