"""A real (non-32 px) model end to end on CPU: a tiny random FLUX pipeline at its default 128 px with the defaults
of a real model (any-size reward, the shipped real prompts): sample, attribute, train, resume, the app's Generate.
A reward that cannot score the images is refused before any sampling, naming the reward."""

from __future__ import annotations

import json

import pytest
import torch

from workbench.cli.main import main as cli
from workbench.core.errors import WorkbenchError
from workbench.rewards import build_reward, check_reward_images, default_reward, reward_accepts
from workbench.train import TrainConfig, Trainer
from workbench.train.prompt_sets import real_prompts
from workbench.train.store import RunStore

PX = 128  # the tiny FLUX pipeline's default image side (128 latents x VAE 1): 4096 image tokens, as FLUX at 1024 px
SIDE = 64  # where a test's subject is not the default size: 1024 tokens (attention was 3.7 of a 6.6 s training run)
SMALL = dict(group=2, steps=2, chunks="1,1", prompts_per_iteration=1, eval_prompts=2, report_to="none",
             device="cpu", lora_rank=4)



def test_rewards_declare_what_they_accept():
    assert reward_accepts("adherence").size == 32 and reward_accepts("adherence").toy_prompts
    assert reward_accepts("sharpness").size is None and reward_accepts("clip_score").size is None
    assert (default_reward(True), default_reward(False)) == ("adherence", "jpeg_compressibility")
    check_reward_images(["adherence"], 32, ["a red circle"])
    with pytest.raises(WorkbenchError, match=r"reward 'size_match' scores 32x32 px .* makes 128x128 px images; "
                                             r"use rewards that take any image \(clip_score, composition"):
        check_reward_images(["sharpness", "size_match"], PX)
    with pytest.raises(WorkbenchError, match="reward 'adherence' reads the toy world's prompts, and 'a photo of a "
                                             "cat' is not one"):
        build_reward("adherence").check_images(32, ["a photo of a cat"])


def test_real_prompt_set_splits_train_and_held_out():
    train, held_out = real_prompts()
    assert (len(train), len(held_out)) == (48, 16) and not set(train) & set(held_out)
    config = TrainConfig(model=None)
    assert config.prompt_pool() != train  # the embedded model keeps the toy world's scenes


def test_flux_sample_and_attribute_with_the_defaults(flux_dir, tmp_path, capsys):
    assert cli(["sample", "--model", str(flux_dir), "--device", "cpu", "--prompt", "a photo of a cat", "--num", "2",
                "--steps", "2", "--out", str(tmp_path / "grid.png")]) == 0
    args = ["attribute", "--model", str(flux_dir), "--device", "cpu", "--prompt", "a photo of a cat", "--group", "2",
            "--steps", "2", "--continuations", "2", "--chunks", "1,1", "--json"]
    capsys.readouterr()
    assert cli(args) == 0
    assert json.loads(capsys.readouterr().out)["step_determined"] is not None
    assert cli([*args, "--reward", "adherence"]) == 2
    err = capsys.readouterr().err
    assert "reward 'adherence' serves the embedded model's toy world only" in err  # any size: the model kind refuses
    assert "continuations: " not in err  # refused before sampling


def test_flux_train_resume_and_refusal(flux_dir, tmp_path):
    config = TrainConfig(model=str(flux_dir), iterations=1, kl_beta=0.01, resolution=SIDE, max_sequence_length=16,
                         **SMALL)
    assert config.reward is None and config.prompt_pool() == real_prompts()[0] and config.checkpointing
    summary = Trainer(config, tmp_path / "run").run()
    assert summary.state == "finished" and summary.last_reward_mean is not None
    metrics = RunStore(tmp_path / "run").metrics()
    assert "eval/jpeg_compressibility/mean" in metrics[0] and "reward/mean" in metrics[-1]
    again = Trainer.resume(tmp_path / "run", iterations=2)
    assert again.policy.image_size == SIDE  # the run's resolution, not the model's default, comes back with it
    assert again.policy.max_sequence_length == 16  # and its T5 tokens (FLUX's default 512)
    assert again.run().iterations == 2
    bad = TrainConfig(model=str(flux_dir), iterations=1, reward="adherence", resolution=SIDE, **SMALL)
    with pytest.raises(WorkbenchError, match="reward 'adherence' serves the embedded model's toy world only"):
        Trainer(bad, tmp_path / "bad")
    assert not (tmp_path / "bad" / "metrics.jsonl").exists()


def test_flux_app_generate_uses_the_model_default(flux_dir, tmp_path):
    from workbench.ui import handlers
    from workbench.ui.state import Session
    from workbench.ui.workbench import Workbench

    wb = Workbench(model=str(flux_dir), device="cpu", runs_root=str(tmp_path / "runs"))
    out = handlers.generate(wb, "a photo of a cat", 2, 2, 0.7, 0, "", Session())
    assert out[-1].startswith("✓") and len(out[0]) == 2 and out[5].reward_spec == "jpeg_compressibility"
    assert "scored with `jpeg_compressibility`" in out[-1]
    assert out[5].group.images.shape[-1] == PX
    refused = handlers.generate(wb, "a photo of a cat", 2, 2, 0.7, 0, "adherence", Session())
    assert "reward 'adherence' serves the embedded model's toy world only" in refused[-1]
    assert torch.is_tensor(out[5].rewards)


def test_bench_takes_sizes_and_runs_on_a_real_model(flux_dir, capsys):
    args = ["--model", str(flux_dir), "--device", "cpu", "--group", "2", "--steps", "2", "--repeats", "1",
            "--resolution", str(SIDE)]
    assert cli(["bench", "sampling", *args]) == 0
    out = capsys.readouterr()
    assert "sampling  G=2 T=2" in out.out and "sampling G=2 T=2, repeats: 1/1" in out.err
    assert cli(["bench", "credit", *args, "--continuations", "2"]) == 0
    assert "credit    G=2 T=2 M=2" in capsys.readouterr().out


def test_app_refuses_a_device_it_lacks_at_start(capsys, monkeypatch):
    import app

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as stop:
        app.parse_args(["--device", "cuda"])
    assert stop.value.code == 2
    assert "device 'cuda' is not available" in capsys.readouterr().err
    assert app.parse_args(["--device", "cpu", "--dtype", "bfloat16", "--resolution", "256"]).resolution == 256


def test_app_releases_its_models_while_a_fine_tune_holds_the_gpu(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from workbench.ui import run_handlers as rh
    from workbench.ui.state import Session
    from workbench.ui.workbench import Workbench

    wb = Workbench(device="cpu", runs_root=str(tmp_path / "runs"))
    wb.policy()
    monkeypatch.setattr(wb.jobs, "start", lambda config: SimpleNamespace(run_id="r1"))
    monkeypatch.setattr("workbench.core.budget.free_bytes", lambda device: None)  # "cuda" below, on a CPU machine
    form = ("chunk_grpo", "", "2,3,4,7", 3e-5, 2, 2, 16, 0, "flow_grpo", "", "none")
    rh.start_run(wb, *form, Session())
    assert wb._policies  # on the CPU the app keeps its model (host memory is shared anyway)
    wb.device = "cuda"
    rh.start_run(wb, *form, Session())
    assert not wb._policies and not wb._curves  # loaded again on next use
