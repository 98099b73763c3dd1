"""Pretraining smoke test and the shipped weights."""

import json

import pytest
import torch

from workbench.embedded import DEFAULT_WEIGHTS, load_embedded
from workbench.errors import WorkbenchError
from workbench.perception import check
from workbench.pretrain import PretrainConfig, main, pretrain
from workbench.sampler import ode_sample
from workbench.world import Scene


def test_a_few_steps_lower_the_loss_and_save_loadable_weights(tmp_path):
    cfg = PretrainConfig(steps=60, batch_size=32, warmup=10, variants=1, eval_prompts=4, eval_steps=4)
    record = pretrain(cfg, tmp_path / "m", log=lambda *_: None)
    loss = record["loss_every_10"]
    assert len(loss) == 6 and loss[-1] < 0.6 * loss[0]
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


def test_shipped_weights_are_small_and_load_fast():
    import time

    files = list(DEFAULT_WEIGHTS.iterdir())
    assert sum(f.stat().st_size for f in files) < 20e6
    start = time.perf_counter()
    load_embedded()
    assert time.perf_counter() - start < 10  # the 2 s target is measured by the benchmark; this guards regressions
    record = json.loads((DEFAULT_WEIGHTS / "config.json").read_text())["training"]
    assert record["heldout_accuracy"]["prompts"] == 200


def test_shipped_model_draws_the_right_colour(shipped_policy):
    scenes = [Scene("circle", "red", "large", "center", "white"), Scene("square", "blue", "large", "top left", "black"),
              Scene("diamond", "green", "large", "bottom right", "gray"),
              Scene("triangle", "yellow", "large", "middle left", "black"),
              Scene("circle", "purple", "large", "top right", "white"), Scene("square", "orange", "large", "center", "gray")]
    images = ode_sample(shipped_policy, [s.prompt() for s in scenes], steps=16, seed=0)
    hits = [check(img, s)["color"] for img, s in zip(images, scenes)]
    assert sum(hits) >= 5, hits


def test_missing_weights_folder_is_a_clear_error(tmp_path):
    with pytest.raises(WorkbenchError, match="missing"):
        load_embedded(tmp_path)
