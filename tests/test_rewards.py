"""Rewards: adherence and its attribute scores, detail/composition/JPEG rewards, specs, CLIP scores."""

from __future__ import annotations

import doctest
import json
import math

import numpy as np
import pytest
import torch
from tiny_pipelines import write_tiny_clip

from workbench.core.errors import WorkbenchError
from workbench.rewards import (
    MODEL_REWARDS,
    REWARDS,
    Accepts,
    RewardFunction,
    attributes,
    build_reward,
    check_reward_images,
    clip,
    folder_args,
    parse_reward_spec,
    pixels,
    reward_info,
    reward_names,
    rewards_for,
)
from workbench.rewards.base import REAL, TOY, register_model_reward
from workbench.toyworld.world import BACKGROUNDS, COLORS, GRID_CENTERS, SIZES, Scene, all_scenes, render, shape_mask

PROMPT = "a large red circle in the center on a white background"
SINGLE = ("color_match", "shape_match", "position_match", "size_match")


def image_of(scene: Scene) -> torch.Tensor:
    return torch.from_numpy(render(scene))[None]  # (1, 3, 32, 32)


def shifted_circle(dx: float) -> torch.Tensor:
    """The PROMPT's scene with the circle moved `dx` pixels right, (1, 3, 32, 32)."""
    alpha = shape_mask("circle", GRID_CENTERS[1] + dx, GRID_CENTERS[1], SIZES["large"])[None]
    fg = np.array(COLORS["red"], dtype=np.float32)[:, None, None] / 255
    bg = np.array(BACKGROUNDS["white"], dtype=np.float32)[:, None, None] / 255
    return torch.from_numpy((bg * (1 - alpha) + fg * alpha).astype(np.float32))[None]


