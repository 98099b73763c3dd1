"""The buttons' time estimates come from this machine's own timings (`ui.timing`), never from a guess."""

from __future__ import annotations

import re

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
