"""Images to pictures: grids of final images and filmstrips of x0 predictions, as PIL images."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image

from workbench.core.errors import WorkbenchError


def to_uint8(images: torch.Tensor) -> np.ndarray:
    """(B, 3, H, W) floats in [0, 1] -> (B, H, W, 3) uint8."""
    return (images.detach().float().clamp(0, 1) * 255).round().byte().permute(0, 2, 3, 1).cpu().numpy()


def to_pil(image: torch.Tensor, scale: int = 4) -> Image.Image:
    """One (3, H, W) image in [0, 1] as a PIL image, enlarged `scale` times with nearest neighbours."""
    pil = Image.fromarray(to_uint8(image[None])[0])
    return pil.resize((pil.width * scale, pil.height * scale), Image.NEAREST) if scale > 1 else pil


def grid(images: torch.Tensor, ncol: int | None = None, scale: int = 4, pad: int = 2) -> Image.Image:
    """Tile (B, 3, H, W) images in rows of `ncol` (default: a near-square grid) with a white gap."""
    b, _, h, w = images.shape
    ncol = ncol or int(np.ceil(np.sqrt(b)))
    nrow = int(np.ceil(b / ncol))
    cell_h, cell_w = h * scale + pad, w * scale + pad
    canvas = Image.new("RGB", (ncol * cell_w + pad, nrow * cell_h + pad), "white")
    for i, image in enumerate(images):
        r, c = divmod(i, ncol)
        canvas.paste(to_pil(image, scale), (pad + c * cell_w, pad + r * cell_h))
    return canvas


def filmstrip(x0_preds: torch.Tensor, scale: int = 3) -> Image.Image:
    """x0 predictions (G, T, 3, H, W) in [0, 1]: one row per trajectory, one column per step."""
    g, t = x0_preds.shape[:2]
    return grid(x0_preds.reshape(g * t, *x0_preds.shape[2:]), ncol=t, scale=scale)


HEADER = 36  # pixels of the strip `with_header` puts above a grid for its column labels


def with_header(image: Image.Image, labels: list[str], cell_w: int, pad: int = 2, height: int = HEADER) -> Image.Image:
    """`image` (a grid of columns `cell_w` pixels apart after `pad`) under a white strip that writes labels[c]
    above column c, at its bottom: the top of the strip is left free for a viewer's own label badge. The labels are
    a quarter of a column wide in height (at most the strip's height less 12 px): a 16-column filmstrip is shown
    at about 3/4 of its width, where the 11-px default font read as 8 px."""
    from PIL import ImageDraw, ImageFont

    canvas = Image.new("RGB", (image.width, image.height + height), "white")
    canvas.paste(image, (0, height))
    draw = ImageDraw.Draw(canvas)
    font = ImageFont.load_default(size=max(11, min(cell_w // 4, height - 12)))
    for c, text in enumerate(labels):
        left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
        x = pad + c * cell_w + (cell_w - pad - (right - left)) // 2
        draw.text((x - left, height - bottom - 4), text, fill="black", font=font)
    return canvas


def save_image(image: Image.Image, path: str | Path) -> Path:
    """Write a PIL image, creating parent folders; an unwritable path is a WorkbenchError."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        image.save(path)
    except (OSError, ValueError) as err:
        raise WorkbenchError(f"cannot write {path}: {getattr(err, 'strerror', None) or err}; "
                             "choose a writable path ending in .png or .jpg") from None
    return path


CHECKER_THRESHOLD = 0.02  # a 2x2 block's checkerboard response |x00 - x01 - x10 + x11| / 4 (pixel units in [0, 1])
# above which it counts as checkered: 2.5-3.5 % of the shipped crosses lesson's held-out blocks before training, 48-52 %
# after its 80 iterations (docs/methods.md "Reward hacking")


def checkerboard_share(images: torch.Tensor, threshold: float = CHECKER_THRESHOLD) -> torch.Tensor:
    """Per-image share of 2x2 pixel blocks that carry a checkerboard: |x00 - x01 - x10 + x11| / 4, averaged over the
    colour channels, above `threshold`.

    images (B, 3, H, W) in [0, 1] -> (B,) in [0, 1]. The response is 0 on flat colour, on horizontal and vertical
    edges and on linear ramps, and a for a 2x2 alternation of amplitude a: it counts the patch-grid texture a model
    learns when its reward pays for it (docs/methods.md "Reward hacking"), not the object's outline, which `speckle`
    counts too.

    >>> flat = torch.full((1, 3, 4, 4), 0.5)
    >>> checker = flat + 0.1 * (torch.arange(4)[:, None] + torch.arange(4)).remainder(2)
    >>> checkerboard_share(torch.cat([flat, checker]))
    tensor([0., 1.])
    """
    x = images.detach().float().clamp(0, 1)  # (B, 3, H, W)
    response = (x[..., :-1, :-1] - x[..., :-1, 1:] - x[..., 1:, :-1] + x[..., 1:, 1:]).abs().mean(dim=1) / 4
    return (response > threshold).flatten(1).float().mean(dim=1)  # (B, H - 1, W - 1) -> (B,)


def speckle(images: torch.Tensor) -> torch.Tensor:
    """Per-image noise: the mean absolute difference between horizontally and vertically neighbouring pixels.

    images (B, 3, H, W) in [0, 1] -> (B,). A clean render of the toy world scores about 0.02 (its edges);
    pixel noise of std s adds about 1.13 s (the mean of |N(0, 2 s^2)|), so the speckle that an SDE's last
    steps leave in pixel space shows up directly (docs/methods.md "Noise in the final images").
    """
    x = images.detach().float().clamp(0, 1)  # (B, 3, H, W)
    dx = (x[..., :, 1:] - x[..., :, :-1]).abs().flatten(1)  # (B, 3 * H * (W - 1))
    dy = (x[..., 1:, :] - x[..., :-1, :]).abs().flatten(1)  # (B, 3 * (H - 1) * W)
    return torch.cat([dx, dy], dim=1).mean(dim=1)  # (B,)