def score(name: str, images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
    out = REWARDS.get(name)(images, prompts)
    assert out.shape == (len(prompts),) and out.dtype == torch.float32
    return out


def test_adherence_is_high_on_the_prompts_own_render():
    scenes = all_scenes()[::97]  # 14 scenes over every shape, colour, size, position, background
    images = torch.cat([image_of(s) for s in scenes])
    assert (score("adherence", images, [s.prompt() for s in scenes]) > 0.9).all()


def test_a_wrong_colour_costs_colour_but_not_shape():
    right = image_of(Scene("circle", "red", "large", "center", "white"))
    wrong = image_of(Scene("circle", "blue", "large", "center", "white"))
    assert score("color_match", wrong, [PROMPT]) < 0.05 < 0.9 < score("color_match", right, [PROMPT])
    assert score("shape_match", wrong, [PROMPT]) > 0.9
    assert score("adherence", wrong, [PROMPT]) < score("adherence", right, [PROMPT]) - 0.15


def test_a_wrong_shape_size_or_position_costs_that_score():
    assert score("shape_match", image_of(Scene("ring", "red", "large", "center", "white")), [PROMPT]) < 0.3
    assert score("size_match", image_of(Scene("circle", "red", "small", "center", "white")), [PROMPT]) < 0.05
    assert score("position_match", image_of(Scene("circle", "red", "large", "top left", "white")), [PROMPT]) < 0.05
    assert score("adherence", image_of(Scene("circle", "red", "large", "center", "black")), [PROMPT]) < 0.85


def test_adherence_is_continuous_in_the_position():
    exact, near, far = (score("adherence", shifted_circle(dx), [PROMPT]) for dx in (0.0, 3.0, 8.0))
    assert exact > near > far
    middle = score("position_match", shifted_circle(3.0), [PROMPT])
    assert 0.5 < middle < 0.9  # Gaussian with a 4 px scale: exp(-9 / 32) = 0.75


def test_blank_image_scores_zero_and_all_single_attribute_rewards_stay_in_unit_interval():
    blank = torch.ones(1, 3, 32, 32)
    for name in ("adherence", *SINGLE):
        assert score(name, blank, [PROMPT]) == 0
    g = torch.Generator().manual_seed(0)
    images = torch.cat([image_of(s) for s in all_scenes()[::160]] + [torch.rand(3, 3, 32, 32, generator=g)])
    prompts = ["a small green bar in the bottom right on a black background"] * len(images)
    for name in ("adherence", *SINGLE, "sharpness", "composition"):
        values = score(name, images, prompts)
        assert ((values >= 0) & (values <= 1)).all(), name


def test_unspecified_attribute_scores_one_when_an_object_is_drawn():
    image = image_of(Scene("circle", "red", "large", "center", "white"))
    assert score("color_match", image, ["a circle"]) == 1 and score("size_match", image, ["a circle"]) == 1


def test_sharpness_prefers_crisp_edges():
    images = torch.cat([image_of(s) for s in all_scenes()[::200]])
    blurred = torch.nn.functional.avg_pool2d(images, 3, stride=1, padding=1, count_include_pad=False)
    prompts = ["a circle"] * len(images)
    assert (score("sharpness", images, prompts) > score("sharpness", blurred, prompts) + 0.15).all()
    assert score("sharpness", torch.full((1, 3, 32, 32), 0.5), ["a circle"]) == 0


def test_sharpness_reads_an_overshooting_image_as_its_clamped_colours():
    """A decoder's pixels can leave [0, 1]: the edges are measured on the image as shown, clamped."""
    image = torch.ones(1, 3, 16, 16)  # white, with a red square past both ends of the range
    image[:, :, 4:12, 4:12] = torch.tensor([1.4, -0.3, -0.3])[:, None, None]
    image[:, :, 4:12, 4] = torch.tensor([1.2, 0.4, 0.4])[:, None]  # a one-pixel ramp on its left edge
    sharp = score("sharpness", image, ["a square"])
    assert 0.5 < sharp.item() < 1 and torch.equal(sharp, score("sharpness", image.clamp(0, 1), ["a square"]))


def test_a_faint_sharp_edge_is_as_sharp_as_a_strong_one():
    """|g| / C does not depend on the colours: an edge of 0.01 jumps within one pixel and scores 1."""
    image = torch.full((1, 3, 16, 16), 0.5)
    image[:, :, 4:12, 4:12] += 0.01
    assert score("sharpness", image, ["a square"]).item() == pytest.approx(1.0, abs=1e-4)


def test_sharpness_is_at_most_one_when_neighbours_straddle_the_background():
    """Black next to white on gray: one difference is twice the contrast, and the score is clamped to 1."""
    image = torch.full((1, 3, 16, 16), 0.5)
    image[:, :, 4:12, 4:8], image[:, :, 4:12, 8:12] = 0.0, 1.0
    x = image.clamp(0, 1)
    g = torch.cat([(x[..., :, 1:] - x[..., :, :-1]).norm(dim=1).flatten(1),
                   (x[..., 1:, :] - x[..., :-1, :]).norm(dim=1).flatten(1)], dim=1)
    unclamped = (g**2).sum() / (g.sum() * 0.5 * math.sqrt(3))  # contrast: gray to black or white
    assert unclamped > 1.05 and score("sharpness", image, ["a square"]).item() == 1.0


def test_the_background_is_the_median_of_the_border_pixels_of_the_clamped_image():
    from workbench.rewards.pixels import _background_and_distance

    image = torch.rand(2, 3, 7, 9, generator=torch.Generator().manual_seed(0)) * 2 - 0.5  # (B, 3, H, W) past [0, 1]
    x = image.clamp(0, 1)
    border = torch.zeros(7, 9, dtype=torch.bool)
    border[0], border[-1], border[:, 0], border[:, -1] = True, True, True, True  # 28 pixels
    expected = x[:, :, border].median(dim=2).values  # (B, 3)
    background, distance = _background_and_distance(image)
    assert torch.equal(background, expected)
    assert torch.allclose(distance, (x - expected[:, :, None, None]).norm(dim=1))


def test_composition_penalises_a_noisy_background_and_extra_blobs():
    image = image_of(Scene("ring", "green", "small", "top left", "gray"))
    noise = 0.05 * torch.randn(image.shape, generator=torch.Generator().manual_seed(0))
    assert score("composition", image, ["a ring"]) > 0.99
    assert score("composition", (image + noise).clamp(0, 1), ["a ring"]) < 0.5
    two = image.clone()
    two[:, :, 20:28, 20:28] = torch.tensor([1.0, 0.0, 0.0])[:, None, None]  # a second 64-pixel blob
    assert 0.3 < score("composition", two, ["a ring"]) < 0.7


def test_composition_by_hand():
    """clean = exp(-m / 2s^2), s = 0.05, m the mean squared distance to the background over the pixels away from
    every blob (not within one pixel of one); times the largest blob's share of the blob pixels."""
    def haze(delta):  # white, a red 4x4 blob in the middle, rows 2-5 x cols 2-29 of the blue channel at 1 - delta
        x = torch.ones(3, 32, 32)
        x[:, 14:18, 14:18] = torch.tensor([1.0, 0.0, 0.0])[:, None, None]
        x[2, 2:6, 2:30] = 1 - delta
        return x
    # Red border (the background), a white inside (one blob) but for the corner's 2x2: pixel (0, 0) is the only
    # one away from the blob, at distance 0.1 from red.
    inside = torch.tensor([1.0, 0.0, 0.0])[:, None, None].repeat(1, 32, 32)
    inside[:, 1:31, 1:31] = 1.0
    inside[:, 1, 1] = torch.tensor([1.0, 0.0, 0.0])
    inside[1, 0, 0] = 0.1
    # A pixel at exactly the blob threshold (0.3 from white, as float32) is background, not a second blob.
    edge = haze(0.0)
    edge[0, 2, 2] = 0.7
    images = torch.stack([haze(0.05), haze(0.125), inside, edge])
    away = 32 * 32 - 6 * 6  # the blob's 4x4 and the ring of pixels next to it are not away
    mean_square = torch.tensor([0.05**2 * 112 / away, 0.125**2 * 112 / away, 0.1**2 / 1, 0.3**2 / away])
    expected = torch.exp(-mean_square / (2 * 0.05**2))  # every image has a single blob
    assert torch.allclose(pixels.composition(images, [""] * 4), expected.float(), rtol=1e-5)
    assert expected[2] == pytest.approx(math.exp(-2))


def test_jpeg_size_grows_with_noise_as_in_ddpo():
    flat = torch.full((1, 3, 32, 32), 0.5)
    noise = torch.rand(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    images, prompts = torch.cat([flat, noise]), ["a circle"] * 2
    size = score("jpeg_incompressibility", images, prompts)
    assert size[1] > size[0] + 0.5
    assert torch.equal(score("jpeg_compressibility", images, prompts), -size)


def test_reward_docstring_examples_hold():
    results = [doctest.testmod(module, optionflags=doctest.ELLIPSIS) for module in (attributes, pixels, clip)]
    assert sum(r.attempted for r in results) >= 16 and sum(r.failed for r in results) == 0


def test_parse_reward_spec():
    assert parse_reward_spec("adherence:1,sharpness:0.5") == {"adherence": 1.0, "sharpness": 0.5}
    assert parse_reward_spec(" adherence , jpeg_compressibility : -2 ") == {"adherence": 1.0,
                                                                          "jpeg_compressibility": -2.0}
    assert {"adherence", "composition", "clip_score", "pickscore"} <= set(reward_names())


@pytest.mark.parametrize("spec,needle", [
    ("", "empty"), ("  ", "empty"), ("adherence,,sharpness", "empty entry"),
    ("beauty:1", "unknown reward 'beauty'; valid rewards: adherence"),
    ("adherence:abc", "'abc' of reward 'adherence' is not a finite number"),
    ("adherence:nan", "not a finite number"), ("adherence:", "not a finite number"),
    ("adherence:1,adherence:2", "names 'adherence' twice"),
])
def test_parse_reward_spec_errors(spec, needle):
    with pytest.raises(WorkbenchError, match=needle):
        parse_reward_spec(spec)


def test_reward_function_is_the_weighted_sum_of_its_components():
    reward = build_reward("adherence:2,sharpness:-0.5,jpeg_incompressibility:0.25")
    assert reward.names == ["adherence", "sharpness", "jpeg_incompressibility"]
    images = torch.cat([image_of(Scene("circle", "red", "large", "center", "white")), shifted_circle(5.0),
                        torch.rand(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))])
    prompts = [PROMPT] * 3
    parts = reward.components(images, prompts)
    expected = 2 * parts["adherence"] - 0.5 * parts["sharpness"] + 0.25 * parts["jpeg_incompressibility"]
    assert torch.allclose(reward(images, prompts), expected)
    assert torch.equal(parts["sharpness"], REWARDS.get("sharpness")(images, prompts))


def test_non_finite_scores_raise_naming_reward_and_prompt():
    def half_broken(images, prompts):
        return torch.tensor([0.5, float("nan")])

    reward = RewardFunction({"half_broken": 1.0}, {"half_broken": half_broken})
    with pytest.raises(WorkbenchError, match=r"reward 'half_broken' is nan for image 1 \(prompt 'a blue ring'\)"):
        reward(torch.zeros(2, 3, 32, 32), ["a red circle", "a blue ring"])
    images = image_of(Scene("circle", "red", "large", "center", "white")).repeat(2, 1, 1, 1)
    images[1, 0, 3, 3] = float("nan")
    assert torch.isnan(REWARDS.get("sharpness")(images, ["a red circle"] * 2)[1])
    with pytest.raises(WorkbenchError, match=r"image 1 \(prompt 'a blue ring'\) contains NaN"):
        build_reward("sharpness")(images, ["a red circle", "a blue ring"])
    with pytest.raises(WorkbenchError, match="2 prompts"):
        build_reward("sharpness")(images[:1], ["a red circle", "a blue ring"])


def test_clip_score_and_pickscore_load_a_local_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    write_tiny_clip(tmp_path)
    path = str(tmp_path / "clip")
    from transformers import CLIPModel

    loads, load = [], CLIPModel.from_pretrained
    monkeypatch.setattr(CLIPModel, "from_pretrained",
                        lambda folder, **kw: loads.append(str(folder)) or load(folder, **kw))
    reward = build_reward("clip_score,pickscore:0.1", clip_path=path, pickscore_path=path)
    images = torch.cat([image_of(Scene("circle", "red", "large", "center", "white")),
                        image_of(Scene("ring", "blue", "large", "center", "white"))])
    prompts = ["a large red circle in the center", "a blue ring on a white background"]
    parts = reward.components(images, prompts)
    clip, pick = parts["clip_score"], parts["pickscore"]
    assert clip.shape == (2,) and torch.isfinite(clip).all() and (clip.abs() <= 1).all()
    scale = load(path, local_files_only=True).logit_scale.exp().detach()
    assert torch.allclose(pick, scale * clip, atol=1e-5)  # PickScore = exp(logit_scale) * cosine
    swapped = reward.components(images, prompts[::-1])["clip_score"]
    assert not torch.allclose(swapped, clip)  # the text matters
    assert loads == [path, path]  # one load per model reward, none on the later calls


def test_clip_rewards_explain_a_missing_folder(tmp_path):
    with pytest.raises(WorkbenchError, match="'clip_score' needs a local CLIP model folder; pass clip_path="):
        build_reward("adherence,clip_score")
    with pytest.raises(WorkbenchError, match="pickscore_path folder .* does not exist; pass pickscore_path="):
        build_reward("pickscore", pickscore_path=str(tmp_path / "nope"))
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(WorkbenchError, match="has no model.safetensors"):
        build_reward("clip_score", clip_path=str(tmp_path))
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(WorkbenchError, match=r"has no tokenizer.json \(or vocab.json and merges.txt\)"):
        build_reward("clip_score", clip_path=str(tmp_path))


def pil_bicubic(images: torch.Tensor, size: int) -> torch.Tensor:
    """PIL's bicubic resize of (1, 3, H, W) in [0, 1], the one CLIPImageProcessor applies, as (3, size, size)."""
    from PIL import Image

    array = (images[0].permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)  # (H, W, 3)
    resized = Image.fromarray(array).resize((size, size), Image.BICUBIC)
    return torch.from_numpy(np.array(resized)).permute(2, 0, 1).float() / 255  # (3, size, size)


def test_clip_pixels_resize_as_pil_does_for_clips_own_preprocessor():
    # mean 0 and std 1 leave the resized pixels themselves; PIL works in 8 bits, so within 2/255 of it
    texture = (torch.rand(1, 3, 96, 96, generator=torch.Generator().manual_seed(0)) * 255).round() / 255
    step = torch.zeros(1, 3, 96, 96)
    step[..., 48:] = 1  # a black-to-white edge: the cubic kernel's negative lobes overshoot it by about 0.012
    for images in (texture, step):
        resized = clip.clip_pixels(images, 32, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))[0]  # (3, 32, 32)
        assert torch.allclose(resized, pil_bicubic(images, 32), atol=2 / 255)
    assert resized.min() == 0 and resized.max() == 1  # clamped to [0, 1] as PIL's 8 bits are


