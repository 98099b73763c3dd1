"""`SamplingConfig` and `TrajectoryGroup`: G trajectories of one prompt with every state and log-prob.

A group saves to `<dir>/group.safetensors` (tensors) plus `<dir>/group.json` (prompt, seeds, config) and
loads back bit for bit.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from workbench.core.errors import WorkbenchError, shorten
from workbench.core.fields import LIMITS
from workbench.flow.schedule import SCHEDULES
from workbench.flow.sde import SDE_KINDS

TENSOR_FIELDS = ("sigmas", "states", "x0_preds", "means", "stds", "log_probs", "images")
SEED_RANGE = LIMITS["seed"].range()  # every seed, on every command and control: what torch.Generator.manual_seed takes
# finite, sane ranges of the sampling numbers (None = the model's default is allowed where the field is optional)
SAMPLING_RANGES = {name: LIMITS[name].range() for name in ("noise_level", "shift", "guidance_scale")}


def check_range(name: str, value, low: float, high: float) -> None:
    """value is None or a finite real number in [low, high]; else a WorkbenchError naming `name`."""
    if value is None:
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise WorkbenchError(f"{name} must be a finite number, got {value!r}")
    if not low <= value <= high:
        raise WorkbenchError(f"{name} must be in {low:g}..{high:g}, got {value:g}")


def offset_seed(seed: int, i: int) -> int:
    """The i-th seed after `seed` (group i of a batch), wrapping inside SEED_RANGE."""
    return (seed + i) % (SEED_RANGE[1] + 1)


def check_seed(seed) -> None:
    """A seed is an integer in SEED_RANGE (0 .. 2^63 - 1), the same rule for every command and control."""
    low, high = SEED_RANGE
    if not isinstance(seed, int) or isinstance(seed, bool) or not low <= seed <= high:
        raise WorkbenchError(f"seed must be an integer in {low}..2^63 - 1, got {shorten(seed)}")


@dataclass
class SamplingConfig:
    """How a group is sampled (Flow-GRPO arXiv 2505.05470 unless said otherwise)."""

    group: int = 8  # G, trajectories per prompt (GCPO: 12, Flow-GRPO: 24)
    steps: int = 16  # T, denoising transitions
    noise_level: float = 0.7  # SDE noise level a (Flow-GRPO default 0.7; eta for dance_grpo)
    sde: str = "flow_grpo"  # SDE kind: flow_grpo, dance_grpo (DanceGRPO), cps (arXiv 2509.05952)
    shift: float | None = None  # SD3 time shift; None = the model's default (3 for the embedded model)
    window: tuple[int, int] | None = None  # SDE only on steps [start, end), ODE elsewhere (Flow-GRPO-Fast, MixGRPO)
    guidance_scale: float = 1.0  # classifier-free guidance scale; 1 = off
    shared_noise: bool = True  # one x_T for the whole group (DanceGRPO, GCPO --init_same_noise)
    schedule: str = "model"  # sigma grid: the model's own (SD3: diffusers'), or GCPO's shifted linspace(1, 0, T + 1)
    seed: int = 0  # group seed: x_T and every SDE noise draw derive from it

    def __post_init__(self):
        if isinstance(self.window, list):
            self.window = tuple(self.window)
        for name in ("group", "steps", "seed"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise WorkbenchError(f"{name} must be an integer, got {value!r}")
        if self.group < 1:
            raise WorkbenchError(f"group size must be a positive integer, got {self.group}")
        if self.steps < 1:
            raise WorkbenchError(f"steps must be a positive integer, got {self.steps}")
        check_seed(self.seed)
        for name, (low, high) in SAMPLING_RANGES.items():
            check_range(name, getattr(self, name), low, high)
        if self.sde == "cps" and self.noise_level > 1:
            raise WorkbenchError(f"the cps noise level is an angle fraction in [0, 1], got {self.noise_level}")
        if self.schedule not in SCHEDULES:
            raise WorkbenchError(f"unknown schedule '{self.schedule}'; valid schedules: {', '.join(SCHEDULES)}")
        if self.sde not in SDE_KINDS:
            raise WorkbenchError(f"unknown SDE kind '{self.sde}'; valid kinds: {', '.join(SDE_KINDS)}")
        if self.shift is not None and self.shift <= 0:
            raise WorkbenchError(f"shift must be positive, got {self.shift}")
        if self.window is not None:
            start, end = self.window
            if not 0 <= start < end <= self.steps:
                raise WorkbenchError(f"SDE window {self.window} must satisfy 0 <= start < end <= steps ({self.steps})")

    def sde_mask(self) -> torch.Tensor:
        """(T,) bool: the steps sampled with the SDE, i.e. the ones that carry a log-prob and get trained."""
        mask = torch.zeros(self.steps, dtype=torch.bool)
        start, end = self.window or (0, self.steps)
        mask[start:end] = self.noise_level > 0
        return mask


@dataclass
class TrajectoryGroup:
    """G trajectories of one prompt. Step t goes from states[:, t] (noise level sigmas[t]) to
    states[:, t + 1] (sigmas[t + 1]); states[:, 0] is x_T (noise), states[:, T] is x_0."""

    prompt: str
    config: SamplingConfig
    sigmas: torch.Tensor  # (T + 1,)
    states: torch.Tensor  # (G, T + 1, C, H, W) latents
    x0_preds: torch.Tensor  # (G, T, C, H, W) x_t - t v at each step
    means: torch.Tensor  # (G, T, C, H, W) mean of p(x_{t+1} | x_t)
    stds: torch.Tensor  # (G, T) std of p(x_{t+1} | x_t); 0 on ODE steps
    log_probs: torch.Tensor  # (G, T) mean-over-elements log-prob; 0 on ODE steps
    images: torch.Tensor  # (G, 3, H', W') decoded final images in [0, 1]
    meta: dict = field(default_factory=dict)  # model name, timings, anything display-only

    @property
    def group_size(self) -> int:
        return self.states.shape[0]

    @property
    def num_steps(self) -> int:
        return self.states.shape[1] - 1

    def save(self, directory: str | Path) -> Path:
        directory = Path(directory)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            save_file({k: getattr(self, k).detach().cpu().contiguous() for k in TENSOR_FIELDS},
                      str(directory / "group.safetensors"))
            meta = {"prompt": self.prompt, "config": asdict(self.config), "meta": self.meta}
            (directory / "group.json").write_text(json.dumps(meta, indent=2))
        except OSError as err:
            raise WorkbenchError(f"cannot write the group to {directory}: {err.strerror}; "
                                 "choose a writable --out") from None
        return directory

    @classmethod
    def load(cls, directory: str | Path) -> TrajectoryGroup:
        directory = Path(directory)
        try:
            meta = json.loads((directory / "group.json").read_text())
            tensors = load_file(str(directory / "group.safetensors"))
        except (OSError, json.JSONDecodeError, SafetensorError) as err:
            raise WorkbenchError(f"cannot read a trajectory group from {directory}: {err}") from None
        return cls(prompt=meta["prompt"], config=SamplingConfig(**meta["config"]), meta=meta.get("meta", {}),
                   **{k: tensors[k] for k in TENSOR_FIELDS})
