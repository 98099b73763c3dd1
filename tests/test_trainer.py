"""The fine-tuning loop on a tiny random embedded model: run store, metrics, stop, resume, LoRA, config, CLI."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from support import RED_FLAT_PROMPTS, TINY, fresh_policy, red_flat

from workbench.cli.train import main as train_main
from workbench.core.errors import WorkbenchError
from workbench.models.embedded import EmbeddedPolicy, build_embedded, save_embedded
from workbench.train import PRESETS, TrainConfig, Trainer, load_policy, preset
from workbench.train.model_settings import model_defaults
from workbench.train.store import RunStore


def weights(policy: EmbeddedPolicy) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in policy.transformer.state_dict().items()}


REQUIRED = ["reward/mean", "reward/std", "reward/adherence/mean", "adv/mean", "adv/std", "adv/zero_std_frac",
            "loss/policy", "loss/kl", "policy/clip_frac", "policy/approx_kl", "policy/grad_norm",
            "chunk/ratio_mean_0", "chunk/ratio_mean_1", "chunk/ratio_std_0", "chunk/ratio_std_1",
            "time/iteration_s", "time/rollout_s", "time/update_s", "rollout/groups"]


def test_loop_writes_run_store_and_metrics(tmp_path):
    policy, events = fresh_policy(), []
    before = weights(policy)
    summary = Trainer(TINY, tmp_path / "run", policy).run(callback=events.append)
    run = RunStore.open(tmp_path / "run").info()
    assert run.state == "finished" and run.status["iteration"] == 2 and summary.state == "finished"
    assert [r["iteration"] for r in run.metrics] == [0, 1, 2]
    assert set(run.metrics[0]) >= {"eval/reward_mean"} and "reward/mean" not in run.metrics[0]
    for name in REQUIRED:
        assert all(name in r for r in run.metrics[1:]), name
    assert "eval/reward_mean" in run.metrics[2] and "eval/reward_mean" not in run.metrics[1]
    assert run.metrics[1]["rollout/groups"] == 2 and run.metrics[1]["train/optimizer_steps"] == 2
    assert summary.first_eval_reward == run.metrics[0]["eval/reward_mean"]
    assert summary.last_reward_mean == run.metrics[2]["reward/mean"]
    assert [p.name for p in run.samples()] == ["iter_0001.png", "iter_0002.png"]
    assert [p.name for p in run.eval_samples()] == ["eval_0000.png", "eval_0002.png"]  # before / after
    # the model's defaults resolved, the thread count recorded
    assert TrainConfig.from_dict(run.config) == replace(model_defaults(TINY), threads=torch.get_num_threads())
    kinds = [e.kind for e in events]
    assert kinds == ["started", "eval_samples", "iteration", "iteration", "samples", "eval_samples", "iteration",
                     "samples", "checkpoint", "finished"]
    saved = RunStore(tmp_path / "run").latest_checkpoint().weights
    after = weights(policy)
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert set(saved) == {k for k, _ in policy.transformer.named_parameters()}  # full FT: every parameter
    assert all(torch.equal(saved[k], after[k]) for k in saved)


def test_fresh_trainer_refuses_an_existing_run(tmp_path):
    Trainer(replace(TINY, iterations=1, eval_prompts=0), tmp_path / "run", fresh_policy()).run()
    with pytest.raises(WorkbenchError, match="resume"):
        Trainer(TINY, tmp_path / "run", fresh_policy())


@pytest.mark.parametrize("how", ["method", "file"])
def test_stop_leaves_a_checkpoint_and_state_stopped(tmp_path, how):
    config = replace(TINY, iterations=5, checkpoint_every=10, eval_prompts=0)
    trainer = Trainer(config, tmp_path / "run", fresh_policy())
    events = []

    def on_event(event):
        events.append(event)
        if event.kind == "iteration" and event.iteration == 1:
            trainer.request_stop() if how == "method" else RunStore(tmp_path / "run").request_stop()

    summary = trainer.run(callback=on_event)
    run = RunStore.open(tmp_path / "run").info()
    assert summary.state == "stopped" and run.state == "stopped" and run.status["iteration"] == 1
    assert RunStore(tmp_path / "run").latest_checkpoint().folder.name == "iter_0001"
    assert not (tmp_path / "run" / "STOP").exists() and events[-1].kind == "stopped"


def test_resume_past_a_damaged_newest_checkpoint_cuts_metrics_back_to_the_older_one(tmp_path):
    config = replace(TINY, iterations=2, checkpoint_every=1, keep_checkpoints=2, sample_every=10, eval_prompts=0)
    policy = fresh_policy()
    Trainer(config, tmp_path / "run", policy).run()  # the resume below restores every weight of this policy
    store = RunStore(tmp_path / "run")
    assert [r["iteration"] for r in store.metrics()] == [1, 2]
    newest = store.latest_checkpoint()
    assert newest.iteration == 2
    (newest.folder / "optimizer.pt").write_bytes(b"garbage")
    kept = store.latest_checkpoint()
    assert kept is not None and kept.iteration == 1
    assert any(not torch.equal(p, kept.weights[k]) for k, p in policy.transformer.named_parameters())
    seen = {}

    def on_event(event):
        if event.kind == "started":  # the store has handled it: row 2 belongs to the damaged checkpoint
            seen["rows"] = [r["iteration"] for r in RunStore(tmp_path / "run").metrics()]

    trainer = Trainer.resume(store, policy=policy, subscribers=[on_event])  # a store or its folder
    assert trainer.resumed_from == 1 and trainer.iteration == 1 and [r["iteration"] for r in trainer.history] == [1]
    restored = dict(policy.transformer.named_parameters())
    assert all(torch.equal(restored[k], v) for k, v in kept.weights.items())  # iter_0001's weights, not iter_0002's
    trainer.run()
    assert seen["rows"] == [1]
    assert [r["iteration"] for r in store.metrics()] == [1, 2] and store.latest_checkpoint().iteration == 2


def test_resume_equals_a_straight_run(tmp_path):
    config = replace(TINY, iterations=2, checkpoint_every=10, sample_every=10)
    straight = fresh_policy()
    Trainer(config, tmp_path / "a", straight).run()
    first = Trainer(config, tmp_path / "b", fresh_policy())
    first.run(callback=lambda e: first.request_stop() if e.kind == "iteration" and e.iteration == 1 else None)
    assert RunStore.open(tmp_path / "b").info().state == "stopped"
    resumed_policy = fresh_policy()
    Trainer.resume(tmp_path / "b", policy=resumed_policy).run()
    a, b = weights(straight), weights(resumed_policy)
    assert all(torch.allclose(a[k], b[k], rtol=0, atol=1e-6) for k in a)
    rows_a, rows_b = RunStore(tmp_path / "a").metrics(), RunStore(tmp_path / "b").metrics()
    assert [r["iteration"] for r in rows_b] == [0, 1, 2] and "eval/reward_mean" in rows_b[2]

    def untimed(row):
        return {k: v for k, v in row.items() if not k.startswith("time/")}

    assert untimed(rows_a[2]) == untimed(rows_b[2])  # rewards, advantages, losses, ratios and the eval
    assert RunStore.open(tmp_path / "b").info().state == "finished"


def test_lora_trains_only_the_adapters(tmp_path):
    model = build_embedded(seed=0)
    save_embedded(model, tmp_path / "model")
    config = replace(TINY, iterations=1, eval_prompts=0, lora_rank=2, model=str(tmp_path / "model"), device="cpu")
    trainer = Trainer(config, tmp_path / "run")
    base = {k: v.detach().clone() for k, v in trainer.policy.transformer.named_parameters() if "lora_" not in k}
    lora = {k: v.detach().clone() for k, v in trainer.params.items()}
    trainer.run()
    assert lora and all("lora_" in k for k in lora)
    now = dict(trainer.policy.transformer.named_parameters())
    assert all(torch.equal(base[k], now[k]) for k in base)
    assert any(not torch.equal(lora[k], now[k]) for k in lora)
    saved = RunStore(tmp_path / "run").latest_checkpoint().weights
    assert set(saved) == set(lora)
    reloaded = dict(load_policy(tmp_path / "run", device="cpu").transformer.named_parameters())
    assert all(torch.equal(reloaded[k], now[k]) for k in now)


def test_options_kl_chunk_sampling_noise_aware_dynamic_sampling(tmp_path):
    config = replace(TINY, iterations=1, eval_prompts=0, kl_beta=0.5, chunk_fraction=0.5, noise_aware=True,
                     dynamic_sampling=True, steps=4, chunks="1,1,1", train_last_step=True, sde="cps",
                     noise_level=0.5)
    trainer = Trainer(config, tmp_path / "run", fresh_policy())
    trainer.run()
    row = RunStore(tmp_path / "run").metrics()[-1]
    assert row["loss/kl"] > 0  # the second optimizer step moves away from the frozen reference
    assert config.trained_steps(1) == [0, 1, 2]  # cps: the last step has std 0 and is not trained
    assert 0 < row["train/transitions"] < 2 * 2 * 3  # chunk sampling trained a part of the steps


def test_weighted_chunk_sampling_draws_per_trajectory(tmp_path):
    """GCPO's code draws the trained chunks for each trajectory from its own L1_rel: the (L, S) masks differ
    between trajectories of one iteration; 'iteration' draws one set for all; int(0.5 * 3) = 1 chunk each."""
    config = replace(TINY, iterations=1, eval_prompts=0, chunk_fraction=0.5, steps=6, chunks="2,2,2")
    masks = {}
    for how in ("trajectory", "iteration"):
        trainer = Trainer(replace(config, chunk_sampling=how), tmp_path / how, fresh_policy())
        groups = trainer.sampler.collect(1, config.sampling_config(1)).groups
        masks[how] = trainer._chunk_mask(1, groups, torch.tensor(config.trained_steps(1)))  # (L, S)
    for mask in masks.values():
        assert mask.shape == (4, 6) and mask.sum(dim=1).eq(2).all()  # one chunk of 2 steps per trajectory
    assert len({tuple(row.tolist()) for row in masks["iteration"]}) == 1
    assert len({tuple(row.tolist()) for row in masks["trajectory"]}) > 1


def test_kl_form_global_std_and_flow_grpo_preset(tmp_path):
    """kl_form picks the KL's scale (the released code's by default); global_std reaches the estimator."""
    rows = {}
    for form in ("flow_grpo", "exact"):
        config = replace(TINY, iterations=1, eval_prompts=0, kl_beta=0.5, kl_form=form, global_std=True)
        Trainer(config, tmp_path / form, fresh_policy()).run()
        rows[form] = RunStore(tmp_path / form).metrics()[-1]
    assert 0 < rows["flow_grpo"]["loss/kl"] < rows["exact"]["loss/kl"]  # the exact form divides by -dt < 1 more
    assert TINY.advantage_settings().global_std is False
    assert replace(TINY, global_std=True).advantage_settings().global_std
    f = preset("flow_grpo")
    assert (f.sampling_steps, f.trained_steps(1), f.global_std, f.kl_form) == (10, list(range(9)), True, "flow_grpo")
    with pytest.raises(WorkbenchError, match="'dr_grpo' does not use global_std"):
        replace(TINY, advantage="dr_grpo", global_std=True)
    with pytest.raises(WorkbenchError, match="kl_form"):
        replace(TINY, kl_form="k3")


@pytest.fixture
def red_is_flat(monkeypatch):
    """TINY on RED_FLAT_PROMPTS with the reward 'red_flat' registered for this test."""
    from workbench.rewards import REWARDS

    monkeypatch.setitem(REWARDS._items, "red_flat", red_flat)
    return replace(TINY, reward="red_flat", prompts=RED_FLAT_PROMPTS, iterations=3, eval_prompts=0,
                   sample_every=1, checkpoint_every=10)


def trained_prompts(config: TrainConfig, run_dir) -> tuple[list[dict], list[list[str]]]:
    """Metrics rows and the prompts of every iteration's trained batch (from the 'samples' events)."""
    events = []
    Trainer(config, run_dir, fresh_policy()).run(callback=events.append)
    return RunStore(run_dir).metrics(), [e.data["prompts"] for e in events if e.kind == "samples"]


