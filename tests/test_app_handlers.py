"""The app's handlers called directly (no browser): a random-init tiny model, tiny groups, fixed seeds.

Training runs use a fake `workbench train` (a plain-Python script honouring the run-folder contract) so
start / busy / stop / crash logic is fast; one test runs the real trainer for 2 iterations.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace
from xml.etree import ElementTree

import gradio as gr
import plotly.graph_objects as go
import pytest
import torch
from app_support import curve_drawn, fake_workbench, is_skip, msg, start, wait_for
from PIL import Image

from workbench.core.files import read_json, write_json
from workbench.core.imaging import HEADER
from workbench.rl.chunking import CHUNKERS
from workbench.train import TrainConfig, preset
from workbench.train.store import CONFIG, STATUS, RunStore
from workbench.ui import handlers as h
from workbench.ui import run_handlers as rh
from workbench.ui.layout import build_app
from workbench.ui.state import Session
from workbench.ui.workbench import Workbench

PROMPT = "a large red circle in the top left on a white background"


# --------------------------------------------------------------------------- generate and attribution
def test_generate_view_shows_the_sessions_group_with_its_settings(wb, sampled):
    """Learn's group (or a shared link's) shown in Generate: the controls take the group's settings."""
    out = h.generate_view(wb, sampled)
    assert out[:8] == (PROMPT, 3, 4, 0.7, 0, "adherence", sampled.group.config.sde, "")
    gallery, strip, figure, status = out[8:]
    assert len(gallery) == 3 and strip is not None and len(figure.data) == 3 + 2
    assert status.startswith("✓ the group of G=3 trajectories of T=4 steps")
    assert "no group yet" in msg(h.generate_view(wb, Session()))


def test_generate_returns_images_captions_and_figures(wb):
    gallery, strip, fig, heatmap, rates, session, status = h.generate(wb, PROMPT, 3, 4, 0.7, 0, "adherence", Session())
    assert status.startswith("✓"), status
    assert session.group.images.shape == (3, 3, 32, 32) and session.group.num_steps == 4
    assert len(gallery) == 3
    for (image, caption), r, a in zip(gallery, session.rewards, session.advantages):
        assert image.size == (128, 128)
        assert f"reward {float(r):.3f}" in caption and f"A {float(a):+.2f}" in caption
    assert abs(float(session.advantages.sum())) < 1e-3  # GRPO advantages are centred
    assert strip.size == (4 * (32 * 3 + 2) + 2, HEADER + 3 * (32 * 3 + 2) + 2)  # a row per trajectory, column per step
    assert strip.getpixel((strip.width - 20, 5)) == (255, 255, 255)  # the strip above the cells is white ...
    header = strip.crop((0, HEADER - 16, strip.width, HEADER))  # ... and names each column's step at its bottom
    assert min(header.convert("L").getdata()) < 100
    assert isinstance(fig, go.Figure) and len(fig.data) == 3 + 2 and fig.layout.title.text  # G lines, mean, level
    assert list(fig.data[0].y) == pytest.approx(session.group.log_probs[0].tolist())
    assert fig.layout.xaxis.title.text and fig.layout.yaxis.title.text
    assert session.credit is None and "Attribution" in rates and isinstance(heatmap, go.Figure)


@pytest.mark.parametrize("inputs, message", [
    ((PROMPT.replace("circle", "hexagon"), 3, 4, 0.7, 0, "adherence"), "unknown word 'hexagon'"),
    (("", 3, 4, 0.7, 0, "adherence"), "prompt is empty"),
    ((PROMPT, 1, 4, 0.7, 0, "adherence"), "group size must be a whole number >= 2"),
    ((PROMPT, 3, None, 0.7, 0, "adherence"), "steps T is empty: type a whole number >= 2"),
    ((PROMPT, 3, 4, -1, 0, "adherence"), "noise level must be in 0..1.5 in the app"),
    ((PROMPT, 3, 4, 0.7, 0, "nope"), "unknown reward 'nope'"),
])
def test_generate_bad_inputs_give_messages(wb, inputs, message):
    out = h.generate(wb, *inputs, Session())
    assert out[-1].startswith("⚠") and message in msg(out)
    assert all(is_skip(v) for v in out[:-1])  # the page and the session keep their last values


