"""The buttons' time estimates come from this machine's own timings (`ui.timing`), never from a guess."""

from __future__ import annotations

import re
import time

from workbench.rl.credit_estimators import continuation_cost, grid_rows
from workbench.ui import timing
from workbench.ui.learn import LEARN, example_text


def test_an_estimate_is_the_work_times_the_rate_measured_here(wb, sampled):
    wb.timing = None
    assert "not measured on this machine yet" in example_text(True, wb)  # nothing assumed before a timing
    timing.probe(wb)
    per_eval, how = wb.timing
    assert per_eval > 0 and how == "timed as the model loaded"
    timing.record(wb, sampled.credit)  # a credit measurement made here: its own seconds per evaluation
    per_eval, how = wb.timing
    assert per_eval == sampled.credit.cost["seconds"] / sampled.credit.cost["nfe"]
    evals = timing.evaluations(LEARN["group"], LEARN["steps"], LEARN["continuations"])
    assert evals == 8 * 16 + continuation_cost(grid_rows(8, range(1, 16), range(4)), 16)
    text = example_text(True, wb)
    assert f"({evals} image evaluations at {1000 * per_eval:.1f} ms each, from the last credit measurement here" in text
    seconds = evals * per_eval
    assert (f"about {seconds:.0f} s on this machine" if seconds < 90 else f"about {seconds / 60:.1f} minutes") in text


def _steady_run(seed: int, iterations: int = 80, every: int = 10, pace: float = 20.0, evaluation: float = 6.0):
    """A fake run's metrics.jsonl records and each iteration's wall time: iterations of `pace` s and evaluations of
    `evaluation` s, each +- 10 % (uniform), as a steady machine writes them."""
    import random

    rng = random.Random(seed)
    jitter = lambda base: base * (1 + 0.2 * (rng.random() - 0.5))  # noqa: E731
    records, walls = [{"iteration": 0, "time/eval_s": jitter(evaluation)}], []
    for it in range(1, iterations + 1):
        record = {"iteration": it, "time/iteration_s": jitter(pace)}
        if it % every == 0 or it == iterations:
            record["time/eval_s"] = jitter(evaluation)
        records.append(record)
        walls.append(record["time/iteration_s"] + record.get("time/eval_s", 0.0))
    return records, walls


def test_a_runs_time_left_from_its_first_iterations_is_within_its_stated_error():
    from workbench.ui.eta import evaluations_left, time_left

    assert evaluations_left(3, 80, 10) == 8 and evaluations_left(75, 80, 10) == 1 and evaluations_left(3, 80, None) == 0
    assert time_left([{"iteration": 0, "time/eval_s": 5.0}], 80, 10) is None  # no iteration finished: nothing said
    for seed in range(20):
        records, walls = _steady_run(seed)
        for done in (2, 3):
            left, error = time_left(records[:done + 1], 80, 10)
            actual = sum(walls[done:])
            assert abs(left - actual) <= error, (seed, done, left, actual, error)
            assert error <= 0.25 * actual  # an estimate a teacher can plan with, not a range that says nothing


def test_the_progress_bar_says_the_time_left_at_the_runs_own_pace_not_its_start_up():
    """The lesson's bar once said 'about 50 min' at the start of a 32-minute run: the elapsed time at iteration 2
    held the process start, the model load and the first evaluation. It now says the time its iterations take."""
    from workbench.ui.jobs import RunView
    from workbench.ui.run_handlers import progress_html

    records, walls = _steady_run(0)
    start_up = 120.0  # process start and model load, before the first record
    now = 1000.0 + start_up + records[0]["time/eval_s"] + sum(walls[:2])
    view = RunView("r", "running", 2, 80, "", records[:3], None, started=1000.0, updated=now, eval_every=10)
    bar = progress_html(view, now=now)
    actual = sum(walls[2:])  # ~1600 s
    said = re.search(r"about (\d+) min (\d+) s left", bar)
    assert said, bar
    assert abs(int(said[1]) * 60 + int(said[2]) - actual) < 0.1 * actual
    old = (now - 1000.0) / 2 * 78  # the old pace: elapsed over finished iterations
    assert old > 1.5 * actual  # what the old bar said was far off


