"""A run's time left, from the timings its own finished iterations wrote (metrics.jsonl), not from the wall clock
(docs/methods.md, *Time estimates*).

The wall clock since the start counts the process start, the model load and the first held-out evaluation: divided
by one finished iteration and multiplied by the iterations left, it said "about 50 min" at the start of a lesson
that took 32. Here the time left is the iterations left times the mean time of this run's recent iterations
(`time/iteration_s`), plus the held-out evaluations still to come (every `eval_every` iterations and the last)
times the mean time of those already made (`time/eval_s`). Its error is the mean's standard error scaled to the
work left (two of them, about 95 % for a steady run), with a floor of 10 % for what the timings leave out (saving
samples and checkpoints) and for a machine whose load changes.
"""

from __future__ import annotations

import math

from workbench.train.run_cost import evaluations_left

RECENT = 10  # iterations whose mean time is the pace: recent enough to follow a change of the machine's load
FLOOR = 0.10  # the smallest error said: the per-iteration timings leave out saving samples and checkpoints


def _mean_and_error(values: list[float]) -> tuple[float, float]:
    """(mean, standard error of the mean) of `values` (error 0 for a single value: the floor covers it)."""
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, 0.0
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return mean, math.sqrt(var / len(values))


def time_left(metrics: list[dict], total: int, eval_every: int | None = None) -> tuple[float, float] | None:
    """(seconds left, error in seconds) of a run started for `total` iterations, from its metrics records; None
    before the first iteration has finished."""
    iterations = [r for r in metrics if isinstance(r.get("iteration"), int) and r["iteration"] > 0
                  and isinstance(r.get("time/iteration_s"), (int, float))]
    if not iterations:
        return None
    done = max(r["iteration"] for r in iterations)
    pace, pace_error = _mean_and_error([r["time/iteration_s"] for r in iterations[-RECENT:]])
    left = max(0, total - done)
    seconds, error = left * pace, left * 2 * pace_error
    evals = [r["time/eval_s"] for r in metrics if isinstance(r.get("time/eval_s"), (int, float))]
    n_evals = evaluations_left(done, total, eval_every)
    if evals and n_evals:
        cost, cost_error = _mean_and_error(evals)
        seconds, error = seconds + n_evals * cost, error + n_evals * 2 * cost_error
    return seconds, max(error, FLOOR * seconds)