def test_dapo_dynamic_sampling_refills_the_batch(tmp_path, red_is_flat):
    rows, prompts = trained_prompts(replace(red_is_flat, dynamic_sampling=True), tmp_path / "dapo")
    assert all(r["rollout/kept_groups"] == 2 and r["train/transitions"] == 2 * 2 * 3 for r in rows[1:])
    assert all("red" not in p for batch in prompts for p in batch)  # every flat group was replaced
    assert any(r["rollout/rounds"] > 1 for r in rows[1:])  # this seed draws red prompts: refills happened
    for r in rows[1:]:
        assert r["rollout/groups"] == 2 * r["rollout/rounds"] and r["adv/zero_std_frac"] == 0
        assert r["rollout/zero_std_frac"] > 0 or r["rollout/rounds"] == 1
    # capped at one round, the same seed keeps flat groups that do not train (the old behaviour)
    capped, _ = trained_prompts(replace(red_is_flat, dynamic_sampling=True, max_sample_rounds=1), tmp_path / "one")
    assert all(r["rollout/rounds"] == 1 for r in capped[1:])
    assert any(r["rollout/kept_groups"] < 2 and r["train/transitions"] < 2 * 2 * 3 for r in capped[1:])


def test_gpg_resamples_until_the_valid_fraction_reaches_its_threshold(tmp_path, red_is_flat):
    mostly_red = [*RED_FLAT_PROMPTS[:3], "a small red bar in the top middle on a gray background"]  # 3 of 4 flat
    gpg = replace(red_is_flat, objective="gpg", advantage="gpg", gpg_threshold=0.5, iterations=4, prompts=mostly_red)
    rows, prompts = trained_prompts(gpg, tmp_path / "gpg")
    for r, batch in zip(rows[1:], prompts):
        assert r["adv/valid_frac"] >= 0.5 and sum("red" not in p for p in batch) >= 1
        assert r["rollout/kept_groups"] == 2  # flat groups stay in GPG's batch (alpha counts them)
    assert any(r["rollout/rounds"] > 1 for r in rows[1:])
    strict, _ = trained_prompts(replace(gpg, gpg_threshold=1.0), tmp_path / "strict")
    assert all(r["adv/valid_frac"] == 1.0 and r["adv/alpha"] == 1.0 for r in strict[1:])