def test_unexpected_errors_are_a_short_message_and_logged(model_dir, tmp_path, caplog):
    broken = Workbench(model=str(model_dir), runs_root=str(tmp_path))
    broken.policy = lambda key=None: (_ for _ in ()).throw(RuntimeError("boom\nTraceback line"))
    out = h.generate(broken, PROMPT, 2, 2, 0.7, 0, "adherence", Session())
    assert out[-1].startswith("⚠ Unexpected error (RuntimeError: boom)") and "Traceback" not in out[-1]
    assert "boom" in caplog.text  # the traceback goes to the log (stderr), not the page


def test_bad_model_folder_is_a_message(tmp_path):
    wb = Workbench(model=str(tmp_path / "missing"), runs_root=str(tmp_path))
    out = h.generate(wb, PROMPT, 2, 2, 0.7, 0, "adherence", Session())
    assert "does not exist" in out[-1]


def test_attribution_heatmap_and_rates(wb, sampled):
    assert h.attribute(wb, 2, Session())[-1].startswith("⚠ no group yet")
    credit = sampled.credit
    fig = h.credit_plot(sampled)
    traces = {t.name: t for t in fig.data}
    credit_map, advantage_map = traces["step credit"], traces["advantage"]
    assert torch.tensor(credit_map.z) == pytest.approx(credit.step_credit)  # (G, T)
    assert torch.tensor(advantage_map.z)[:, 0] == pytest.approx(credit.advantages)  # (G, 1)
    classes, valid = credit.step_classes(2.0), credit.step_valid
    wrong, right = (traces[n] for n in ("misattributed: against A(i), significant at z",
                                        "aligned: with A(i), significant at z"))
    assert len(wrong.x) == int(((classes == -1) & valid).sum()) and len(right.x) == int(((classes == 1) & valid).sum())
    cover = [t for t in fig.data if t.type == "heatmap" and t.hoverinfo == "skip"][0]  # the grey undetermined cover
    assert (torch.tensor(cover.z).nan_to_num(0) == 1).sum() == int(((classes == 0) & valid).sum())
    assert "undetermined: not significant at z" in traces
    se = credit.step_se[1, 2]
    assert credit_map.customdata[1][2][0] == (f"{float(se):.4f}" if se == se else "no estimate")  # hover: the error
    assert [shape.x0 for shape in fig.layout.shapes] == [b - 0.5 for b in (1, 2, 3)]  # temporal(4) = [1, 1, 1, 1]
    r = credit.rates(2.0)
    text = h.rates_markdown(sampled)
    assert f"plain sign rate {100 * r.step.plain:.1f} % ± {100 * r.step.plain_se:.1f} %" in text
    assert f"{100 * r.step.determined:.1f} % ± {100 * r.step.determined_se:.1f} % of 12 cells determined" in text
    assert "Step misattribution" in text and f"plain sign rate {100 * r.chunk.plain:.1f} %" in text


def test_estimator_choice_and_agreement_with_the_monte_carlo_credit(wb, sampled):
    heatmap, rates, session, status = h.attribute(wb, 2, sampled, "x0", True, 2.0)
    assert status.startswith("✓ measured credit with the x0 estimator")
    assert session.credit.estimator == "x0" and session.reference is sampled.credit  # the MC credit stays
    assert "no Monte-Carlo error" in rates and "Against your Monte-Carlo measurement (M=2)" in rates
    assert "valid credit estimators: mc, ode, x0" in msg(h.attribute(wb, 2, sampled, "nope", True, 2.0))
    assert "z (sets the false-call rate) must be >= 0" in msg(h.attribute(wb, 2, sampled, "mc", True, -1))
    assert "no Monte-Carlo error to refine" in msg(list(h.refine_credit(wb, 10, session, 2.0))[-1])


def test_the_numerics_of_the_continuations_are_chosen_and_named(wb, sampled):
    for precision in ("float32", "bfloat16"):
        session, status = h.attribute(wb, 2, sampled, "mc", True, 2.0, precision)[-2:]
        assert session.credit.precision == precision and f"M=2 continuations in {precision}" in status
    assert "valid: auto, float32, bfloat16" in msg(h.attribute(wb, 2, sampled, "mc", True, 2.0, "half"))


