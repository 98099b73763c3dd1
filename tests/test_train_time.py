"""The Fine-tune tab says before Start how long a run takes on this machine: its work counted from its settings
(`train.run_cost`) times rates measured here (`ui.train_time`), from a run's own timings once one ran."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from support import make_run

from workbench.train import preset
from workbench.train.config import TrainConfig
from workbench.train.run_cost import evaluations_made, run_work
from workbench.train.store import RunStore
from workbench.ui import run_handlers as rh
from workbench.ui import train_time
from workbench.ui.eta import evaluations_left, time_left
from workbench.ui.workbench import Workbench

LESSON = preset("crosses")


@pytest.fixture
def wb(model_dir, tmp_path):
    """An app on the tiny model that has timed nothing yet, with no run on disk."""
    wb = Workbench(model=str(model_dir), device="cpu", runs_root=str(tmp_path / "runs"))
    wb.timing, wb.objectives_timing = None, {}
    return wb


def minutes(text: str) -> float:
    """The N of '**about N minutes**' (or seconds, in minutes)."""
    number, unit = re.search(r"\*\*about ([\d.]+) (minutes|s)\*\*", text).groups()
    return float(number) if unit == "minutes" else float(number) / 60


def test_the_work_by_hand_for_the_crosses_lesson():
    """80 iterations of N=8 prompts x G=8 trajectories x 17 sampling steps, 8 trained steps (window 0..8), the KL
    term's reference model once per trained transition, 9 evaluations of 49 held-out prompts x 17 steps, unguided
    (1) and at CFG 4 (2 passes)."""
    work = run_work(LESSON)
    assert LESSON.kl_beta > 0 and work.trained == 80 * 8 * 8 * 8
    assert work.sampled == 80 * 8 * 8 * 17 + work.trained  # the rollouts and the KL reference
    assert work.evaluations == 9 and work.evaluated == 9 * 49 * 17 * 3 and work.uncounted == []
    assert run_work(replace(LESSON, kl_beta=0.0)).sampled == work.sampled - work.trained  # no reference without KL
    assert run_work(replace(LESSON, inner_epochs=2)).trained == 2 * work.trained
    assert run_work(replace(LESSON, eval_cfg=False)).evaluated == 9 * 49 * 17


def test_the_work_by_hand_with_cfg_in_training_a_light_kl_term_and_no_evaluations():
    """Rollouts at CFG 4.5 make two passes per step, and so do their trained transitions; a KL weight of 0.5 still
    adds one reference evaluation per trained transition; no held-out prompts, no evaluation."""
    guided = replace(LESSON, guidance_scale=4.5, kl_beta=0.5, eval_prompts=0)
    work = run_work(guided)
    assert work.trained == 80 * 8 * 8 * 8 * 2
    assert work.sampled == 80 * 8 * 8 * 17 * 2 + work.trained
    assert (work.evaluations, work.evaluated) == (0, 0)


def test_the_work_names_what_it_cannot_count():
    assert run_work(replace(LESSON, dynamic_sampling=True)).uncounted == [
        "the rounds sampled again to replace flat groups"]
    assert run_work(replace(LESSON, objective="ppo")).uncounted == ["ppo's critic"]
    assert run_work(replace(LESSON, objective="dense_grpo")).uncounted == ["dense_grpo's look-ahead"]


def test_the_evaluations_left_by_hand():
    assert evaluations_left(0, 7, 3) == 3  # iterations 3, 6 and the last, 7
    assert evaluations_left(3, 7, 3) == 2  # 6 and 7: the one at 3 is done
    assert evaluations_left(0, 5, 3) == 2  # 3 and 5; 6 is past the last iteration
    assert evaluations_left(0, 3, 1) == 3  # every iteration
    assert evaluations_left(0, 7, 0) == evaluations_left(0, 7, None) == 0  # no evaluations asked for
    assert evaluations_made(7, 3, 1) == 4  # one held-out prompt: before training, then 3, 6 and 7


@pytest.mark.parametrize("total, every", [(80, 10), (7, 3), (1, 10), (30, 1)])
def test_the_evaluations_counted_are_those_the_running_eta_counts(total, every):
    assert evaluations_made(total, every, 49) == 1 + evaluations_left(0, total, every)  # + the one before training
    assert evaluations_made(total, every, 0) == 0


def test_the_estimate_grows_with_iterations_and_prompts(wb):
    wb.timing, wb.objectives_timing = (0.003, "timed as the model loaded"), {"update": (0.01, "timed")}
    said = {n: minutes(train_time.run_time(wb, replace(LESSON, iterations=n))) for n in (20, 40, 80)}
    assert said[20] < said[40] < said[80]
    more = replace(LESSON, prompts_per_iteration=16)
    assert minutes(train_time.run_time(wb, more)) > said[80]
    assert minutes(train_time.run_time(wb, replace(LESSON, group=12))) > said[80]


def test_the_estimate_is_the_work_at_the_rates_measured_here(wb):
    wb.timing = (0.003, "timed as the model loaded")
    wb.objectives_timing = {"update": (0.01, "timed as the model loaded")}
    work = run_work(LESSON)
    seconds = work.sampled * 0.003 + work.trained * 0.01 + work.evaluated * 0.003
    text = train_time.run_time(wb, LESSON, "crosses")
    assert f"**about {seconds / 60:.1f} minutes** on this machine for 80 iterations and 9 held-out evaluations" in text
    assert "3.0 ms per image evaluation, 10.0 ms per trained transition" in text and "shipped" not in text
    wb.timing = (0.006, "from the last credit measurement here")  # a slower machine: a longer time
    assert minutes(train_time.run_time(wb, LESSON)) > seconds / 60


def test_before_any_measurement_the_lesson_says_the_shipped_figure_labelled(wb):
    text = train_time.run_time(wb, LESSON, "crosses")
    assert text.startswith("not measured on this machine yet; the figure shipped with the lesson: about 6 minutes")
    other = train_time.run_time(wb, replace(LESSON, iterations=20), "crosses")  # not the run the figure timed
    assert other.startswith("not measured on this machine yet") and "shipped" not in other
    assert "shipped" not in train_time.run_time(wb, TrainConfig())
    wb.timing = (0.003, "timed as the model loaded")  # half the rates: still not measured
    assert "not measured" in train_time.run_time(wb, TrainConfig())


def test_the_form_says_its_time_beside_its_memory_and_follows_its_iterations(wb):
    form = list(rh.lesson_form(LESSON))
    assert "the figure shipped with the lesson" in rh.memory_estimate(wb, *form, "crosses")
    wb.timing, wb.objectives_timing = (0.003, "timed as the model loaded"), {"update": (0.01, "timed")}
    line = rh.memory_estimate(wb, *form, "crosses")
    assert "**Memory estimate of an iteration**" in line and "\n\n**Time**: **about " in line
    form[4] = 40  # iterations
    assert minutes(rh.memory_estimate(wb, *form, "crosses")) < minutes(line)
    about = rh.load_lesson(wb, "crosses")[-2]
    assert f"**Time**: **about {minutes(line):.1f} minutes** on this machine" in about


def timed_run(wb, model_dir, pace=(12.0, 5.0), evaluation=20.0, iterations=(1, 2, 3)) -> RunStore:
    """A crosses run of this app's model with steady timings: (iteration s, update s) and eval s."""
    path = make_run(wb.jobs.root, model_dir, iterations=(80,), name="timed", **{
        k: v for k, v in LESSON.to_dict().items() if k not in ("model", "iterations")})
    store = RunStore(path)
    store.append_metrics({"iteration": 0, "time/eval_s": evaluation})
    for it in iterations:
        store.append_metrics({"iteration": it, "time/iteration_s": pace[0], "time/update_s": pace[1]})
    return store


