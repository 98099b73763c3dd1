"""Property-based tests (hypothesis) for the invariants of chunk schedules, credit, advantages and the run store.

Each property holds for every input, so hypothesis draws small random cases (max_examples stays small to keep
the suite fast) and shrinks any failure to a minimal example.
"""

from __future__ import annotations

import tempfile

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.rl.advantages import AdvantageSettings, dr_grpo, gfpo, gpg, grpo
from workbench.rl.chunking import (
    CHUNKERS,
    chunk_boundaries,
    chunk_mean,
    chunk_sum,
    parse_chunk_spec,
)
from workbench.rl.credit import Credit
from workbench.train.store import METRICS, RunStore

FEW = settings(max_examples=50, deadline=None)
steps = st.integers(min_value=1, max_value=24)


@st.composite
def step_and_curve(draw, low: int = 1):
    """T and a non-negative l1_rel curve (T,)."""
    t = draw(st.integers(min_value=low, max_value=24))
    values = draw(st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=t, max_size=t))
    return t, torch.tensor(values, dtype=torch.float64)


@st.composite
def schedule(draw, t: int):
    """A random chunk schedule over t steps, drawn as a set of cut points in 1..t-1."""
    cuts = sorted(draw(st.sets(st.integers(1, t - 1), max_size=t - 1))) if t > 1 else []
    bounds = [0, *cuts, t]
    return [b - a for a, b in zip(bounds, bounds[1:])]


def _assert_schedule(sizes: list[int], t: int) -> None:
    assert sum(sizes) == t and all(isinstance(s, int) and s >= 1 for s in sizes), (sizes, t)


# --- chunk schedules -------------------------------------------------------------------------------------------


@FEW
@given(t=steps, size=st.integers(1, 30))
def test_uniform_sizes_sum_to_the_steps(t, size):
    sizes = CHUNKERS.get("uniform")(t, size=size)
    _assert_schedule(sizes, t)
    assert all(s == size for s in sizes[:-1]) and sizes[-1] <= size


@FEW
@given(t=steps)
def test_temporal_sizes_sum_to_the_steps(t):
    sizes = CHUNKERS.get("temporal")(t)
    _assert_schedule(sizes, t)
    assert len(sizes) == min(t, 4)


@FEW
@given(tc=step_and_curve(), k=st.integers(1, 8))
def test_equal_mass_sizes_sum_to_the_steps(tc, k):
    t, curve = tc
    sizes = CHUNKERS.get("equal_mass")(t, curve, num_chunks=k)
    _assert_schedule(sizes, t)
    assert len(sizes) == min(k, t)


@FEW
@given(tc=step_and_curve(), max_size=st.integers(2, 6))
def test_adaptive_sizes_sum_to_the_steps_and_respect_max_size(tc, max_size):
    t, curve = tc
    sizes = CHUNKERS.get("adaptive")(t, curve, max_size=max_size)
    _assert_schedule(sizes, t)
    assert max(sizes) <= max_size


@FEW
@given(data=st.data(), t=st.integers(2, 24))
def test_boundaries_and_sizes_round_trip(data, t):
    sizes = data.draw(schedule(t))
    cuts = chunk_boundaries(sizes)
    assert parse_chunk_spec(sizes, t) == sizes
    if cuts:
        assert parse_chunk_spec(",".join(map(str, cuts)), t, as_boundaries=True) == sizes


# --- credit telescopes per chunk -------------------------------------------------------------------------------


@FEW
@given(data=st.data(), t=st.integers(1, 12), g=st.integers(1, 4))
def test_chunk_sum_of_step_differences_telescopes(data, t, g):
    sizes = data.draw(schedule(t))
    values = torch.tensor(data.draw(st.lists(st.floats(-5, 5), min_size=g * (t + 1), max_size=g * (t + 1))),
                          dtype=torch.float64).view(g, t + 1)  # (G, T + 1) V at states 0..T
    step = values.diff(dim=1)  # (G, T)
    edges = [0, *chunk_boundaries(sizes), t]
    expected = values[:, edges[1:]] - values[:, edges[:-1]]  # (G, K) V(end) - V(start)
    assert torch.allclose(chunk_sum(step, sizes), expected, atol=1e-9)
    assert torch.allclose(chunk_mean(step, sizes) * torch.tensor(sizes, dtype=torch.float64), expected, atol=1e-9)


