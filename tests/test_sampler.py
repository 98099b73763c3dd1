"""Grouped trajectories: determinism, shared noise, re-scoring, save/load (issue: trajectories)."""

import json
import re

import pytest
import torch
from diffusers import FlowMatchEulerDiscreteScheduler

from workbench.core.errors import WorkbenchError
from workbench.flow.dynamics import dynamics_curve, relative_change
from workbench.flow.sampler import ode_sample, rescore, sample_group, sample_groups
from workbench.flow.trajectory import SamplingConfig, TrajectoryGroup

PROMPT = "a large red circle in the top left on a white background"


def test_group_shapes(random_policy):
    g = sample_group(random_policy, PROMPT, SamplingConfig(group=3, steps=4))
    assert g.states.shape == (3, 5, 3, 32, 32) and g.x0_preds.shape == (3, 4, 3, 32, 32)
    assert g.means.shape == (3, 4, 3, 32, 32) and g.stds.shape == (3, 4) and g.log_probs.shape == (3, 4)
    assert g.images.shape == (3, 3, 32, 32) and 0 <= g.images.min() and g.images.max() <= 1
    assert g.sigmas[0] == 1 and g.sigmas[-1] == 0 and (g.stds > 0).all()


def test_same_seed_same_group_other_seed_other_group(random_policy):
    cfg = SamplingConfig(group=3, steps=4, seed=7)
    a, b = sample_group(random_policy, PROMPT, cfg), sample_group(random_policy, PROMPT, cfg)
    c = sample_group(random_policy, PROMPT, SamplingConfig(group=3, steps=4, seed=8))
    assert torch.equal(a.states, b.states) and torch.equal(a.log_probs, b.log_probs)
    assert not torch.equal(a.states[:, 0], c.states[:, 0]) and not torch.equal(a.states[:, -1], c.states[:, -1])


def test_shared_noise_means_equal_x_T_and_different_trajectories(random_policy):
    g = sample_group(random_policy, PROMPT, SamplingConfig(group=3, steps=4))
    assert torch.equal(g.states[0, 0], g.states[1, 0]) and torch.equal(g.states[0, 0], g.states[2, 0])
    assert not torch.equal(g.states[0, -1], g.states[1, -1])
    h = sample_group(random_policy, PROMPT, SamplingConfig(group=3, steps=4, shared_noise=False))
    assert not torch.equal(h.states[0, 0], h.states[1, 0])


def test_batched_groups_equal_single_groups(random_policy):
    cfg = SamplingConfig(group=2, steps=3)
    both = sample_groups(random_policy, [PROMPT, "a blue ring"], cfg, seeds=[5, 6])
    single = sample_group(random_policy, "a blue ring", SamplingConfig(group=2, steps=3, seed=6))
    assert torch.allclose(both[1].states, single.states, atol=1e-5)


def test_rescoring_with_the_same_weights_gives_ratio_one(random_policy):
    for cfg in (SamplingConfig(group=3, steps=4), SamplingConfig(group=2, steps=4, sde="dance_grpo", noise_level=0.3),
                SamplingConfig(group=2, steps=4, sde="cps", noise_level=0.5),
                SamplingConfig(group=2, steps=4, window=(1, 3)),
                SamplingConfig(group=2, steps=3, guidance_scale=2.0)):
        g = sample_group(random_policy, PROMPT, cfg)
        ratio = torch.exp(rescore(random_policy, g) - g.log_probs)
        assert torch.allclose(ratio, torch.ones_like(ratio), atol=1e-5), cfg


def test_log_prob_equals_torch_normal(random_policy):
    g = sample_group(random_policy, PROMPT, SamplingConfig(group=2, steps=4))
    for t in range(4):
        ref = torch.distributions.Normal(g.means[:, t], g.stds[:, t].view(-1, 1, 1, 1)).log_prob(g.states[:, t + 1])
        assert torch.allclose(g.log_probs[:, t], ref.flatten(1).mean(1), atol=1e-5)


def test_noise_level_zero_is_the_diffusers_euler_loop(random_policy):
    cfg = SamplingConfig(group=2, steps=5, noise_level=0.0)
    g = sample_group(random_policy, PROMPT, cfg)
    sched = FlowMatchEulerDiscreteScheduler(shift=3.0)
    sched.set_timesteps(5)
    cond = random_policy.encode([PROMPT]).repeat(2)
    x = g.states[:, 0].clone()
    with torch.no_grad():
        for i, t in enumerate(sched.timesteps):
            v = random_policy.denoise(x, sched.sigmas[i].expand(2), cond.embeds, cond.pooled)
            x = sched.step(v, t, x).prev_sample
    assert torch.equal(x, g.states[:, -1])
    assert (g.log_probs == 0).all()
    assert torch.allclose(ode_sample(random_policy, [PROMPT], steps=5), g.images[:1], atol=1e-6)


