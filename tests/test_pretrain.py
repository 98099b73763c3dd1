"""Pretraining smoke test and the shipped weights."""

import json

import pytest
import torch

from workbench.core.errors import WorkbenchError
from workbench.flow.sampler import ode_sample
from workbench.models.embedded import DEFAULT_WEIGHTS, X0_MIN_SIGMA, EmbeddedConfig, build_embedded, load_embedded
from workbench.models.pretrain import PretrainConfig, main, pretrain
from workbench.toyworld.perception import check
from workbench.toyworld.world import Scene


def test_a_few_steps_lower_the_loss_and_save_loadable_weights(tmp_path):
    # 40 steps of 16 images: the loss falls to 0.15 of its first 10 steps (60 of 32: to 0.14), 4x less work
    cfg = PretrainConfig(steps=40, batch_size=16, warmup=10, variants=1, eval_prompts=4, eval_steps=4)
    record = pretrain(cfg, tmp_path / "m", log=lambda *_: None)
    loss = record["loss_every_10"]
    assert len(loss) == 4 and loss[-1] < 0.6 * loss[0]
    model = load_embedded(tmp_path / "m")
    assert model.config.training["heldout_accuracy"]["prompts"] == 4
    assert not any(p.requires_grad for p in model.text_encoder.parameters())


def test_pretraining_is_reproducible_from_the_seed(tmp_path):
    cfg = PretrainConfig(steps=3, batch_size=8, warmup=1, variants=1, eval_prompts=0)
    a = pretrain(cfg, tmp_path / "a", log=lambda *_: None)
    b = pretrain(cfg, tmp_path / "b", log=lambda *_: None)
    assert a["loss_every_10"] == b["loss_every_10"]
    wa, wb = load_embedded(tmp_path / "a"), load_embedded(tmp_path / "b")
    for pa, pb in zip(wa.transformer.parameters(), wb.transformer.parameters()):
        assert torch.equal(pa, pb)


@pytest.mark.parametrize("args,needle", [(["--steps", "0"], "--steps"), (["--eval-prompts", "500"], "eval-prompts")])
def test_bad_pretrain_arguments(args, needle, capsys):
    assert main(args + ["--out", "/tmp/unused"]) == 2
    assert needle in capsys.readouterr().err


def test_shipped_weights_are_small_and_load():
    files = list(DEFAULT_WEIGHTS.iterdir())
    assert sum(f.stat().st_size for f in files) < 20e6
    model = load_embedded()  # its load time is measured by `python -m workbench bench load`, not asserted here
    parts = [*model.transformer.parameters(), *model.text_encoder.parameters()]
    assert parts and all(bool(torch.isfinite(p).all()) for p in parts)
    record = json.loads((DEFAULT_WEIGHTS / "config.json").read_text())["training"]
    assert record["heldout_accuracy"]["prompts"] == 200


def test_shipped_model_draws_the_right_colour(shipped_policy):
    scenes = [Scene("circle", "red", "large", "center", "white"), Scene("ring", "blue", "large", "top left", "black"),
              Scene("bar", "green", "large", "bottom right", "gray"),
              Scene("cross", "yellow", "large", "middle left", "black"),
              Scene("circle", "purple", "large", "top right", "white"),
              Scene("ring", "orange", "large", "center", "gray")]
    images = ode_sample(shipped_policy, [s.prompt() for s in scenes], steps=16, seed=0)
    hits = [check(img, s)["color"] for img, s in zip(images, scenes)]
    assert sum(hits) >= 5, hits


@pytest.mark.parametrize("prediction", ["x0", "velocity"])
def test_denoise_turns_the_transformer_output_into_a_velocity(prediction):
    model = build_embedded(EmbeddedConfig(prediction=prediction))
    x, sigma = torch.randn(3, 3, 32, 32), torch.tensor([1.0, 0.5, 0.01])
    embeds, pooled = model.text_encoder(model.tokenizer(["a red circle"] * 3))
    with torch.no_grad():
        out = model.transformer(hidden_states=x, encoder_hidden_states=embeds, pooled_projections=pooled,
                                timestep=sigma * 1000.0, return_dict=False)[0]
        v = model.denoise(x, sigma, embeds, pooled)
    if prediction == "velocity":
        assert torch.equal(v, out)
    else:  # x_t = (1 - t) x0 + t eps  =>  v = eps - x0 = (x_t - x0) / t, t clamped from below
        t = sigma.clamp(min=X0_MIN_SIGMA)[:, None, None, None]
        torch.testing.assert_close(v, (x - out) / t)
        torch.testing.assert_close(x[:2] - sigma[:2, None, None, None] * v[:2], out[:2])  # x0 recovered exactly
    with pytest.raises(ValueError, match="prediction"):
        EmbeddedConfig(prediction="eps")


def test_missing_weights_folder_is_a_clear_error(tmp_path):
    with pytest.raises(WorkbenchError, match="missing"):
        load_embedded(tmp_path)