@FEW
@given(data=st.data(), t=st.integers(2, 10), g=st.integers(2, 4), k=st.integers(1, 4))
def test_measured_chunk_credit_telescopes_under_any_rechunking(data, t, g, k):
    rewards = torch.tensor(data.draw(st.lists(st.floats(0, 1), min_size=g, max_size=g)))
    continuations = torch.tensor(data.draw(st.lists(st.floats(0, 1), min_size=g * (t - 1) * k,
                                               max_size=g * (t - 1) * k))).view(g, t - 1, k)  # (G, T - 1, K)
    credit = Credit("p", rewards, rewards - rewards.mean(), continuations, [t])
    values = credit.values  # (G, T + 1)
    for sizes in (data.draw(schedule(t)), data.draw(schedule(t))):
        other = credit.rechunk(sizes)
        edges = [0, *chunk_boundaries(sizes), t]
        assert torch.allclose(other.chunk_credit, values[:, edges[1:]] - values[:, edges[:-1]], atol=1e-6)
        assert torch.allclose(other.chunk_credit.sum(1), rewards - values[:, 0], atol=1e-6)  # r - V(x_T)
        assert torch.equal(other.step_credit, credit.step_credit)  # rechunking never changes step credit


# --- advantages ------------------------------------------------------------------------------------------------


@st.composite
def reward_groups(draw):
    """(N, G) float64 rewards; some groups flat (zero variance), some not."""
    n, g = draw(st.integers(1, 4)), draw(st.integers(2, 6))
    rows = []
    for _ in range(n):
        if draw(st.booleans()):
            rows.append([draw(st.floats(-3, 3))] * g)
        else:
            rows.append(draw(st.lists(st.floats(-3, 3), min_size=g, max_size=g)))
    return torch.tensor(rows, dtype=torch.float64)


@FEW
@given(r=reward_groups())
def test_grpo_advantages_have_zero_mean_per_group(r):
    adv = grpo(r, AdvantageSettings(clip=None))
    scale = 1 + adv.values.abs().max()
    assert torch.all(adv.values.mean(dim=1).abs() <= 1e-9 * scale)
    assert torch.all(adv.values[adv.zero_std] == 0)
    varied = ~adv.zero_std
    expected = (r - r.mean(1, keepdim=True)) / (r.std(1, unbiased=False, keepdim=True) + 1e-4)
    assert torch.allclose(adv.values[varied], expected[varied], atol=1e-9)


@FEW
@given(r=reward_groups())
def test_gpg_alpha_is_samples_over_samples_in_varied_groups(r):
    adv = gpg(r, AdvantageSettings(clip=None))
    n, m = r.shape[0], int(adv.zero_std.sum())  # every group has G samples: B / (B - M) = N / (N - flat groups)
    assert adv.alpha == pytest.approx(n / (n - m) if m < n else 1.0, rel=1e-6)  # valid_fraction is float32
    assert torch.all(adv.values.mean(dim=1).abs() <= 1e-9 * (1 + adv.values.abs().max()))
    expected = adv.alpha * (r - r.mean(1, keepdim=True))
    expected[adv.zero_std] = 0
    assert torch.allclose(adv.values, expected, atol=1e-9)
    assert adv.needs_resample == (m == n or (n - m) / n < 0.5)


@FEW
@given(r=reward_groups(), shift=st.floats(-5, 5))
def test_dr_grpo_is_the_centred_reward_and_ignores_a_shift_per_group(r, shift):
    adv = dr_grpo(r, AdvantageSettings(clip=None))
    expected = r - r.mean(1, keepdim=True)
    expected[adv.zero_std] = 0
    assert torch.allclose(adv.values, expected, atol=1e-9)
    assert adv.alpha == 1.0 and adv.kept.all() and not adv.clipped.any()
    assert torch.allclose(dr_grpo(r + shift, AdvantageSettings(clip=None)).values, adv.values, atol=1e-9)