def test_refine_streams_rounds_and_spends_the_budget(wb, sampled):
    steps = list(h.refine_credit(wb, 30, sampled, 50.0))  # z = 50: every cell stays undetermined
    assert len(steps) >= 3 and all(s[-1].startswith("…") for s in steps[:-1])
    final = steps[-1][-2]
    assert int((final.credit.counts - sampled.credit.counts).sum()) == 30 and (final.credit.counts >= 2).all()
    assert steps[-1][-1].startswith("✓ refined with 30 continuations") and final.reference is final.credit
    assert "no credit yet" in msg(list(h.refine_credit(wb, 10, Session()))[-1])
    heatmap, rates, session, status = h.attribution_z(wb, 0, sampled)  # z = 0: every non-zero cell determined
    assert status == "✓ classified at z = 0" and session.z == 0 and "100.0 % ± 0.0 % of 12 cells determined" in rates


# --------------------------------------------------------------------------- chunks
def test_chunk_spec_valid_and_invalid_keeps_last_valid(wb, sampled):
    curve, chunk_map, spec, rates, session, status = h.chunks_from_spec(wb, "1, 3", sampled)
    assert status.startswith("✓") and spec == "1,3" and session.sizes == [1, 3] and session.credit.sizes == [1, 3]
    assert sampled.sizes == [1, 1, 1, 1]  # the old session is not mutated
    assert curve_drawn(curve) == ([0.5], "Temporal dynamics and chunks [1, 3]")  # the curve's new lines and title
    assert h.chunks_shown(wb, session)[0] == curve  # the tab draws the same curve when it opens
    r = sampled.credit.rechunk([1, 3]).rates(2.0).chunk
    assert f"plain sign rate {100 * r.plain:.1f} %" in rates and "(chunks 1,3)" in rates
    classes = sampled.credit.rechunk([1, 3]).chunk_classes(2.0)
    cells = ElementTree.fromstring(chunk_map).findall(".//rect[@class='cell']")  # the map (viz/chunk_map.py)
    assert len(cells) == classes.numel() == 3 * 2 and "traj 2, chunk 1 (steps 1-3)" in cells[-1].find("title").text
    widths = [float(c.get("width")) for c in cells[:2]]  # chunk 0 over one step, chunk 1 over three
    assert widths[1] == pytest.approx(3 * widths[0], abs=0.5)  # the markup rounds to 0.1
    heatmap, view_rates, status = h.attribution_view(wb, session)  # the Attribution tab redraws on opening
    assert [s.x0 for s in heatmap.layout.shapes] == [0.5] and view_rates == rates
    assert is_skip(status)  # a credit press's message, landed first, stays
    for bad, why in (("1,2", "sum to 3"), ("a,b", "not a comma-separated"), ("", "empty"), ("0,4", ">= 1")):
        out = h.chunks_from_spec(wb, bad, session)
        assert why in msg(out) and "kept the last valid chunks 1,3" in out[-1]
        assert all(is_skip(v) for v in out[:-1])


@pytest.mark.parametrize("name, option, kwargs", [("uniform", 3, {"size": 3}), ("temporal", 9, {}),
                                                  ("adaptive", 2, {"max_size": 2}),
                                                  ("equal_mass", 2, {"num_chunks": 2})])
def test_chunker_choice(wb, sampled, name, option, kwargs):
    out = h.chunks_from_chunker(wb, name, option, sampled)
    expected = CHUNKERS.get(name)(4, wb.curve(4, 0.7).mean, **kwargs)
    assert out[-1].startswith("✓") and out[-2].sizes == expected and out[2] == ",".join(map(str, expected))


def test_chunker_bad_option_and_name(wb, sampled):
    assert "(max_size) must be a whole number >= 2" in msg(h.chunks_from_chunker(wb, "adaptive", 1, sampled))
    assert "valid chunkers" in msg(h.chunks_from_chunker(wb, "nope", 1, sampled))


