"""Student-t tails, Welch-Satterthwaite, per-cell degrees of freedom and the exact tests of tied rewards against
hand values and complete enumeration (docs/methods.md "False-call rate")."""

import itertools
import math

import numpy as np
import pytest
import torch

from workbench.rl.credit_stats import credit_dof
from workbench.rl.significance import (
    determined,
    false_call_rate,
    has_ties,
    incomplete_beta,
    permutation_p,
    sign_flip_p,
    t_two_sided,
    welch_dof,
)

INF = float("inf")


def test_t_tails_match_the_tables_and_the_closed_forms():
    # two-sided 5 % points of t tables (nu = 1, 2, 3, 10) and the normal
    t = torch.tensor([12.7062, 4.302653, 3.182446, 2.228139, 1.959964])
    assert t_two_sided(t, torch.tensor([1.0, 2.0, 3.0, 10.0, INF])).tolist() == pytest.approx([0.05] * 5, abs=2e-6)
    x = torch.tensor([0.3, 1.0, 5.0, 40.0], dtype=torch.float64)
    cauchy = 1 - 2 * torch.atan(x) / math.pi  # nu = 1
    two = 1 - x / torch.sqrt(2 + x * x)  # nu = 2
    assert torch.allclose(t_two_sided(x, torch.ones(4)), cauchy, rtol=1e-9)
    assert torch.allclose(t_two_sided(x, torch.full((4,), 2.0)), two, rtol=1e-9)
    assert float(t_two_sided(torch.tensor(2.0), torch.tensor(1e4))) == pytest.approx(false_call_rate(2.0), rel=1e-3)
    assert false_call_rate(2.0) == pytest.approx(0.0455, abs=1e-4) and false_call_rate(0.0) == 1.0
    assert float(incomplete_beta(torch.tensor(2.0), torch.tensor(3.0), torch.tensor(0.4))) == pytest.approx(0.5248)


def test_welch_satterthwaite_by_hand():
    # v = (0.5, 0.2) with 3 and 9 degrees of freedom: 0.49 / (0.25 / 3 + 0.04 / 9) = 5.5758...
    got = welch_dof(torch.tensor([0.5]), torch.tensor([3.0]), torch.tensor([0.2]), torch.tensor([9.0]))
    assert float(got) == pytest.approx(0.49 / (0.25 / 3 + 0.04 / 9))
    known = welch_dof(torch.tensor([0.5]), torch.tensor([3.0]), torch.tensor([0.0]), torch.tensor([INF]))
    assert float(known) == pytest.approx(3.0)  # a known (0) variance adds nothing
    assert float(welch_dof(torch.zeros(1), torch.tensor([INF]), torch.zeros(1), torch.tensor([INF]))) == INF


def test_cell_degrees_of_freedom_paired_and_independent():
    # G = 1, T = 3: state 1 with M = 3, state 2 with M = 5 (NaN-padded); start variance 0.25 from G = 4 rewards
    continuations = torch.tensor([[[1.0, 2.0, 3.0, math.nan, math.nan], [2.0, 4.0, 9.0, 5.0, 1.0]]])
    start = torch.tensor([0.25])
    v1, v2 = 1.0 / 3, float(continuations[0, 1].var()) / 5
    ind = credit_dof(continuations, start, 3.0, [0, 1, 2, 3], paired=False)[0]
    crn = credit_dof(continuations, start, 3.0, [0, 1, 2, 3], paired=True)[0]
    # from the group-mean start: min(3, 2) (Hsu); between states: Welch, or 3 pairs -> 2; to the image: 5 - 1
    assert ind.tolist() == pytest.approx([2.0, (v1 + v2) ** 2 / (v1 ** 2 / 2 + v2 ** 2 / 4), 4.0])
    assert crn.tolist() == pytest.approx([2.0, 2.0, 4.0])
    chunk = credit_dof(continuations, start, 3.0, [0, 3], paired=True)[0]
    assert chunk.tolist() == [3.0]  # x_T to the image: only the group mean's error (G - 1)
    loose = credit_dof(continuations, start, 3.0, [0, 2, 3], paired=False)[0]  # x_T -> state 2 (M = 5): min(3, 4)
    assert loose.tolist() == pytest.approx([3.0, 4.0])
    own = credit_dof(continuations, start, 3.0, [0, 1, 2, 3], True,
                     start_continuations=torch.tensor([[0.0, 1.0, 5.0]]))[0]
    assert own[0] == 2.0  # own start continuations pair with state 1's (3 pairs)