def test_refill_resumes_exactly(tmp_path, red_is_flat):
    config = replace(red_is_flat, dynamic_sampling=True, iterations=2)
    Trainer(config, tmp_path / "a", fresh_policy()).run()
    first = Trainer(config, tmp_path / "b", fresh_policy())
    first.run(callback=lambda e: first.request_stop() if e.kind == "iteration" and e.iteration == 1 else None)
    Trainer.resume(tmp_path / "b", policy=fresh_policy()).run()
    a, b = RunStore(tmp_path / "a").metrics()[-1], RunStore(tmp_path / "b").metrics()[-1]
    assert {k: v for k, v in a.items() if not k.startswith("time/")} == \
        {k: v for k, v in b.items() if not k.startswith("time/")}


def test_clip_reward_folder_comes_from_the_config(tmp_path, monkeypatch):
    from tiny_pipelines import write_tiny_clip

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    write_tiny_clip(tmp_path)
    prompts = ["a large red circle in the center on a white background",
               "a large blue ring in the center on a white background"]
    config = replace(TINY, iterations=1, eval_prompts=0, prompts=prompts, reward="adherence,clip_score:0.5",
                     clip_path=str(tmp_path / "clip"))
    Trainer(config, tmp_path / "run", fresh_policy()).run()
    row = RunStore(tmp_path / "run").metrics()[-1]
    assert row["reward/mean"] == pytest.approx(row["reward/adherence/mean"] + 0.5 * row["reward/clip_score/mean"])
    assert TrainConfig.from_dict(RunStore.open(tmp_path / "run").info().config).clip_path == str(tmp_path / "clip")