def test_split_and_merge(wb, sampled):  # the edits themselves: tests/test_chunking.py
    one = h.chunks_from_spec(wb, "4", sampled)[-2]
    two = h.chunks_split(wb, 1, one)[-2]
    assert two.sizes == [1, 3] and two.credit.sizes == [1, 3]
    assert h.chunks_merge(wb, 1, two)[-2].sizes == [4]
    assert "no chunk starts at step 2" in msg(h.chunks_merge(wb, 2, two))


def test_the_step_slider_of_a_two_step_group_is_a_valid_slider(wb):
    """At T = 2 a chunk can start at step 1 only. The tab asked Gradio for a slider 1..1, which it refuses: the
    handler failed ("Slider minimum must be less than maximum", in the server log) and the slider kept 1..15."""
    with pytest.raises(ValueError):
        gr.Slider(minimum=1, maximum=1)  # what the tab asked for
    session = h.generate(wb, PROMPT, 2, 2, 0.7, 0, "adherence", Session())[-2]
    slider, status = h.chunks_view(wb, session)
    assert is_skip(status) and (slider.minimum, slider.maximum, slider.value) == (0, 1, 1) and not slider.interactive
    assert session.sizes == [1, 1] and h.chunks_merge(wb, slider.value, session)[-2].sizes == [2]  # its one step
    wide = h.step_slider(16)
    assert (wide.minimum, wide.maximum, wide.value) == (1, 15, 8) and wide.interactive


def test_chunks_without_a_group_use_the_default_steps(wb):
    session = Session()
    slider, status = h.chunks_view(wb, session)  # the curve, computed; the views follow, read from the session
    assert is_skip(status)
    curve, chunk_map, spec, rates, status = h.chunks_shown(wb, session)
    assert spec == "2,3,4,7" and status == "✓ chunks 2,3,4,7 over T=16 steps"
    assert len(ElementTree.fromstring(curve).findall(".//rect[@class='step']")) == 16  # a column to click per step
    assert all(is_skip(v) for v in h.attribution_view(wb, session))  # no credit yet: nothing to redraw, and the
    # status is left alone (an empty one could land after a credit press's message and wipe it)
    assert "10-90 % over 4 trajectories" in curve  # 2 prompts x 2 trajectories
    assert "Measure credit" in rates and slider.maximum == 15 and slider.value == 8
    assert len(h.chunks_from_spec(wb, "8,8", session)) == 6  # an edit leaves the slider where it is: not an output
    assert "measure credit in the Attribution tab" in chunk_map


def test_new_group_with_other_steps_resets_the_schedule(wb, sampled):
    session = h.generate(wb, PROMPT, 3, 6, 0.7, 1, "adherence", sampled)[-2]
    assert session.credit is None and session.sizes == CHUNKERS.get("temporal")(6)


def test_filmstrip_of_long_trajectories_shows_at_most_16_steps(wb):
    x0 = torch.linspace(-1, 1, 20)[None, :, None, None, None].expand(2, 20, 3, 32, 32)  # (G, T, C, H, W)
    strip = h._filmstrip(wb.policy(), SimpleNamespace(num_steps=20, x0_preds=x0))
    assert strip.size == (h.FILM_STEPS * (32 * 3 + 2) + 2, HEADER + 2 * (32 * 3 + 2) + 2)
    first, last = strip.getpixel((2 + 10, HEADER + 12)), strip.getpixel((strip.width - 12, HEADER + 12))
    assert first == (0, 0, 0) and last == (255, 255, 255)  # the first and the last step are both shown


# --------------------------------------------------------------------------- fine-tune
def test_the_form_builds_a_train_config_and_its_controls_start_at_its_defaults(model_dir):
    wb = Workbench(model=str(model_dir), device="cpu")
    config = rh.form_config(wb, "gspo", "adherence:1,sharpness:0.5", "4,4", 1e-4, 2, 4, 8, 4, "cps", "0,8")
    assert (config.objective, config.reward, config.chunks, config.lr, config.iterations, config.group, config.steps,
            config.lora_rank, config.sde, config.window, config.model) == (
        "gspo", "adherence:1,sharpness:0.5", "4,4", 1e-4, 2, 4, 8, 4, "cps", (0, 8), str(model_dir))
    assert (config.clip_low, config.clip_high) == (3e-4, 4e-4)  # the gspo preset's
    demo = build_app(wb).config["components"]
    default = {c["props"].get("elem_id"): c["props"].get("value") for c in demo}
    assert default["train-iterations"] == TrainConfig().iterations and default["train-chunks"] == TrainConfig().chunks
    assert default["train-sde"] == TrainConfig().sde


