"""Presets against the reference table of docs/methods.md, and the settings that let them match
(docs/methods.md "Presets and their references")."""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from workbench.core.errors import WorkbenchError
from workbench.flow.sampler import sample_group
from workbench.flow.schedule import linspace_sigmas
from workbench.flow.trajectory import SamplingConfig
from workbench.rl.advantages import ADVANTAGES, AdvantageSettings
from workbench.train import TrainConfig, preset

METHODS = Path(__file__).resolve().parents[1] / "docs" / "methods.md"
ROW = re.compile(r"^\| `(\w+)` \|.*\| `(\w+) = ([^`]+)` \|[^|]*\|$")


def table_rows() -> list[tuple[str, str, object]]:
    """(preset, field, value) of every row of the table whose 'ours' column names a field."""
    text = METHODS.read_text().split("## Presets and their references", 1)[1].split("\n## ", 1)[0]
    return [(m[1], m[2], ast.literal_eval(m[3])) for line in text.splitlines() if (m := ROW.match(line))]


def test_every_preset_row_of_the_table_holds():
    rows = table_rows()
    audited = {"flow_grpo", "gcpo", "gcpo_weighted", "mixgrpo", "dance_grpo"}
    assert len(rows) >= 45 and {name for name, _, _ in rows} == audited
    for name, field, value in rows:
        assert getattr(preset(name), field) == value, f"{name}.{field}: table {value!r}"


def test_flow_grpo_samples_ten_sde_steps_from_own_noise_with_cfg():
    f = preset("flow_grpo")
    sampling = f.sampling_config(1)
    assert f.sampling_steps == 10 and f.trained_steps(1) == list(range(9))  # int(10 * 0.99)
    assert sampling.sde_mask().all() and not sampling.shared_noise and sampling.guidance_scale == 4.5


def test_gcpo_grid_steps_chunks_and_std_are_its_scripts():
    g = preset("gcpo")
    base = np.linspace(1.0, 0.0, 18)  # GCPO: torch.linspace(1, 0, sampling_steps + 1), sd3_time_shift(3, .)
    expected = torch.tensor(3 * base / (1 + 2 * base), dtype=torch.float32)
    assert torch.equal(linspace_sigmas(17, 3.0), expected) and g.sampling_steps == 17
    assert g.sampling_config(1).sde_mask().all() and g.trained_steps(1) == list(range(16))  # 17 SDE, 16 trained
    assert (g.chunk_fraction, g.chunk_weights, g.chunk_sampling) == (0.5, "uniform", "trajectory")
    rewards = torch.tensor([[0.0, 1.0, 2.0, 3.0]])
    values = ADVANTAGES.get("grpo")(rewards, g.advantage_settings()).values  # (1, G)
    assert torch.allclose(values, (rewards - 1.5) / (rewards.std() + 1e-8))  # unbiased std (G - 1) + 1e-8
    population = ADVANTAGES.get("grpo")(rewards, AdvantageSettings()).values
    assert torch.allclose(population, (rewards - 1.5) / (rewards.std(unbiased=False) + 1e-4))


def test_the_linspace_schedule_reaches_the_sampler(random_policy):
    group = sample_group(random_policy, "a red circle", SamplingConfig(group=2, steps=4, schedule="linspace"))
    assert torch.allclose(group.sigmas.cpu(), linspace_sigmas(4, random_policy.default_shift))
    with pytest.raises(WorkbenchError, match="valid schedules: model, linspace"):
        SamplingConfig(schedule="cosine")


