"""Model-based rewards: CLIPScore and PickScore from a local CLIP folder (never downloaded).

Each is registered in `MODEL_REWARDS` with the one setting that names its folder (`clip_path`,
`pickscore_path`); `build_reward`, `TrainConfig` and the command line all read that declaration.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F

from workbench.core.errors import WorkbenchError
from workbench.rewards.base import MODEL_REWARDS, REAL, TOY, register_model_reward

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)  # OpenAI CLIP's normalisation, if no preprocessor_config
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


def check_clip_folder(name: str, path: str | None) -> Path:
    """The CLIP folder of reward `name`, or a WorkbenchError naming what is missing and what to pass."""
    arg = MODEL_REWARDS.get(name).folder_arg
    fix = f"pass {arg}=<a folder written by CLIPModel.save_pretrained and CLIPTokenizer.save_pretrained>"
    if path is None:
        raise WorkbenchError(f"the reward '{name}' needs a local CLIP model folder; {fix}")
    folder = Path(path)
    if not folder.is_dir():
        raise WorkbenchError(f"the {arg} folder '{folder}' for reward '{name}' does not exist; {fix}")
    missing = None  # pragma: no mutate ("" is as false: only `if missing` reads it)
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
    """CLIP's preprocessing in torch: (B, 3, H, W) in [0, 1] -> (B, 3, size, size) normalised.

    Antialiased bicubic on pixel centres (torch's default align_corners=False) is PIL's bicubic resize, the
    one CLIPImageProcessor applies, to within 8-bit rounding."""
    x = F.interpolate(images.float(), size=(size, size), mode="bicubic", antialias=True)
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

    def _load(self) -> None:
        from transformers import CLIPModel, CLIPTokenizer

        # from_pretrained reads a local folder (check_clip_folder found it) from disk whatever local_files_only says;
        # the flag only states that no hub is asked
        self._model = CLIPModel.from_pretrained(self.folder, local_files_only=True).eval()  # pragma: no mutate (above)
        self._tokenizer = CLIPTokenizer.from_pretrained(self.folder, local_files_only=True)  # pragma: no mutate (above)
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
            self._load()
        model = self._model.to(images.device)
        config = model.config
        pixels = clip_pixels(images, config.vision_config.image_size, self._mean, self._std)
        text = self._tokenizer(prompts, padding=True, truncation=True, return_tensors="pt",
                               max_length=config.text_config.max_position_embeddings).to(images.device)
        out = model(input_ids=text["input_ids"], attention_mask=text["attention_mask"], pixel_values=pixels)
        cosine = (out.image_embeds * out.text_embeds).sum(dim=-1)  # (B,) both embeddings unit-norm
        scale = model.logit_scale.exp() if self.logit_scaled else 1.0
        return (scale * cosine).float()


# CLIP-family rewards serve real models; they resize any picture, so the embedded model may use them too
@register_model_reward("clip_score", folder_arg="clip_path", check=check_clip_folder, serves=(REAL, TOY),
                       label="CLIPScore of image and prompt, from a CLIP folder")
def clip_score(name: str, folder: Path) -> ClipReward:
    """CLIPScore (Hessel et al. 2021): cosine of CLIP's image and text embeddings, in [-1, 1]."""
    return ClipReward(name, folder, logit_scaled=False)


@register_model_reward("pickscore", folder_arg="pickscore_path", check=check_clip_folder, serves=(REAL, TOY),
                       label="PickScore human preference, from a PickScore folder")
def pickscore(name: str, folder: Path) -> ClipReward:
    """PickScore (arXiv 2305.01569): exp(logit_scale) * cosine of its CLIP-H embeddings."""
    return ClipReward(name, folder, logit_scaled=True)