def test_determined_uses_the_t_quantile_not_the_normal_one():
    se, dof = torch.ones(3), torch.full((3,), 3.0)
    credit = torch.tensor([3.0, 3.3, -3.3])  # t_{3, 0.977} = 3.31...: 3.0 is not significant at 4.6 %, 3.3 barely
    assert determined(credit, se, dof, 2.0).tolist() == [False, False, False]
    assert determined(torch.tensor([3.4]), torch.ones(1), torch.tensor([3.0]), 2.0).tolist() == [True]
    assert determined(torch.tensor([3.4]), torch.ones(1), torch.tensor([3.0]), 2.0, torch.tensor([2.0])).tolist() \
        == [False]  # two looks: alpha / 2
    assert determined(torch.tensor([2.1]), torch.ones(1), torch.tensor([INF]), 2.0).tolist() == [True]


def _binomial_tail(a: int, b: int, x: float) -> float:
    """I_x(a, b) for whole a, b: P(at least a successes in a + b - 1 trials of probability x)."""
    n = a + b - 1
    return sum(math.comb(n, j) * x**j * (1 - x) ** (n - j) for j in range(a, n + 1))


@pytest.mark.parametrize("a,b", [(1, 1), (2, 1), (1, 3), (2, 5), (5, 2), (8, 8), (3, 12)])
def test_incomplete_beta_equals_the_binomial_tail_for_whole_a_and_b(a, b):
    xs = [0.001, 0.05, 0.2, 0.4, 0.5, 0.6, 0.8, 0.95, 0.999]  # both sides of (a + 1) / (a + b + 2)
    got = incomplete_beta(torch.full((9,), float(a)), torch.full((9,), float(b)), torch.tensor(xs, dtype=torch.float64))
    assert got.tolist() == pytest.approx([_binomial_tail(a, b, x) for x in xs], rel=1e-10, abs=1e-14)


def test_incomplete_beta_half_integers_and_ends_by_closed_form():
    x = torch.tensor([0.0, 0.1, 0.3, 0.5, 0.9, 1.0], dtype=torch.float64)
    arcsine = (2 / math.pi) * torch.asin(x.double().sqrt())  # I_x(1/2, 1/2)
    assert torch.allclose(incomplete_beta(0.5, 0.5, x), arcsine, atol=1e-12)
    assert torch.allclose(incomplete_beta(3.5, 1.0, x), x.double() ** 3.5, atol=1e-12)  # I_x(a, 1) = x^a


def test_t_tails_for_one_and_two_degrees_of_freedom_by_closed_form():
    t = torch.tensor([0.0, 0.5, 1.0, 2.0, 10.0, 1e3], dtype=torch.float64)
    cauchy = 1 - (2 / math.pi) * torch.atan(t.double())  # nu = 1
    two = 1 - t.double() / (t.double() ** 2 + 2).sqrt()  # nu = 2
    assert torch.allclose(t_two_sided(t, torch.ones(6)), cauchy, atol=1e-12)
    assert torch.allclose(t_two_sided(-t, torch.full((6,), 2.0)), two, atol=1e-12)
    assert t_two_sided(torch.tensor([INF]), torch.tensor([3.0])).item() == 0.0


# --------------------------------------------------------------------------- exact tests where rewards tie
def _brute_sign_flip(d: list[float]) -> float:
    """P(|sum e_k |d_k|| >= |sum d_k|) over all 2^m sign patterns, counted one by one."""
    observed, hits = abs(sum(d)), 0
    for signs in itertools.product((-1, 1), repeat=len(d)):
        hits += abs(sum(s * abs(v) for s, v in zip(signs, d))) >= observed - 1e-12
    return hits / 2 ** len(d)


def _brute_permutation(a: list[float], b: list[float]) -> float:
    """The share of the C(n, n_b) ways to pick b's part of the pooled values whose |mean(b) - mean(a)| is at
    least the observed one, counted one by one."""
    pooled, nb = a + b, len(b)
    observed = abs(sum(b) / nb - sum(a) / len(a))
    hits = total = 0
    for part in itertools.combinations(range(len(pooled)), nb):
        pb = [pooled[k] for k in part]
        pa = [pooled[k] for k in range(len(pooled)) if k not in part]
        hits += abs(sum(pb) / nb - sum(pa) / len(pa)) >= observed - 1e-12
        total += 1
    return hits / total


def test_sign_flip_by_hand():
    assert sign_flip_p(np.array([1.0, 1.0])) == pytest.approx(0.5)  # both signs agree: 2 of 4 patterns
    assert sign_flip_p(np.array([1.0, 1, 1, 1])) == pytest.approx(2 / 16)  # M = 4 pairs can never reach 4.6 %
    assert sign_flip_p(np.array([0.5] * 6)) == pytest.approx(2 / 64)  # six agreeing pairs can: 3.1 %
    assert sign_flip_p(np.array([1.0, 2.0, 3.0])) == pytest.approx(2 / 8)  # only +-(1 + 2 + 3) reach 6
    assert sign_flip_p(np.array([0.0, 1.0, 1.0])) == pytest.approx(0.5)  # a zero difference adds nothing
    assert sign_flip_p(np.array([1.0, -1.0, 1.0])) == 1.0 and sign_flip_p(np.zeros(3)) == 1.0