@pytest.mark.parametrize("objective, expected", [
    ("dapo", {"dynamic_sampling": True, "advantage": "grpo"}),
    ("gpg", {"advantage": "gpg", "minibatch_size": 4 * 4 * 8}),  # one update per rollout at the form's G and T
    ("gfpo", {"advantage": "gfpo", "gfpo_metric": "sharpness"}),
    ("dr_grpo", {"advantage": "dr_grpo"}),  # trained with the advantage the explainer pairs it with
    ("chunk_grpo", {"advantage": "grpo", "dynamic_sampling": False, "minibatch_size": 4 * 8}),
])
def test_the_form_brings_each_method_with_its_companions(model_dir, objective, expected):
    config = rh.form_config(Workbench(model=str(model_dir), device="cpu"), objective, "adherence", "8", 3e-5, 3, 4,
                            8, 0, "flow_grpo", "")
    assert config.objective == objective and (config.group, config.steps) == (4, 8)
    assert {k: getattr(config, k) for k in expected} == expected


@pytest.mark.parametrize("field, value, message", [("objective", "trpo", "unknown objective 'trpo'"),
                                                   ("chunks", "2,3", "sum to 5"), ("lr", -1, "lr and max_grad_norm"),
                                                   ("iterations", 0, "iterations must be"),
                                                   ("iterations", 10**12, "at most 2000 in the app"),
                                                   ("lr", float("nan"), "learning rate must be a finite number"),
                                                   ("sde", "ode", "unknown SDE kind"),
                                                   ("window", "0-8", "START,END"),
                                                   ("reward", "nope", "unknown reward 'nope'")])
def test_start_with_bad_settings_is_a_message_and_starts_nothing(tmp_path, model_dir, field, value, message):
    wb = fake_workbench(tmp_path, model_dir)
    out = start(wb, **{field: value})
    assert message in msg(out) and wb.jobs.busy() is None and not (tmp_path / "runs").exists()


def test_start_busy_poll_stop(tmp_path, model_dir):
    wb = fake_workbench(tmp_path, model_dir)
    figure, sample, session, timer, status = start(wb, iterations=200)
    run_id = session.run_id
    assert status.startswith("✓ started run") and timer.active
    other = start(wb)  # a second session
    assert msg(other) == f"⚠ busy: run {run_id} is using the cpu; stop it or wait for it to end"
    assert wait_for(lambda: len(RunStore(wb.jobs.root / run_id).metrics()) >= 2)
    fig, _, _, *_, timer, _, text = rh.poll_run(wb, session)
    assert "running" in text and timer.active and {t.name for t in fig.data} >= {"reward/mean", "chunk/ratio_mean_1"}
    saved = read_json(wb.jobs.root / run_id / "config.json")  # the process received the app's TrainConfig
    expected = rh.form_config(wb, "chunk_grpo", "adherence", "2,2", 3e-5, 200, 2, 4, 0, "flow_grpo", "")
    assert TrainConfig.from_dict(saved) == expected
    assert "stop requested" in msg(rh.stop_run(wb, session))
    assert wait_for(lambda: not wb.jobs._jobs[run_id].alive)
    fig, _, _, *_, timer, _, text = rh.poll_run(wb, session)
    assert "stopped" in text and not timer.active
    assert start(wb)[-1].startswith("✓")  # the device is free again
    wb.jobs.shutdown()


def test_crash_is_reported_and_frees_the_device(tmp_path, model_dir):
    wb = fake_workbench(tmp_path, model_dir, mode="crash")
    session = start(wb)[2]
    assert wait_for(lambda: not wb.jobs._jobs[session.run_id].alive)
    *_, timer, _, text = rh.poll_run(wb, session)
    assert "failed" in text and "exit code 1" in text and "out of memory (fake)" in text and not timer.active
    assert wb.jobs.busy() is None