def test_clip_pixels_normalise_each_channel_by_the_given_mean_and_std():
    grey = torch.full((1, 3, 8, 8), 0.5)
    out = clip.clip_pixels(grey, 4, (0.5, 0.25, 0.0), (0.25, 0.5, 1.0))  # (1, 3, 4, 4)
    # (0.5 - 0.5) / 0.25 = 0, (0.5 - 0.25) / 0.5 = 0.5, (0.5 - 0) / 1 = 0.5
    assert torch.allclose(out, torch.tensor([0.0, 0.5, 0.5])[None, :, None, None].expand(1, 3, 4, 4), atol=1e-6)


def test_clip_pixels_stay_on_the_images_device():
    # a meta tensor stands in for a GPU: a mean or std left on the CPU could not be subtracted from it
    out = clip.clip_pixels(torch.empty(2, 3, 64, 64, device="meta"), 32, clip.CLIP_MEAN, clip.CLIP_STD)
    assert out.device.type == "meta" and out.shape == (2, 3, 32, 32)


def test_largest_blob_fraction_by_hand():
    masks = torch.zeros(4, 5, 5, dtype=torch.bool)
    masks[0, 0, 0] = masks[0, 4, 4] = True  # two one-pixel blobs, the corner one labelled 1: 1 / 2
    masks[1, 0, 0] = True  # the corner pixel alone: 1 / 1
    masks[2, 1:3, 1:3] = masks[2, 3, 3] = True  # a 2x2 square touching a pixel diagonally, one blob: 5 / 5
    masks[2, 0, 4] = True  # and a pixel apart: 5 / 6
    assert torch.allclose(pixels._largest_blob_fraction(masks), torch.tensor([0.5, 1.0, 5 / 6, 0.0]))  # empty: 0