def test_permutation_by_hand():
    # 0/1 rewards, 4 against 4: only the two most extreme of the C(8, 4) = 70 splits
    assert permutation_p(np.zeros(4), np.ones(4)) == pytest.approx(2 / 70)
    # a = (0, 0, 0, 1), b = (1, 1, 1, 1): b holds x of the five 1s with weight C(5, x) C(3, 4 - x) (x = 1..4:
    # 5, 30, 30, 5); as extreme as x = 4 are x = 1 and x = 4: 10 / 70 (Fisher's exact test)
    assert permutation_p(np.array([0.0, 0, 0, 1]), np.ones(4)) == pytest.approx(10 / 70)
    assert permutation_p(np.ones(3), np.ones(2)) == 1.0


@pytest.mark.parametrize("seed", range(6))
def test_exact_p_values_equal_counting_every_pattern(seed):
    gen = np.random.default_rng(seed)
    d = list(gen.choice([-2.0, -1.0, 0.0, 1.0, 1.5, 3.0], size=7))  # few values: ties, zeros
    assert sign_flip_p(np.array(d)) == pytest.approx(_brute_sign_flip(d), abs=1e-12)
    a, b = list(gen.choice([0.0, 0.25, 1.0], size=4)), list(gen.choice([0.0, 0.25, 0.5, 1.0], size=5))
    assert permutation_p(np.array(a), np.array(b)) == pytest.approx(_brute_permutation(a, b), abs=1e-12)


def test_a_support_of_hundreds_of_sums_is_still_exact():
    """12 distinct values, 6 against 6: the sums of b's part take up to C(12, 6) = 924 values, well under 2^16,
    so the p-value is the exact share of splits, not a sampled one ((1 + hits) / 10000)."""
    a = [0.0, 0.1, 0.3, 0.7, 1.5, 3.1]
    b = [0.2, 0.4, 0.9, 1.9, 2.5, 4.0]
    exact = _brute_permutation(a, b)
    assert permutation_p(np.array(a), np.array(b)) == pytest.approx(exact, abs=1e-12) and 0.05 < exact < 1


def test_large_supports_are_sampled_with_a_valid_p_value():
    gen = np.random.default_rng(0)
    d = np.arange(1, 18) / 10 * np.where(gen.random(17) < 0.75, 1, -1)  # 17 distinct |d|: 2^17 patterns > 2^16
    exact = _brute_sign_flip_numpy(d)
    sampled = sign_flip_p(d)
    assert abs(sampled - exact) < 4 * math.sqrt(exact * (1 - exact) / 9999) + 1e-4 and sampled >= 1 / 10000
    a, b = np.round(gen.normal(0, 1, 12), 1), np.round(gen.normal(0.8, 1, 12), 1)
    p = permutation_p(a, b)
    assert 1 / 10000 <= p < 0.2  # sampled relabellings: never 0


def _brute_sign_flip_numpy(d: np.ndarray) -> float:
    signs = np.array(list(itertools.product((-1, 1), repeat=len(d))))  # (2^m, m)
    return float((np.abs(signs @ np.abs(d)) >= abs(d.sum()) - 1e-9).mean())


def test_ties_are_found_among_non_padding_values():
    x = torch.tensor([[1.0, 2.0, 2.0], [1.0, 2.0, math.nan], [math.nan, math.nan, 3.0], [0.0, 0.0, math.nan]])
    assert has_ties(x).tolist() == [True, False, False, True]


def test_an_exact_p_value_decides_where_it_is_given():
    credit, se, dof = torch.tensor([1.0, 1.0, 1.0]), torch.tensor([0.0, 0.0, 0.1]), torch.full((3,), 3.0)
    exact = torch.tensor([0.125, 0.03, math.nan])  # a zero spread alone no longer determines a cell
    assert determined(credit, se, dof, 2.0, exact=exact).tolist() == [False, True, True]
    assert determined(credit, se, dof, 2.0, torch.full((3,), 2.0), exact).tolist() == [False, False, True]


def test_t_two_sided_reads_python_numbers_in_double_precision():
    """1.3, 2.7 and 0.1 have no exact float32: read as float64, the p-values equal those of float64 tensors, and the
    normal case equals math.erfc(0.1 / sqrt 2)."""
    as_double = t_two_sided(torch.tensor(1.3, dtype=torch.float64), torch.tensor(2.7, dtype=torch.float64))
    assert t_two_sided(1.3, 2.7).item() == as_double.item()
    assert t_two_sided(0.1, math.inf).item() == pytest.approx(math.erfc(0.1 / math.sqrt(2)), rel=1e-14)


def test_has_ties_looks_along_the_last_axis_of_any_shape():
    """(1, 3, 3): only the first row (1, 2, 1) has two equal values."""
    values = torch.tensor([[[1.0, 2.0, 1.0], [3.0, 4.0, 5.0], [6.0, 7.0, 8.0]]])
    assert has_ties(values).tolist() == [[True, False, False]]