def test_once_a_run_is_timed_here_its_own_timings_give_the_rates(wb, model_dir):
    wb.timing, wb.objectives_timing = (0.003, "timed as the model loaded"), {"update": (0.01, "timed")}
    timed_run(wb, model_dir)
    text = train_time.run_time(wb, LESSON, "crosses")
    seconds = 80 * 12.0 + 9 * 20.0  # the same settings: its iterations and evaluations at its own pace
    assert f"**about {seconds / 60:.1f} minutes**" in text and "from the timings of run timed here" in text
    half = train_time.run_time(wb, replace(LESSON, prompts_per_iteration=4))  # half the rollout and update
    assert f"**about {(80 * 6.0 + 9 * 20.0) / 60:.1f} minutes**" in half


def test_the_estimate_and_the_running_eta_agree_on_a_steady_run(wb, model_dir):
    """After one iteration of a run whose pace holds, the time said before Start less the ETA's time left is the
    first evaluation and the one iteration done."""
    store = timed_run(wb, model_dir, iterations=(1,))
    estimate = train_time.run_seconds(run_work(LESSON), train_time.run_rates(wb))
    left, _ = time_left(store.metrics(), LESSON.iterations, LESSON.eval_every)
    assert estimate - left == pytest.approx(20.0 + 12.0)