def test_stop_before_the_trainer_starts_ends_the_process(tmp_path, model_dir):
    wb = fake_workbench(tmp_path, model_dir, mode="slow_start")
    session = start(wb)[2]
    assert "was ended" in msg(rh.stop_run(wb, session))
    *_, timer, _, text = rh.poll_run(wb, session)
    assert "stopped" in text and not timer.active
    assert "has not started a run" in msg(rh.stop_run(wb, Session()))


def test_a_running_run_on_disk_makes_the_device_busy(tmp_path, model_dir):
    wb = fake_workbench(tmp_path, model_dir)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "workbench"])
    try:
        folder = RunStore.create(wb.jobs.root, "cli-run").path
        write_json(folder / CONFIG, {})
        write_json(folder / STATUS, {"state": "running", "iteration": 1, "pid": other.pid})
        assert "busy: run cli-run" in msg(start(wb))
        write_json(folder / STATUS, {"state": "running", "iteration": 1, "pid": 2**22 + 7})  # stale
        assert wb.jobs.busy() is None
    finally:
        other.kill()
        other.wait()


@pytest.mark.slow
def test_real_training_run_two_iterations(tmp_path, model_dir):
    if importlib.util.find_spec("workbench.cli.train") is None:
        pytest.skip("workbench.cli.train is not there yet")
    command = [sys.executable, "-m", "workbench", "train", "--eval-prompts", "0", "--prompts-per-iteration", "1"]
    wb = Workbench(model=str(model_dir), device="cpu", runs_root=str(tmp_path / "runs"), train_command=command)
    session = start(wb, iterations=2)[2]
    assert wait_for(lambda: not wb.jobs._jobs[session.run_id].alive, timeout=120)
    fig, sample, *_, timer, _, text = rh.poll_run(wb, session)
    assert "finished, iteration 2/2" in text, text
    assert isinstance(sample, Image.Image), "the Newest samples panel gets the run's newest rollout grid"
    assert [len(t.x) for t in fig.data if t.name == "reward/mean"] == [2]


def test_the_lesson_menu_fills_the_form_from_the_preset(model_dir):
    wb = Workbench(model=str(model_dir), device="cpu")
    lesson = preset("crosses")
    *form, about, status = rh.load_lesson(wb, "crosses")
    assert tuple(form) == rh.lesson_form(lesson) and form[0] == lesson.objective and form[9] == "0,8"
    assert "Lesson: crosses" in about and "49 held-out" in about and status.startswith("✓")
    *form, about, status = rh.load_lesson(wb, rh.NO_LESSON)
    assert tuple(form) == rh.lesson_form(TrainConfig()) and about == ""
    assert "unknown lesson 'nope'" in msg(rh.load_lesson(wb, "nope"))
    config = rh.form_config(wb, *form[:10], "crosses")  # the lesson's evaluation and task come along
    assert (config.task, config.eval_cfg, config.eval_prompts, config.reward) == ("crosses", True, 49, None)
    assert config.kl_beta == lesson.kl_beta > 0  # the KL term that holds the checkerboard texture back comes too
    assert config.reward_spec(toy_world=True) == "adherence"  # an empty reward box: the model's default
    dapo = rh.form_config(wb, "dapo", *rh.lesson_form(lesson)[1:], "crosses")  # a method keeps its companions
    assert dapo.dynamic_sampling and dapo.task == "crosses" and dapo.window == lesson.window
    props = {c["props"].get("elem_id"): c["props"] for c in build_app(wb).config["components"]}
    assert props["train-lesson"]["value"] == rh.NO_LESSON and ("crosses", "crosses") in props["train-lesson"]["choices"]
    assert "lesson **crosses**" in props["learn-lesson"]["value"]  # the Learn tab points to it