@FEW
@given(r=reward_groups(), clip=st.floats(0.1, 3))
def test_clipping_bounds_every_estimator_and_marks_exactly_the_clipped_samples(r, clip):
    for estimator in (grpo, dr_grpo, gpg):
        free, bound = estimator(r, AdvantageSettings(clip=None)), estimator(r, AdvantageSettings(clip=clip))
        assert torch.equal(bound.values, free.values.clamp(-clip, clip))
        assert torch.equal(bound.clipped, free.values.abs() > clip)


@st.composite
def rewards_and_metric(draw):
    """(N, G) rewards, a (N, G) metric with distinct values per row, and k in 1..G."""
    r = draw(reward_groups())
    n, g = r.shape
    metric = torch.stack([torch.randperm(g, generator=torch.Generator().manual_seed(draw(st.integers(0, 99))))
                          for _ in range(n)]).double()
    return r, metric, draw(st.integers(1, g))


@FEW
@given(case=rewards_and_metric())
def test_gfpo_is_grpo_over_the_top_k_by_the_metric(case):
    r, metric, k = case
    adv = gfpo(r, AdvantageSettings(clip=None, gfpo_keep=k), metric=metric)
    top = metric.argsort(dim=1, descending=True)[:, :k]  # (N, k) the kept samples
    assert torch.equal(adv.kept, torch.zeros_like(adv.kept).scatter(1, top, True))
    kept_r = r.gather(1, top)  # (N, k)
    mean, std = kept_r.mean(1), kept_r.std(1, unbiased=False)
    assert torch.allclose(adv.group_mean, mean, atol=1e-9) and torch.allclose(adv.group_std, std, atol=1e-9)
    expected = torch.zeros_like(r).scatter(1, top, (kept_r - mean[:, None]) / (std[:, None] + 1e-4))
    expected[std < 1e-6] = 0
    assert torch.allclose(adv.values, expected, atol=1e-9)
    assert torch.all(adv.values[~adv.kept] == 0)


@FEW
@given(r=reward_groups(), scale=st.floats(0.5, 4), shift=st.floats(-5, 5))
def test_grpo_is_unchanged_by_an_affine_reward_change_up_to_eps(r, scale, shift):
    """(a r + b - mean) / (a std + eps) = (r - mean) / (std + eps / a): equal once eps is small against std."""
    base = grpo(r, AdvantageSettings(clip=None, eps=0.0, tol=1e-3))
    moved = grpo(scale * r + shift, AdvantageSettings(clip=None, eps=0.0, tol=1e-3 * scale))
    assert torch.equal(moved.zero_std, base.zero_std)
    assert torch.allclose(moved.values, base.values, atol=1e-6)


# --- the run store ---------------------------------------------------------------------------------------------

ops = st.lists(st.one_of(st.just(("append", 0)), st.tuples(st.just("truncate"), st.integers(0, 30)),
                         st.tuples(st.just("torn"), st.integers(1, 20))), max_size=25)


@FEW
@given(script=ops)
def test_any_interleaving_of_append_and_truncate_keeps_iterations_unique_and_ordered(script):
    """The trainer's protocol: append the next iteration; resume from a checkpoint k <= last (truncate to k);
    a crash may leave a torn line. metrics() must then hold exactly iterations 1..last, once each, in order."""
    with tempfile.TemporaryDirectory() as root:
        store, last = RunStore(root), 0
        for op, arg in script:
            if op == "append":
                last += 1
                store.append_metrics({"iteration": last, "reward/mean": last / 10})
            elif op == "truncate":
                last = min(arg, last)
                store.truncate_metrics(last)
            else:
                with open(store.path / METRICS, "ab") as f:
                    f.write(b'{"iteration": 99, "rew'[:arg])
            rows = store.metrics()
            assert [r["iteration"] for r in rows] == list(range(1, last + 1)), script
            assert all(r["reward/mean"] == r["iteration"] / 10 for r in rows)
