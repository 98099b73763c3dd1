"""No toy world with a real model: rewards declare the models they serve, a real model's examples, curve prompts and
default reward come from the shipped real prompt set, the toy lessons are refused, and every command works with a
real model's defaults (tiny random SD3 at 32 px, the toy world's size, and FLUX at its 128 px)."""

from __future__ import annotations

import pytest

from workbench.cli.main import main as cli
from workbench.core.errors import WorkbenchError
from workbench.rewards import check_reward_images, reward_accepts, rewards_for
from workbench.train import TrainConfig, preset
from workbench.train.prompt_sets import real_prompts, world_prompts

SMALL = ["--group", "2", "--steps", "2", "--device", "cpu"]




def test_rewards_declare_the_models_they_serve():
    toy = ["adherence", "color_match", "shape_match", "position_match", "size_match"]
    assert all(reward_accepts(name).serves == ("toy",) for name in toy)
    assert reward_accepts("jpeg_compressibility").serves == ("toy", "real")
    assert "real" in reward_accepts("clip_score").serves and "real" in reward_accepts("pickscore").serves
    assert not set(toy) & set(rewards_for(False)) and set(toy) <= set(rewards_for(True))
    check_reward_images(["adherence"], 32, ["a red circle"], toy_world=True)
    # a 32 px real model makes images of the toy world's size: the declaration, not the size, refuses it
    with pytest.raises(WorkbenchError, match="reward 'adherence' serves the embedded model's toy world only, and this "
                                             "is a real SD3 / FLUX model; use rewards that take any image"):
        check_reward_images(["adherence"], 32, ["a red circle"], toy_world=False)


def test_a_32_px_sd3_never_gets_a_toy_reward(sd3_dir, capsys):
    args = ["attribute", "--model", str(sd3_dir), "--prompt", "a red circle", *SMALL, "--continuations", "2",
            "--chunks", "1,1", "--reward", "adherence"]
    assert cli(args) == 2
    err = capsys.readouterr().err
    assert "serves the embedded model's toy world only" in err and "continuations: " not in err  # before sampling


def test_real_examples_come_from_the_shipped_prompt_set():
    train, _ = real_prompts()
    assert set(world_prompts(False, 8)) <= set(train) and len(set(world_prompts(False, 8))) == 8
    assert world_prompts(True, 2)[0].startswith("a ")  # the toy world's scenes for the embedded model
    with pytest.raises(WorkbenchError, match="must be in 1..48 .the shipped real training prompts"):
        world_prompts(False, 49)


@pytest.mark.parametrize("model", ["sd3_dir", "flux_dir"])
def test_export_works_with_a_real_models_defaults(model, request, tmp_path, capsys):
    """The README's export command (a toy prompt, no --reward) on a real model: SD3 said "unknown word 'apple'" and
    FLUX "(128,128) (32,32)" after sampling, both from the toy `adherence` reward export defaulted to."""
    folder = request.getfixturevalue(model)
    out = tmp_path / "group.html"
    assert cli(["export", "--model", str(folder), "--prompt", "a green cross", *SMALL, "--continuations", "2",
                "--out", str(out)]) == 0, capsys.readouterr().err
    page = out.read_text()
    assert "jpeg_compressibility" in page and "a green cross" in page
    assert cli(["export", "--model", str(folder), "--prompt", "a photo of a red apple", *SMALL,
                "--continuations", "2", "--reward", "adherence", "--out", str(tmp_path / "x.html")]) == 2
    err = capsys.readouterr().err
    assert "serves the embedded model's toy world only" in err and "continuations" not in err.split("error")[0]


def test_chunks_of_a_real_model_average_over_real_prompts(sd3_dir, capsys):
    assert cli(["chunks", "--model", str(sd3_dir), "--steps", "4", "--prompts", "2", "--group", "2",
                "--device", "cpu", "--json"]) == 0
    assert '"prompts": 2' in capsys.readouterr().out


def test_the_toy_lessons_are_refused_for_a_real_model(sd3_dir, capsys):
    with pytest.raises(WorkbenchError, match="the task 'crosses' is a lesson of the embedded model's toy world"):
        TrainConfig.from_dict(preset("crosses").to_dict() | {"model": str(sd3_dir)})
    assert cli(["train", "--preset", "crosses", "--model", str(sd3_dir), "--device", "cpu", "--report-to", "none",
                "--dry-run"]) == 2
    assert "is a lesson of the embedded model's toy world" in capsys.readouterr().err


def test_the_app_offers_no_toy_world_with_a_real_model(sd3_dir, tmp_path, monkeypatch):
    from workbench.ui import learn
    from workbench.ui.layout import build_app
    from workbench.ui.state import Session
    from workbench.ui.workbench import Workbench

    wb = Workbench(model=str(sd3_dir), device="cpu", runs_root=str(tmp_path / "runs"), curve_prompts=2)
    demo = build_app(wb)
    blocks = {getattr(b, "elem_id", None): b for b in demo.blocks.values()}
    assert blocks["prompt"].value in real_prompts()[0]
    assert "SD3 / FLUX read any text" in blocks["prompt-hints"].value
    assert "adherence" not in blocks["gen-reward"].info.split("; rewards: ")[1]
    assert not blocks["learn-after-btn"].visible and blocks["train-lesson"].choices == [("none", "none")]
    assert "crosses lesson is a lesson of the embedded model's toy world" in learn.learn_after(wb, Session())[-1]
    import workbench.flow.dynamics as dynamics

    seen, curve = [], dynamics.dynamics_curve
    monkeypatch.setattr(dynamics, "dynamics_curve", lambda policy, prompts, *a, **k: seen.append(prompts) or curve(
        policy, prompts, *a, **k))
    wb.curve(2, 0.7)  # the Chunks tab's curve
    assert seen and set(seen[0]) <= set(real_prompts()[0])
    monkeypatch.setattr(learn, "LEARN", {"group": 2, "steps": 2, "continuations": 2})
    *_, session, status = list(learn.learn_walk(wb, Session()))[-1]
    assert status.startswith("✓") and session.group.prompt == learn.REAL_LEARN_PROMPT
    assert session.reward_spec == "jpeg_compressibility"
