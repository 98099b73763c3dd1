"""Rewards of pixel statistics, independent of the prompt: edge sharpness, composition, JPEG size (DDPO)."""

from __future__ import annotations

import io

import torch
import torch.nn.functional as F
from PIL import Image

from workbench.core.imaging import to_uint8
from workbench.rewards.base import REWARDS, RewardInfo
from workbench.toyworld.world import Scene, render  # noqa: F401 (used by the doctests)

CLEAN_SCALE = 0.05  # RMS colour deviation of the background scoring exp(-1/2) in `composition`
OBJECT_THRESHOLD = 0.3  # colour distance to the background above which a pixel belongs to a blob


def _background_and_distance(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Background colour (median of the border pixels) (B, 3) and each pixel's distance to it (B, H, W)."""
    x = images.detach().float().clamp(0, 1)  # (B, 3, H, W)
    border = torch.cat([x[:, :, 0], x[:, :, -1], x[:, :, 1:-1, 0], x[:, :, 1:-1, -1]], dim=2)  # (B, 3, N)
    background = border.median(dim=2).values  # (B, 3)
    distance = (x - background[:, :, None, None]).norm(dim=1)  # (B, H, W)
    return background, distance


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
    return score.clamp(max=1)  # (B,) >= 0 already; above 1 where neighbours straddle the background


REWARDS.add(sharpness, "sharpness", info=RewardInfo("edge sharpness, in [0, 1]"))


def _largest_blob_fraction(mask: torch.Tensor) -> torch.Tensor:
    """Share of the mask's pixels in its largest 8-connected component, (B, H, W) bool -> (B,); 0 if empty."""
    h, w = mask.shape[1:]  # (B, H, W)
    ids = torch.arange(1.0, h * w + 1, device=mask.device).reshape(h, w)  # float: CUDA max_pool2d has no int kernel
    labels = ids * mask  # (B, H, W) 0 outside the mask
    for _ in range(h * w):  # spread each component's largest id through it
        spread = F.max_pool2d(labels[:, None], 3, stride=1, padding=1)[:, 0] * mask  # (B, H, W)
        if torch.equal(spread, labels):
            break
        labels = spread
    fractions = []
    for image in labels:  # (H, W)
        counts = torch.unique(image[image > 0], return_counts=True)[1]  # pixels per component
        fractions.append(counts.max() / counts.sum() if counts.numel() else image.new_zeros(()))
    return torch.stack(fractions).float()  # (B,)


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


REWARDS.add(composition, "composition", info=RewardInfo("a clean background with exactly one object, in [0, 1]"))


def _jpeg_kilobytes(images: torch.Tensor) -> torch.Tensor:
    """(B,) size in kB (1000 bytes) of each image saved as JPEG at quality 95 with PIL, as in DDPO."""
    sizes = []
    for array in to_uint8(images):  # (H, W, 3) uint8
        buffer = io.BytesIO()
        Image.fromarray(array).save(buffer, format="JPEG", quality=95)
        sizes.append(buffer.tell() / 1000)
    return torch.tensor(sizes, dtype=torch.float32, device=images.device)


def jpeg_compressibility(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
    """Minus the JPEG size in kB (DDPO, arXiv 2305.13301): about -0.6 (flat) to -1.9 (uniform noise) at 32x32.

    >>> image = torch.from_numpy(render(Scene("circle", "red", "large", "center", "white")))[None]
    >>> jpeg_compressibility(image, ["a red circle"])
    tensor([-1.04...])
    """
    return -_jpeg_kilobytes(images)


REWARDS.add(jpeg_compressibility, "jpeg_compressibility", info=RewardInfo("minus the JPEG size in kB, DDPO"))


def jpeg_incompressibility(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
    """The JPEG size in kB (DDPO, arXiv 2305.13301): about 0.6 (flat) to 1.9 (uniform noise) at 32x32.

    >>> image = torch.from_numpy(render(Scene("circle", "red", "large", "center", "white")))[None]
    >>> jpeg_incompressibility(image, ["a red circle"])
    tensor([1.04...])
    """
    return _jpeg_kilobytes(images)


REWARDS.add(jpeg_incompressibility, "jpeg_incompressibility", info=RewardInfo("the JPEG size in kB, DDPO"))
