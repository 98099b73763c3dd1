"""workbench bench's timing helpers (the figures themselves are benchmarks, not tests)."""

from __future__ import annotations

import copy

import pytest
import torch

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


def test_bench_sampling_times_the_recorder_without_the_model_and_gives_the_model_back(random_policy):
    calls = []

    def counting(*args):  # the transformer, counted
        calls.append(1)
        return type(random_policy).denoise(random_policy, *args)

    random_policy.denoise = counting
    try:
        before = dict(vars(random_policy))
        r = bench.bench_sampling(random_policy, group=2, steps=3, repeats=1)
        assert vars(random_policy) == before  # the bare loops ran on a copy
    finally:
        del random_policy.denoise
    assert len(calls) == 2 * 2 * 3  # the warm-up and one pair of both loops, 3 steps each; none in the bare loops
    assert {"recorder_ms_per_step", "recorder_share", "overhead", "pair_overheads"} <= set(r)


def test_bench_sampling_leaves_no_attribute_on_the_policy_that_a_moved_copy_would_inherit(random_policy):
    """An instance attribute `denoise` left behind (the bound method of the original) would make every
    `with_transformer` copy denoise with the original weights: moved log-probs that never moved."""
    before = set(vars(random_policy))
    bench.bench_sampling(random_policy, group=2, steps=2, repeats=1)
    assert set(vars(random_policy)) == before
    moved = random_policy.with_transformer(copy.deepcopy(random_policy.transformer))
    with torch.no_grad():
        for p in moved.transformer.parameters():
            p.add_(0.05)
    x, sigma = torch.randn(1, *random_policy.latent_shape), torch.tensor([0.5])
    cond = random_policy.encode(["a red circle"])
    with torch.no_grad():
        assert not torch.equal(moved.denoise(x, sigma, cond.embeds, cond.pooled),
                               random_policy.denoise(x, sigma, cond.embeds, cond.pooled))


def test_the_recorders_own_work_is_the_difference_of_the_bare_loops_per_step_and_over_the_plain_loop(
        random_policy, monkeypatch):
    timings = iter([([1.0, 1.2, 1.1], [1.0, 1.0, 1.0]),  # with the model: recorded, plain (s)
                    ([0.05, 0.06, 0.07], [0.02, 0.02, 0.02])])  # without it

    monkeypatch.setattr(bench, "_timed_pair", lambda a, b, repeats, label="": next(timings))
    r = bench.bench_sampling(random_policy, group=2, steps=4, repeats=3)
    assert r["overhead"] == pytest.approx(0.1) and r["pair_overheads"] == pytest.approx([0.0, 0.1, 0.2])
    assert r["recorder_ms_per_step"] == pytest.approx(1000 * (0.06 - 0.02) / 4)  # medians' difference per step
    assert r["recorder_share"] == pytest.approx((0.06 - 0.02) / 1.0)  # of the plain loop with the model