def test_uniform_chunk_weights_and_the_last_sde_step_in_a_run(tmp_path, monkeypatch):
    from support import TINY, fresh_policy

    from workbench.train import Trainer
    from workbench.train import trainer as trainer_module

    config = replace(TINY, iterations=1, eval_prompts=0, chunk_fraction=0.5, steps=6, chunks="2,2,2",
                     group=8, chunk_weights="uniform", last_step_sde=True)
    trainer = Trainer(config, tmp_path / "run", fresh_policy())
    groups = trainer.sampler.collect(1, config.sampling_config(1)).groups
    assert bool((groups[0].stds[:, -1] > 0).all())  # the 7th, untrained step is an SDE step
    flat_start = torch.tensor([0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0])  # no L1_rel in chunk 0
    monkeypatch.setattr(trainer_module, "relative_change", lambda states: flat_start.expand(states.shape[0], -1))
    steps = torch.tensor(config.trained_steps(1))
    uniform = trainer._chunk_mask(1, groups, steps)  # (L, S)
    trainer.config = replace(config, chunk_weights="l1_rel")
    weighted = trainer._chunk_mask(1, groups, steps)
    assert uniform.shape == (16, 6) and uniform.sum(dim=1).eq(2).all()
    assert not weighted[:, :2].any() and uniform[:, :2].any()  # only the uniform draw reaches chunk 0
    monkeypatch.undo()
    trainer.config = config
    trainer.run()
    with pytest.raises(WorkbenchError, match="last_step_sde"):
        TrainConfig(last_step_sde=True, train_last_step=True)
    with pytest.raises(WorkbenchError, match="chunk_weights"):
        TrainConfig(chunk_weights="softmax")
    with pytest.raises(WorkbenchError, match="does not use unbiased_std"):
        TrainConfig(advantage="dr_grpo", adv_unbiased_std=True)


def test_dance_grpo_trains_a_random_part_of_its_sde_steps(tmp_path):
    from support import fresh_policy

    from workbench.train import Trainer
    from workbench.train.store import RunStore

    config = preset("dance_grpo", group=2, steps=5, chunks="1,1,1,1,1", prompts_per_iteration=1, iterations=1,
                    eval_prompts=0)
    assert config.sampling_steps == 5 and config.sampling_config(1).sde_mask().all()  # every step SDE, trainable
    Trainer(config, tmp_path / "run", fresh_policy()).run()
    assert RunStore(tmp_path / "run").metrics()[-1]["train/transitions"] == 2 * 3  # int(5 x 0.6) = 3 per sample


def test_an_objective_preset_is_the_default_config_with_that_objective_and_its_registered_overrides():
    from workbench.train.presets import _objective_preset

    gspo = _objective_preset("gspo")  # the factory each objective registered with a preset becomes
    assert gspo.__doc__ == "gspo: one sequence ratio (overrides on its registration, rl/objectives.py)."
    assert replace(gspo(), objective="chunk_grpo", clip_low=1e-3, clip_high=None) == TrainConfig()  # the rest: defaults
    assert (gspo().objective, gspo().clip_low, gspo().clip_high) == ("gspo", 3e-4, 4e-4)  # GSPO's clip range
    dapo = _objective_preset("dapo")()  # its companions: dynamic sampling, clip-higher at 0.28 / 0.2 of clip_low
    assert (dapo.objective, dapo.dynamic_sampling, dapo.clip_high) == ("dapo", True, pytest.approx(1e-3 * 1.4))
    assert _objective_preset("dr_grpo")().advantage == "dr_grpo"  # its own advantage estimator


def test_the_step_presets_train_step_ratios_with_their_chunks():
    from workbench.rl.chunking import sample_chunks, schedule, step_mask_from_chunks

    dance = preset("dance_grpo")
    sizes = schedule(dance.chunks, len(dance.trained_steps(1)))
    assert dance.objective == "step_grpo" and sizes == [1] * 16  # each of the 16 SDE steps a chunk of its own
    drawn = sample_chunks(sizes, torch.ones(16), dance.chunk_fraction, torch.Generator().manual_seed(0))
    assert int(step_mask_from_chunks(sizes, drawn).sum()) == 9  # int(16 x 0.6) steps per trajectory
    mix = preset("mixgrpo")
    assert mix.objective == "step_grpo" and len(mix.trained_steps(1)) == 4
    assert replace(mix, objective="chunk_grpo").objective_settings().chunks == [4]  # the window is one chunk