def test_sde_window_only_has_log_probs_inside(random_policy):
    g = sample_group(random_policy, PROMPT, SamplingConfig(group=2, steps=6, window=(2, 4)))
    assert (g.stds[:, [0, 1, 4, 5]] == 0).all() and (g.stds[:, 2:4] > 0).all()
    assert (g.log_probs[:, [0, 1, 4, 5]] == 0).all()


def test_save_load_round_trip_is_exact(random_policy, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a stray relative file (a path lost on the way) lands here, not in a shared folder
    g = sample_group(random_policy, PROMPT, SamplingConfig(group=2, steps=3, window=(0, 2), seed=3))
    g.save(tmp_path / "g")
    h = TrajectoryGroup.load(tmp_path / "g")
    for k in ("sigmas", "states", "x0_preds", "means", "stds", "log_probs", "images"):
        assert torch.equal(getattr(g, k), getattr(h, k)), k
    assert h.prompt == g.prompt and h.config == g.config


def test_save_makes_missing_folders_overwrites_and_keeps_meta(random_policy, tmp_path):
    """A group saves into folders that do not exist yet, saves again over itself, and brings its meta back."""
    g = sample_group(random_policy, PROMPT, SamplingConfig(group=2, steps=2, seed=1))
    g.meta = {"model": "embedded", "seconds": 1.5}
    g.save(tmp_path / "runs" / "today" / "g")
    g.save(tmp_path / "runs" / "today" / "g")  # the same folder again: replaced, not refused
    assert TrajectoryGroup.load(tmp_path / "runs" / "today" / "g").meta == {"model": "embedded", "seconds": 1.5}


def test_group_json_is_indented_for_people_to_read(random_policy, tmp_path):
    """group.json (prompt, seeds, config) is what a person opens: two-space indents, one field per line."""
    g = sample_group(random_policy, PROMPT, SamplingConfig(group=2, steps=2, seed=1))
    text = (g.save(tmp_path / "g") / "group.json").read_text()
    assert text == json.dumps(json.loads(text), indent=2) and f'\n  "prompt": "{PROMPT}",\n' in text


def test_a_group_json_without_meta_loads_with_empty_meta(random_policy, tmp_path):
    """meta is display-only: a group.json without it (written by hand or by an older version) still loads."""
    g = sample_group(random_policy, PROMPT, SamplingConfig(group=2, steps=2, seed=1))
    g.meta = {"model": "embedded"}
    path = g.save(tmp_path / "g") / "group.json"
    fields = json.loads(path.read_text())
    del fields["meta"]
    path.write_text(json.dumps(fields))
    assert TrajectoryGroup.load(tmp_path / "g").meta == {}


def test_saving_under_a_file_says_to_choose_a_writable_out(random_policy, tmp_path):
    g = sample_group(random_policy, PROMPT, SamplingConfig(group=2, steps=2, seed=1))
    (tmp_path / "taken").write_text("a file, not a folder")
    with pytest.raises(WorkbenchError, match="^" + re.escape(f"cannot write the group to {tmp_path / 'taken' / 'g'}: "
                                                             "Not a directory; choose a writable --out") + "$"):
        g.save(tmp_path / "taken" / "g")


def test_load_missing_group_is_a_clear_error(tmp_path):
    with pytest.raises(WorkbenchError, match="cannot read a trajectory group"):
        TrajectoryGroup.load(tmp_path / "nothing")


@pytest.mark.parametrize("kwargs,needle", [
    ({"group": 0}, "group size"), ({"steps": 0}, "steps"), ({"noise_level": -1}, "noise_level must be in 0..10"),
    ({"sde": "ddim"}, "valid kinds"), ({"window": (3, 2)}, "window"), ({"window": (0, 99)}, "window"),
])
def test_bad_sampling_config(kwargs, needle):
    with pytest.raises(WorkbenchError, match=needle):
        SamplingConfig(**kwargs)


def test_relative_change_by_hand():
    states = torch.tensor([[[2.0, -2.0], [1.0, -1.0], [1.0, -1.0]]])  # (G=1, T+1=3, D=2)
    assert torch.allclose(relative_change(states, "l1"), torch.tensor([[0.5, 0.0]]))
    assert torch.allclose(relative_change(states, "l2"), torch.tensor([[0.5, 0.0]]))
    assert torch.allclose(relative_change(states, "cosine"), torch.tensor([[0.0, 0.0]]), atol=1e-6)
    with pytest.raises(WorkbenchError, match="valid metrics"):
        relative_change(states, "l3")


def test_dynamics_curve_over_prompts(random_policy):
    curve = dynamics_curve(random_policy, [PROMPT, "a blue ring"], SamplingConfig(group=2, steps=4))
    assert curve.per_trajectory.shape == (4, 4) and curve.mean.shape == (4,) and curve.quantiles.shape == (2, 4)
    assert (curve.mean > 0).all()
