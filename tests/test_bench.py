"""workbench bench's timing helpers (the figures themselves are benchmarks, not tests)."""

from __future__ import annotations

from workbench.cli import bench


def test_a_timed_pair_puts_each_function_first_in_every_other_pair_and_keeps_their_times_apart(monkeypatch):
    clock, calls = [0.0], []

    def run(name: str, seconds: float):
        def fn():
            calls.append(name)
            clock[0] += seconds  # what the function takes, on a clock only the functions move
        return fn

    monkeypatch.setattr(bench.time, "perf_counter", lambda: clock[0])
    ta, tb = bench._timed_pair(run("a", 2.0), run("b", 0.5), repeats=4)
    assert calls[:2] == ["a", "b"]  # the warm-up
    pairs = [calls[k:k + 2] for k in range(2, len(calls), 2)]
    assert pairs == [["a", "b"], ["b", "a"], ["a", "b"], ["b", "a"]]
    assert ta == [2.0] * 4 and tb == [0.5] * 4  # each function's own times, whichever ran first