def test_measure_credit_and_refine_say_their_time_from_the_measured_rate(wb, sampled):
    from workbench.ui import waits

    group, credit = sampled.group, sampled.credit
    assert waits.credit_evaluations(group, 2, "mc") == credit.cost["nfe"]  # what the measurement itself counts
    wb.timing = (0.01, "from the last credit measurement here")
    text = waits.credit_wait(wb, 2, "mc", 100, sampled)
    assert f"**Measure credit** about 1 s on this machine ({credit.cost['nfe']} image evaluations at 10.0 ms" in text
    assert "**Refine** (100 continuations): at most 3 s" in text  # 100 continuations of at most T - 1 = 3 steps
    more = waits.credit_evaluations(group, 4, "mc")
    assert more > credit.cost["nfe"] and f"({more} image evaluations" in waits.credit_wait(wb, 4, "mc", 100, sampled)
    assert "no transformer evaluation" in waits.credit_wait(wb, 4, "x0", 100, sampled)
    assert "need a group" in waits.credit_wait(wb, 4, "mc", 100, None)


def test_generate_says_its_time_only_when_it_is_slow(wb):
    from workbench.ui import waits

    wb.timing = (0.001, "timed as the model loaded")
    assert waits.generate_wait(wb, 8, 16) == ""  # 128 evaluations: a tenth of a second
    wb.timing = (0.01, "timed as the model loaded")
    assert "about 5 s on this machine (512 image evaluations at 10.0 ms" in waits.generate_wait(wb, 16, 32)


def test_objectives_compute_is_bounded_and_says_its_size_and_time(wb, sampled, monkeypatch):
    from workbench.ui import objectives as ob
    from workbench.ui import waits
    from workbench.ui.jobs import objective_names

    n = len(objective_names())
    wb.objectives_timing = {}
    assert "not timed on this machine yet" in waits.objectives_wait(wb, 1, None, sampled)
    timing.probe_objectives(wb)  # as the model loads
    rates = wb.objectives_timing
    assert rates["advantages"][0] > 0 and rates["update"][0] > 0
    said = waits.objectives_wait(wb, 2, None, sampled)
    cells = sampled.group.group_size * sampled.group.num_steps  # 3 x 4
    seconds = cells * (rates["advantages"][0] + 2 * rates["update"][0])
    assert f"Size: {n} objectives x G=3 x T=4, 2 inner updates: about {timing.shown(seconds)} on this machine" in said
    start = time.perf_counter()
    view = ob.objectives_compute(wb, 2, 1e-4, 1e-4, "step_grpo", None, sampled)[3]
    took = time.perf_counter() - start
    parts = wb.objectives_timing
    assert parts["update"][1] == parts["advantages"][1] == "from the last Compute here"
    assert cells * (parts["advantages"][0] + 2 * parts["update"][0]) <= took  # the press's own parts, timed
    kept = waits.objectives_wait(wb, 2, view, sampled)  # the group's advantages are kept: only the updates left
    assert f"about {timing.shown(2 * cells * parts['update'][0])} on this machine" in kept
    # over the limit: said before the press, refused with the limit named when pressed (a limit this small group
    # reaches within the inner updates' own range, 0..10: the app's G=16, T=32 reach the real one at N=2)
    monkeypatch.setattr(waits, "OBJECTIVES_WORK", n * cells * 3)
    over = 3  # N + 1 = 4 passes of n objectives x G x T: over the limit
    assert f"over the limit of {waits.OBJECTIVES_WORK}" in waits.objectives_wait(wb, over, None, sampled)
    status = ob.objectives_compute(wb, over, 1e-4, 1e-4, "step_grpo", None, sampled)[-1]
    assert f"over the limit of {waits.OBJECTIVES_WORK}" in status and f"{n} objectives x G=3 x T=4" in status


def test_the_welcome_times_learns_example_at_the_measured_rate(wb):
    from workbench.ui.welcome import welcome_text

    wb.timing = None
    assert "in about a minute" not in welcome_text(wb) and "once the model is timed" in welcome_text(wb)
    wb.timing = (0.01, "timed as the model loaded")
    evals = timing.evaluations(LEARN["group"], LEARN["steps"], LEARN["continuations"])
    assert f"in about {timing.shown(evals * 0.01)} on this machine" in welcome_text(wb)