@pytest.mark.parametrize("error, recorded", [
    (RuntimeError("callback exploded\nsecond line"), "RuntimeError: callback exploded"),  # the first line
    (KeyboardInterrupt(), "KeyboardInterrupt: KeyboardInterrupt"),  # no message: the type stands for it
])
def test_failure_is_recorded(tmp_path, error, recorded):
    def boom(event):
        if event.kind == "iteration" and event.iteration == 1:
            raise error

    with pytest.raises(type(error)):
        Trainer(replace(TINY, eval_prompts=0), tmp_path / "run", fresh_policy()).run(callback=boom)
    status = RunStore.open(tmp_path / "run").info().status
    assert (status["state"], status["iteration"], status["error"]) == ("failed", 1, recorded)


@pytest.mark.parametrize("overrides, message", [
    ({"chunks": "2,2"}, "sum to 4 but there are 3"),
    ({"objective": "nope"}, "valid objectives: chunk_grpo"),
    ({"window": (0, 2), "mixgrpo": True}, "drop window or mixgrpo"),
    ({"advantage": "gfpo"}, "gfpo_metric"),
    ({"noise_level": 0.0}, "noise_level must be > 0"),
    ({"prompts": ["a red circle"], "prompt_file": "p.txt"}, "not both"),
    ({"minibatch": 4}, "multiple of the 3 trained steps"),
    ({"minibatch": -3}, "minibatch must be None"),
    ({"grad_accum": 4}, "grad_accum"),
    ({"group": 1}, "group must be >= 2"),
    ({"dtype": "float16"}, "float32 or bfloat16"),
    ({"chunk_fraction": 1.5}, "chunk_fraction"),
    ({"reward": "nope"}, "valid rewards"),
    ({"window": (2, 9)}, "SDE window"),
    ({"max_sample_rounds": 3}, "dynamic_sampling or advantage 'gpg'"),
    ({"dynamic_sampling": True, "max_sample_rounds": 0}, "max_sample_rounds must be in 1..1000"),
    ({"gpg_threshold": 1.5}, "gpg_threshold"),
    ({"reward": "adherence,clip_score"}, "needs a local CLIP model folder; pass clip_path="),
    ({"pickscore_path": "/tmp"}, "neither reward nor gfpo_metric uses 'pickscore'"),
])
def test_bad_configs_are_rejected(overrides, message):
    with pytest.raises(WorkbenchError, match=message):
        replace(TINY, **overrides)


