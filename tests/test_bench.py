"""workbench bench's timing helpers (the figures themselves are benchmarks, not tests)."""

from __future__ import annotations

from workbench.cli.bench import _timed_pair


def test_a_timed_pair_puts_each_function_first_in_every_other_pair():
    calls = []
    ta, tb = _timed_pair(lambda: calls.append("a"), lambda: calls.append("b"), repeats=4)
    assert calls[:2] == ["a", "b"]  # the warm-up
    pairs = [calls[k:k + 2] for k in range(2, len(calls), 2)]
    assert pairs == [["a", "b"], ["b", "a"], ["a", "b"], ["b", "a"]]
    assert len(ta) == len(tb) == 4 and all(t >= 0 for t in ta + tb)  # each function's own times, in its own list


def test_a_timed_pair_keeps_each_functions_times_apart():
    import time

    ta, tb = _timed_pair(lambda: time.sleep(0.02), lambda: None, repeats=3)
    assert min(ta) >= 0.02 > max(tb)  # b's times never carry a's sleep, whichever ran first