def test_poll_shows_before_now_and_the_held_out_accuracies(tmp_path, model_dir):
    from PIL import Image

    wb = fake_workbench(tmp_path, model_dir)
    store = RunStore.create(wb.jobs.root, "lesson")
    write_json(store.path / CONFIG, {"objective": "chunk_grpo", "iterations": 20, "eval_cfg": True})
    store.write_status("running", 10)
    for it, (plain, cfg) in [(0, (0.0, 0.02)), (10, (0.2, 0.4))]:
        store.append_metrics({"iteration": it, "eval/cross_accuracy": plain, "eval_cfg/cross_accuracy": cfg})
        store.save_samples(it, Image.new("RGB", (8, 4), (it * 20, 0, 0)), prefix="eval")
    live, sample, before, now, heldout, bar, timer, keys, text = rh.poll_run(wb, Session(run_id="lesson"))
    assert "iteration 0" in before["label"] and "iteration 10" in now["label"] and "bottom row" in before["label"]
    assert before["value"] is not None and now["value"] is not None
    assert {t.name: list(t.y) for t in heldout.data} == {"eval/cross_accuracy (no CFG)": [0.0, 0.2],
                                                        "eval_cfg/cross_accuracy (model's CFG)": [0.02, 0.4]}
    assert "eval\\_cfg/cross\\_accuracy 0.40 (iteration 10)" in text and timer.active


def test_a_watched_run_sends_each_picture_once(tmp_path, model_dir):
    """The timer's poll with the keys of what the page shows: nothing new, no picture sent again (the progress bar
    and the line still are); a new row and a new held-out grid send the curves, the held-out figure and Now only."""
    from PIL import Image

    wb = fake_workbench(tmp_path, model_dir)
    store = RunStore.create(wb.jobs.root, "lesson")
    write_json(store.path / CONFIG, {"objective": "chunk_grpo", "iterations": 20})
    store.write_status("running", 1)
    store.append_metrics({"iteration": 0, "eval/cross_accuracy": 0.0})
    store.append_metrics({"iteration": 1, "reward/mean": 0.5})
    store.save_samples(0, Image.new("RGB", (8, 4)), prefix="eval")
    store.save_samples(1, Image.new("RGB", (8, 4)))
    session = Session(run_id="lesson")
    first = rh.poll_run(wb, session)
    assert all(out != gr.skip() for out in first[:6])
    again = rh.poll_run(wb, session, first[7])
    assert all(out == gr.skip() for out in again[:5]) and again[7] == first[7] and "iteration 1/20" in again[5]
    store.append_metrics({"iteration": 2, "reward/mean": 0.6, "eval/cross_accuracy": 0.25})
    store.save_samples(2, Image.new("RGB", (8, 4), (255, 0, 0)), prefix="eval")
    store.write_status("running", 2)
    live, sample, before, now, heldout, *_ = rh.poll_run(wb, session, again[7])
    assert [t.name for t in live.data if t.name == "reward/mean"] and {t.name for t in heldout.data}
    assert sample == gr.skip() and before == gr.skip() and "iteration 2" in now["label"]
    keys = rh.poll_run(wb, session, again[7])[7]
    store.truncate_metrics(1)  # a resume from iteration 1 writes row 2 again: as many rows, other numbers
    store.append_metrics({"iteration": 2, "reward/mean": 0.7, "eval/cross_accuracy": 0.25})
    resumed = rh.poll_run(wb, session, keys)
    assert resumed[0] != gr.skip() and resumed[3] == gr.skip()
    store.write_status("finished", 2)  # the curves' title says the state
    live, *_, timer, keys, text = rh.poll_run(wb, session, resumed[7])
    assert live != gr.skip() and "(finished)" in live.layout.title.text and not timer.active


def test_a_poll_that_a_start_can_overtake_leaves_the_timer_on(tmp_path, model_dir, monkeypatch):
    """A poll stops the timer once the run it shows has ended, but not when it answers the tab's opening or when a
    run started while it read: its answer can land after Start's, which turned the timer on (tests/test_browser.py
    replays the tab's case in the page, where the tab then stayed at "No run yet")."""
    wb = fake_workbench(tmp_path, model_dir)

    def timer(session, **opened):
        *_, timer, _, text = rh.poll_run(wb, session, **opened)
        assert text.startswith(("No run yet", "**Run done**")), text  # an answer, not an error
        return timer

    assert not timer(Session()).active  # no run anywhere: nothing to follow
    assert timer(Session(), opened=True) == gr.skip()
    RunStore.create(wb.jobs.root, "done").write_status("finished", 2)
    session = Session(run_id="done")
    assert not timer(session).active
    assert timer(session, opened=True) == gr.skip()
    view = wb.jobs.view

    def overtaken(run_id):  # a Start pressed while the poll reads
        start(wb, iterations=200)
        monkeypatch.setattr(wb.jobs, "view", view)
        return view(run_id)
    monkeypatch.setattr(wb.jobs, "view", overtaken)
    assert timer(session) == gr.skip() and wb.jobs.busy() is not None
    assert not timer(session).active  # a run started before the poll read (another session's): the timer stops
    wb.jobs.shutdown()


