"""Pictures of a sampled group: the x0 filmstrip (the model's guess of the final image at every step)."""

from __future__ import annotations

import torch
from PIL import Image

from workbench.core.imaging import filmstrip, with_header
from workbench.flow.policy import FlowPolicy
from workbench.flow.trajectory import TrajectoryGroup


def x0_filmstrip(policy: FlowPolicy, group: TrajectoryGroup, max_columns: int | None = None,
                 thumb: int | None = None, cell: int = 96) -> Image.Image:
    """One row per trajectory, one column per step (or `max_columns` evenly spaced steps, the last included).

    Decoded through the policy; cells larger than `thumb` pixels (real models decode 512-1024 px) are
    shrunk to it with area averaging; smaller ones are enlarged to about `cell` pixels. A white strip on top
    names each column's step ("t=0" ... "t=T-1").
    """
    t = group.num_steps
    steps = torch.linspace(0, t - 1, min(t, max_columns or t)).round().long()  # (S,)
    x0 = group.x0_preds[:, steps]  # (G, S, C, h, w) latents
    images = policy.decode(x0.flatten(0, 1).to(policy.device)).cpu()  # (G * S, 3, H, W)
    if thumb is not None and images.shape[-1] > thumb:
        images = torch.nn.functional.interpolate(images, size=(thumb, thumb), mode="area")
    scale = max(1, cell // images.shape[-1])
    strip = filmstrip(images.unflatten(0, tuple(x0.shape[:2])), scale=scale)
    return with_header(strip, [f"t={int(s)}" for s in steps], images.shape[-1] * scale + 2)  # grid's pad is 2


x0_filmstrip = torch.no_grad()(x0_filmstrip)  # not a decorator: mutmut skips decorated functions
