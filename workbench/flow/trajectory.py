"""`SamplingConfig` and `TrajectoryGroup`: G trajectories of one prompt with every state and log-prob.

A group saves to `<dir>/group.safetensors` (tensors) plus `<dir>/group.json` (prompt, seeds, config) and
loads back bit for bit.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from workbench.core.errors import WorkbenchError
from workbench.flow.sde import SDE_KINDS

TENSOR_FIELDS = ("sigmas", "states", "x0_preds", "means", "stds", "log_probs", "images")


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
    seed: int = 0  # group seed: x_T and every SDE noise draw derive from it

    def __post_init__(self):
        if isinstance(self.window, list):
            self.window = tuple(self.window)
        if self.group < 1:
            raise WorkbenchError(f"group size must be a positive integer, got {self.group}")
        if self.steps < 1:
            raise WorkbenchError(f"steps must be a positive integer, got {self.steps}")
        if self.noise_level < 0:
            raise WorkbenchError(f"noise level must be >= 0, got {self.noise_level}")
        if self.sde == "cps" and self.noise_level > 1:
            raise WorkbenchError(f"the cps noise level is an angle fraction in [0, 1], got {self.noise_level}")
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