def test_a_model_reward_registered_by_one_decorator_is_checked_loaded_and_listed(tmp_path):
    calls = []

    def check(name, path):
        calls.append(("check", name, path))
        return tmp_path

    @register_model_reward("brightness_model", folder_arg="brightness_path", check=check, serves=(TOY, REAL),
                           label="mean pixel value, from a folder")
    def load(name, folder):
        calls.append(("load", name, folder))
        return lambda images, prompts: images.mean(dim=(1, 2, 3))

    @register_model_reward("folder_model", folder_arg="folder_model_path", check=check)
    def load_plain(name, folder):
        return lambda images, prompts: images.mean(dim=(1, 2, 3))

    try:
        assert folder_args()["brightness_model"] == "brightness_path"
        assert reward_info("brightness_model").label == "mean pixel value, from a folder"
        assert reward_info("folder_model").label == "a model from folder_model_path"  # no label: its setting
        assert "brightness_model" in rewards_for(True) and "brightness_model" in rewards_for(False)
        assert "folder_model" not in rewards_for(True) and "folder_model" in rewards_for(False)  # REAL by default
        reward = build_reward("brightness_model", brightness_path="models/b")
        assert calls == [("check", "brightness_model", "models/b"), ("load", "brightness_model", tmp_path)]
        assert reward(torch.full((1, 3, 4, 4), 0.25), ["a circle"]) == 0.25
        with pytest.raises(WorkbenchError, match=r"serves must name some of toy, real, got \('gpu',\)"):
            register_model_reward("bad_model", folder_arg="bad_path", check=check, serves=("gpu",))(load)
        assert "bad_model" not in MODEL_REWARDS
    finally:
        MODEL_REWARDS.unregister("brightness_model")
        MODEL_REWARDS.unregister("folder_model")