def test_window_and_last_step_define_the_trained_steps():
    assert TrainConfig().trained_steps(1) == list(range(16)) and TrainConfig().sampling_steps == 17
    assert TrainConfig(train_last_step=True, chunks="2,3,4,7").sampling_steps == 16
    assert TrainConfig(window=(2, 6), chunks="1,3").trained_steps(1) == [2, 3, 4, 5]
    mix = TrainConfig(mixgrpo=True, chunks="4")
    assert mix.trained_steps(1) == [0, 1, 2, 3] and mix.trained_steps(26) == [1, 2, 3, 4]


def test_presets():
    assert set(PRESETS.names()) >= {"embedded_demo", "gcpo", "flow_grpo", "gspo", "gpg"}
    g = preset("gcpo")
    assert (g.objective, g.chunks, g.lr, g.clip_low, g.max_grad_norm) == ("chunk_grpo", "2,3,4,7", 1e-5, 5e-5, 0.01)
    assert preset("flow_grpo").lora_rank == 32 and preset("gpg").minibatch_size == 4 * 8 * 16
    assert preset("gpg", group=4, steps=8, chunks="8").minibatch_size == 4 * 4 * 8  # 0 = all, whatever G and T
    assert preset("gfpo").advantage == "gfpo" and preset("dapo").dynamic_sampling
    assert preset("gcpo", iterations=3).iterations == 3
    with pytest.raises(WorkbenchError, match="valid presets: .*dance_grpo"):
        preset("nope")
    with pytest.raises(WorkbenchError, match="sum to"):
        preset("flow_grpo", objective="chunk_grpo")


