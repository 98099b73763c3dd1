import numpy as np
import pytest

from workbench.core.errors import WorkbenchError
from workbench.toyworld.perception import check, detect
from workbench.toyworld.world import (
    BACKGROUNDS,
    COLORS,
    POSITIONS,
    SHAPES,
    SIZES,
    VOCABULARY,
    Scene,
    all_scenes,
    parse_prompt,
    render,
    shape_mask,
    split_scenes,
)


def test_world_has_required_variety():
    assert len(SHAPES) >= 4 and len(COLORS) >= 6 and len(SIZES) == 2 and len(POSITIONS) == 9
    assert len(all_scenes()) == len(SHAPES) * len(COLORS) * 2 * 9 * len(BACKGROUNDS)


def test_prompt_round_trip_for_every_scene():
    for scene in all_scenes():
        assert parse_prompt(scene.prompt()) == scene


def test_parse_example_prompt():
    s = parse_prompt("a large red circle in the top left on a white background")
    assert s == Scene("circle", "red", "large", "top left", "white")
    assert parse_prompt("A blue ring, center.") == Scene(shape="ring", color="blue", position="center")
    assert parse_prompt("a green cross in the middle middle").position == "center"


@pytest.mark.parametrize("prompt,needle", [
    ("a red dog", "unknown word 'dog'"),
    ("", "empty"),
    ("   ", "empty"),
    ("a red blue circle", "two colors"),
    ("a red circle in the top", "must be followed by"),
    ("a large red", "names no shape"),
])
def test_parse_errors(prompt, needle):
    with pytest.raises(WorkbenchError, match=needle):
        parse_prompt(prompt)


def test_unknown_word_error_lists_vocabulary():
    with pytest.raises(WorkbenchError) as err:
        parse_prompt("a purple hexagon")
    assert "hexagon" in str(err.value) and all(w in str(err.value) for w in VOCABULARY)


def test_render_shape_and_range():
    img = render(Scene("bar", "yellow", "small", "bottom right", "black"))
    assert img.shape == (3, 32, 32) and img.dtype == np.float32
    assert 0 <= img.min() and img.max() <= 1
    assert np.allclose(img[:, 0, 0], np.array(BACKGROUNDS["black"]) / 255)  # corner far from the object


def test_render_is_deterministic_and_jitter_differs():
    scene = Scene("circle", "red", "large", "center", "white")
    assert np.array_equal(render(scene), render(scene))
    rng = np.random.default_rng(1)
    assert not np.array_equal(render(scene), render(scene, rng))


@pytest.mark.parametrize("shape", SHAPES)
def test_a_shape_mask_is_the_whole_grids_computation(shape):
    """shape_mask computes only the shape's bounding box: the same values as every sub-pixel of the image,
    element by element, for centres inside, at and beyond the edges and sizes from sub-pixel to over the image."""
    from workbench.toyworld import world

    y, x = world._subpixel_grid(32, 4)
    for cx in np.linspace(-4.0, 36.0, 17):
        for cy in (-2.3, 0.0, 7.5, 15.9, 31.99, 35.0):
            for half in (0.2, 3.3, 5.0, 7.5, 12.0, 40.0):
                whole = world._inside(shape, x - cx, y - cy, half).reshape(32, 4, 32, 4).mean(axis=(1, 3))
                assert np.array_equal(shape_mask(shape, cx, cy, half), whole), (cx, cy, half)
    with pytest.raises(WorkbenchError, match="unknown shape 'star'"):
        shape_mask("star", 16.0, 16.0, 5.0)


def test_render_rejects_incomplete_scene():
    with pytest.raises(WorkbenchError, match="incomplete"):
        render(Scene(shape="circle"))


def test_checks_recover_every_canonical_and_jittered_scene():
    rng = np.random.default_rng(0)
    scenes = all_scenes()[::7]  # 186 scenes spread over every attribute
    for scene in scenes:
        for image in (render(scene), render(scene, rng)):
            assert detect(image).scene() == scene


def test_checks_tolerate_pixel_noise():
    """Samples of a tiny model carry some speckle; the checks must still read the object."""
    rng = np.random.default_rng(0)
    scenes = all_scenes()[::11]
    noisy = [np.clip(render(s, rng) + rng.normal(0, 0.05, (3, 32, 32)), 0, 1) for s in scenes]
    hits = [detect(img).scene() == s for img, s in zip(noisy, scenes)]
    assert np.mean(hits) >= 0.95, np.mean(hits)


def test_check_reports_wrong_attributes():
    image = render(Scene("ring", "blue", "large", "top left", "gray"))
    result = check(image, Scene("circle", "blue", "large", "bottom right", "gray"))
    assert result == {"shape": False, "color": True, "size": True, "position": False, "background": True}


def test_blank_image_has_no_object():
    det = detect(np.full((3, 32, 32), 0.5, dtype=np.float32))
    assert not det.found and det.shape is None
    assert check(np.full((3, 32, 32), 0.5, dtype=np.float32), Scene(shape="circle")) == {"shape": False}


def test_split_is_disjoint_and_stable():
    train, held = split_scenes()
    assert len(held) == 200 and not set(train) & set(held)
    assert split_scenes()[1] == held