def test_a_reward_for_another_image_size_is_refused_naming_what_it_scores():
    any_image = "use rewards that take any image ("
    with pytest.raises(WorkbenchError, match=r"reward 'size_match' scores 32x32 px images of the toy world's prompts, "
                                             r"but this model makes 64x64 px images; " + any_image.replace("(", r"\(")):
        check_reward_images(["size_match"], 64)
    assert Accepts(size=128).describe() == "128x128 px images"
    assert Accepts().describe() == "any size"


def test_clip_rewards_normalise_with_the_folders_preprocessor_config(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    write_tiny_clip(tmp_path)
    folder = tmp_path / "clip"
    from transformers import CLIPModel, CLIPTokenizer

    model = CLIPModel.from_pretrained(folder).eval()
    text = CLIPTokenizer.from_pretrained(folder)(["a red circle"], return_tensors="pt")
    images = image_of(Scene("circle", "red", "large", "center", "white"))

    def cosine(mean, std):  # CLIPScore worked with the model itself, on pixels normalised by (mean, std)
        with torch.no_grad():
            out = model(**text, pixel_values=clip.clip_pixels(images, 30, mean, std))
        return (out.image_embeds * out.text_embeds).sum(dim=-1)

    half = (0.5, 0.5, 0.5)
    configs = [(None, clip.CLIP_MEAN, clip.CLIP_STD),  # no preprocessor_config.json: OpenAI CLIP's values
               ({"image_mean": half, "image_std": half}, half, half),
               ({"image_mean": half}, half, clip.CLIP_STD),  # a value it omits is CLIP's
               ({"image_std": half}, clip.CLIP_MEAN, half)]
    scores = []
    for config, mean, std in configs:
        (folder / "preprocessor_config.json").unlink(missing_ok=True)
        if config is not None:
            (folder / "preprocessor_config.json").write_text(json.dumps(config))
        scores.append(clip.ClipReward("clip_score", folder, logit_scaled=False)(images, ["a red circle"]))
        assert torch.allclose(scores[-1], cosine(mean, std), atol=1e-6)
    assert not torch.allclose(scores[0], scores[1], atol=1e-5)  # the two normalisations do score differently


def test_a_clip_folder_names_the_first_file_it_lacks(tmp_path):
    def message(*files: str) -> str:
        folder = tmp_path / "_".join(f.split(".")[0] for f in files)
        folder.mkdir()
        for name in files:
            (folder / name).write_text("{}")
        try:
            clip.check_clip_folder("clip_score", str(folder))
        except WorkbenchError as err:
            return str(err).split(" has no ", 1)[1].split(";")[0]
        return "nothing"

    assert message("model.safetensors", "tokenizer.json") == "config.json"
    assert message("config.json", "tokenizer.json") == ("model.safetensors or model.safetensors.index.json or "
                                                        "pytorch_model.bin or pytorch_model.bin.index.json")
    assert message("config.json", "pytorch_model.bin", "vocab.json") == "tokenizer.json (or vocab.json and merges.txt)"
    assert message("config.json", "pytorch_model.bin", "vocab.json", "merges.txt") == "nothing"  # a slow tokenizer
