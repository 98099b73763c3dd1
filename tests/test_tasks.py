"""Named tasks: the crosses lesson's prompt lists and its success measure, and the evaluation that reports it."""

from __future__ import annotations

from dataclasses import replace

import torch

from workbench.models.embedded import EmbeddedPolicy, build_embedded
from workbench.toyworld.world import BACKGROUNDS, COLORS, POSITIONS, SIZES, Scene, parse_prompt, render, split_scenes
from workbench.train import TrainConfig, Trainer, preset
from workbench.train.store import RunStore
from workbench.train.tasks import TASKS


def test_crosses_prompt_lists_are_disjoint_and_cover_every_attribute():
    task = TASKS.get("crosses")()
    assert not set(task.train_prompts) & set(task.eval_prompts)
    heldout = {s.prompt() for s in split_scenes()[1]}
    assert set(task.eval_prompts) <= heldout and not set(task.train_prompts) & heldout  # never seen in pretraining
    for prompts in (task.train_prompts, task.eval_prompts):
        scenes = [parse_prompt(p) for p in prompts]
        assert {s.shape for s in scenes} == {"cross"}
        assert {s.color for s in scenes} == set(COLORS) and {s.size for s in scenes} == set(SIZES)
        assert {s.position for s in scenes} == set(POSITIONS) and {s.background for s in scenes} == set(BACKGROUNDS)


def test_a_rendered_cross_counts_as_right_and_a_rendered_ring_as_wrong():
    metrics = TASKS.get("crosses")().metrics
    cross, ring = (torch.from_numpy(render(Scene(shape, "red", "large", "center", "white")))[None]
                   for shape in ("cross", "ring"))
    assert metrics(cross, ["a large red cross"]) == {"cross_accuracy": 1.0}
    assert metrics(ring, ["a large red cross"]) == {"cross_accuracy": 0.0}
    assert metrics(torch.cat([cross, ring, cross]), ["c"] * 3)["cross_accuracy"] == 2 / 3


def test_a_short_crosses_run_writes_the_evaluation_rows_and_the_before_after_grid(tmp_path):
    config = TrainConfig(task="crosses", eval_cfg=True, group=2, steps=3, chunks="1,2", prompts_per_iteration=2,
                         eval_prompts=4, eval_every=1, iterations=2, sample_every=10, report_to="none")
    policy = EmbeddedPolicy(build_embedded(seed=0))
    Trainer(config, tmp_path / "run", policy).run()
    info = RunStore(tmp_path / "run").info()
    evals = [r for r in info.metrics if "eval/cross_accuracy" in r]
    assert [r["iteration"] for r in evals] == [0, 1, 2]
    assert all("eval_cfg/cross_accuracy" in r and 0 <= r["eval_cfg/cross_accuracy"] <= 1 for r in evals)
    assert [p.name for p in info.eval_samples()] == ["eval_0000.png", "eval_0001.png", "eval_0002.png"]
    from PIL import Image
    grid = Image.open(info.eval_samples()[0])
    assert grid.height > grid.width / 4 * 1.5  # two rows: unguided and at the model's default CFG
    assert replace(config, eval_cfg=False).held_out_prompts() == TASKS.get("crosses")().eval_prompts[:4]


def test_the_crosses_preset_is_the_lesson():
    config = preset("crosses")
    task = TASKS.get("crosses")()
    assert (config.task, config.eval_cfg, config.eval_prompts, len(task.eval_prompts)) == ("crosses", True, 49, 49)
    assert config.held_out_prompts() == task.eval_prompts and config.prompt_pool() == task.train_prompts
    assert "shape_match" in config.reward
    assert config.eval_every <= 10 and config.iterations >= 2 * config.eval_every  # the grid changes while it runs
    assert TrainConfig().task is None  # the lesson is a preset, not the default


def test_a_short_run_of_the_crosses_preset_writes_both_accuracies_and_the_grids(tmp_path):
    config = preset("crosses", group=2, steps=3, window=(0, 2), chunks="1,1", prompts_per_iteration=1,
                    eval_prompts=3, eval_every=2, iterations=2, sample_every=10, report_to="none")
    Trainer(config, tmp_path / "run", EmbeddedPolicy(build_embedded(seed=0))).run()
    info = RunStore(tmp_path / "run").info()
    rows = [r for r in info.metrics if "eval/cross_accuracy" in r and "eval_cfg/cross_accuracy" in r]
    assert [r["iteration"] for r in rows] == [0, 2] and all(r["time/eval_cpu_s"] > 0 for r in rows)
    assert [p.name for p in info.eval_samples()] == ["eval_0000.png", "eval_0002.png"]


def test_the_progress_line_shows_the_task_accuracies():
    from workbench.cli.train import progress_line
    from workbench.train import TrainerEvent

    data = {"eval/reward_mean": 0.3, "eval/cross_accuracy": 0.25, "eval_cfg/cross_accuracy": 0.5}
    assert progress_line(TrainerEvent("iteration", 0, data), 80).endswith(
        "(base model)  eval/cross_accuracy 0.25  eval_cfg/cross_accuracy 0.50")
    line = progress_line(TrainerEvent("iteration", 10, {"reward/mean": 0.4, **data}), 80)
    assert "eval 0.3000  eval/cross_accuracy 0.25" in line