@pytest.mark.parametrize("argv, message", [
    (["--chunks", "2,2", "--steps", "3"], "sum to"),
    (["--preset", "nope"], "valid presets"),
    (["--resume", "/nonexistent/run"], "does not exist"),
    (["--resume", "/nonexistent/run", "--group", "4"], "only --iterations"),
    (["--model", "/nonexistent/model"], "does not exist"),
    (["--global-std", "--advantage", "gpg"], "'gpg' does not use global_std"),
    (["--preset", "gcpo", "--config", "c.json"], "not both"),
])
def test_cli_errors(argv, message, capsys):
    assert train_main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err


def test_cli_run_prints_progress_and_summary(tmp_path, capsys):
    save_embedded(build_embedded(seed=0), tmp_path / "model")
    argv = ["--model", str(tmp_path / "model"), "--device", "cpu", "--group", "2", "--steps", "3", "--chunks", "1,2",
            "--iterations", "1", "--eval-prompts", "2", "--out", str(tmp_path / "run")]
    assert train_main(argv) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("iter 0/1") and lines[1].startswith("iter 1/1  reward")
    summary = json.loads(lines[-1])
    assert summary["run_dir"] == str(tmp_path / "run") and summary["state"] == "finished"
    assert summary["first_reward_mean"] is not None and summary["last_eval_reward"] is not None


def test_tensorboard_tracker_writes_curves_and_sample_grids(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    Trainer(replace(TINY, report_to="tensorboard"), tmp_path / "run", fresh_policy()).run()
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard"), size_guidance={"images": 0}).Reload()
    scalars, images = events.Tags()["scalars"], events.Tags()["images"]
    assert {"reward/mean", "loss/policy", "eval/reward_mean"} <= set(scalars)
    assert [e.step for e in events.Scalars("reward/mean")] == [1, 2]
    assert set(images) == {"samples", "eval_samples"} and len(events.Images("samples")) == 2


def test_no_tracker_writes_no_tensorboard_folder(tmp_path):
    Trainer(replace(TINY, report_to="none"), tmp_path / "run", fresh_policy()).run()
    assert not (tmp_path / "run" / "tensorboard").exists()


def test_ppo_refuses_to_resume_from_a_checkpoint_without_its_critic():
    from workbench.rewards import build_reward
    from workbench.train.step_credit import make_step_credit

    credit = make_step_credit(replace(TINY, objective="ppo"), fresh_policy(), build_reward("adherence"))
    for state in (None, {}, {"optimizer": {}}):  # a grpo run's checkpoint has no critic.pt
        with pytest.raises(WorkbenchError) as err:
            credit.load_state_dict(state)
        assert str(err.value) == ("this checkpoint holds no critic (critic.pt): it was not written by a ppo run; "
                                  "resume it with its own objective")


def test_held_out_evaluation_uses_the_runs_shift_and_guidance_only_unless_eval_cfg(tmp_path, monkeypatch):
    import workbench.train.trainer as trainer_module

    calls, real = [], trainer_module.evaluate
    monkeypatch.setattr(trainer_module, "evaluate", lambda *args: calls.append(args) or real(*args))
    config = replace(TINY, iterations=1, eval_every=1, shift=2.5, guidance_scale=1.5)
    events = []
    Trainer(config, tmp_path / "run", fresh_policy(), subscribers=[events.append]).run()
    assert calls and all(args[4] == {"eval": 1.5} and args[5:7] == (config.sampling_steps, 2.5) for args in calls)
    grids = [e.data for e in events if e.kind == "eval_samples"]
    assert len(grids) == len(calls) and all(set(g) == {"prompts", "guidance", "grid"} for g in grids)
    held_out = config.held_out_prompts()
    assert all(g["guidance"] == [1.5] and g["prompts"] and g["prompts"] == held_out[:len(g["prompts"])] for g in grids)
    assert not any(k.startswith("eval_cfg/") for r in RunStore(tmp_path / "run").metrics() for k in r)