# --------------------------------------------------------------------------- runs
def make_run(root: Path, name: str, rewards: list[float], checkpoint: bool = False) -> Path:
    path = RunStore.create(root, name).path
    write_json(path / CONFIG, {"objective": "step_grpo", "iterations": len(rewards)})
    RunStore(path).write_status("finished", len(rewards), started=1000.0 + len(rewards))
    for i, r in enumerate(rewards, start=1):
        RunStore(path).append_metrics({"iteration": i, "reward/mean": r, "loss/policy": -r})
    if checkpoint:
        RunStore(path).save_checkpoint(len(rewards), {"w": torch.ones(2)}, {"step": 1})
    return path


def test_runs_table_compare_and_download(tmp_path, model_dir):
    wb = fake_workbench(tmp_path, model_dir)
    table = rh.refresh_runs(wb)[0]
    empty = msg(rh.refresh_runs(wb))  # it said "0 run(s) in ...", and Compare "press Refresh if the list is empty"
    assert table.empty and list(table.columns) == rh.RUN_COLUMNS and "no run yet in" in empty and "Fine-tune" in empty
    assert "start one in the Fine-tune tab" in msg(rh.compare(wb, [], "reward/mean"))
    assert all(is_skip(v) for v in rh.runs_show(wb, None))  # it ran after Refresh and emptied its status
    make_run(wb.jobs.root, "a", [0.1, 0.2])
    make_run(wb.jobs.root, "b", [0.3, 0.4, 0.5], checkpoint=True)
    table, chosen, pick, metric, status = rh.refresh_runs(wb)
    assert [row[:5] for row in table.values.tolist()] == [["b", "finished", 3, "step_grpo", 0.5],
                                                          ["a", "finished", 2, "step_grpo", 0.2]]
    assert chosen.choices == [("b", "b"), ("a", "a")] and metric.value == "reward/mean"
    fig, status = rh.compare(wb, ["a", "b"], "loss/policy")
    assert {t.name: list(t.y) for t in fig.data} == {"a": [-0.1, -0.2], "b": [-0.3, -0.4, -0.5]}
    assert "no run logged metric 'nope'" in msg(rh.compare(wb, ["a"], "nope"))
    assert "not found" in msg(rh.compare(wb, ["zzz"], "reward/mean"))
    assert "choose at least one run" in msg(rh.compare(wb, [], "reward/mean"))
    files, status = rh.download(wb, "b")
    csv_text = Path(files[0]).read_text().splitlines()
    assert csv_text[0] == "iteration,loss/policy,reward/mean" and csv_text[3] == "3,-0.5,0.5"
    assert set(zipfile.ZipFile(files[1]).namelist()) == {"weights.safetensors", "optimizer.pt", "state.json"}
    files, status = rh.download(wb, "a")
    assert len(files) == 1 and "no checkpoint" in status
    assert "choose a run" in msg(rh.download(wb, None))


def test_rates_text_shows_the_spread_between_halves_of_the_continuations():
    from workbench.rl.credit import Credit
    from workbench.viz.credit_view import rates_text

    gen = torch.Generator().manual_seed(0)
    rewards = torch.rand(6, generator=gen)
    credit = Credit("p", rewards, rewards - rewards.mean(), torch.rand(6, 3, 8, generator=gen), [4])
    text = rates_text(credit, 2.0)
    a, b = (half.rates(2.0).step for half in credit.halves())
    assert "two disjoint halves of the continuations (M=4 each)" in text and f"{100 * a.determined:.1f} %" in text
    assert "fixed by construction" in text  # one chunk of all steps from the shared start
