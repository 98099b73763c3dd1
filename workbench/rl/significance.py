"""Calibrated significance for credit cells (docs/methods.md "Credit uncertainty", "False-call rate").

A cell's error is estimated from a few continuations, so its t = d / se follows a Student t with few
degrees of freedom, not a normal: at M = 4 a normal z = 2 threshold calls about 14 % of null cells
determined instead of 4.6 %. Here the user's z keeps its familiar meaning (a two-sided false-call rate
alpha = P(|N(0, 1)| > z), 4.6 % at z = 2) and each cell is tested against the Student t of its own degrees
of freedom; a cell tested again after refinement divides alpha by its number of looks (Bonferroni).

The t test assumes a continuous reward. A few-valued reward (0 or 1, a score that saturates) gives tied
continuation rewards, and with ties the spread of a few continuations is often 0 by chance: |d| / se is then
infinite and the cell "determined" whatever its credit (a 0/1 reward at M = 2 called 12.5 % of null cells).
Cells whose rewards tie are therefore tested exactly instead: a sign-flip test of the paired differences under
common random numbers, a two-sample permutation test otherwise (`sign_flip_p`, `permutation_p`). Both are
valid given the observed values whatever their distribution, so the choice, which depends on the values only
through whether they tie, keeps the rate; a continuous reward never ties and keeps the t test.

Pure functions over tensors and arrays; the t tail is the regularised incomplete beta function, computed with
Lentz's continued fraction (Numerical Recipes 6.4) in float64, so no SciPy is needed.
"""

from __future__ import annotations

import math

import numpy as np
import torch

_TINY = 1e-300


def false_call_rate(z: float) -> float:
    """alpha = P(|N(0, 1)| > z): the share of cells with no credit that a test at z calls determined."""
    return math.erfc(z / math.sqrt(2))


def _beta_fraction(a: torch.Tensor, b: torch.Tensor, x: torch.Tensor, iters: int = 300,
                   eps: float = 1e-15) -> torch.Tensor:
    """Continued fraction of the incomplete beta function (modified Lentz), element-wise, float64; stops when
    every element's last factor is within eps of 1 (tens of terms where x < (a + 1) / (a + b + 2)), at most iters.

    The loop runs in NumPy: the same float64 operations in the same order (bit for bit torch's result), but a
    (G, T) array's operation costs ~1 us there against ~5 us for a tensor's, and a re-chunk (Chunks tab edits)
    spent half its time here before."""
    def tiny(v):
        return np.where(np.abs(v) < _TINY, _TINY, v)
    device = x.device
    a, b, x = (v.detach().double().cpu().numpy() for v in (a, b, x))
    c = np.ones_like(x)
    d = 1 / tiny(1 - (a + b) * x / (a + 1))
    h = d.copy()
    for m in range(1, iters + 1):
        m2 = 2 * m
        num = m * (b - m) * x / ((a - 1 + m2) * (a + m2))
        d, c = 1 / tiny(1 + num * d), tiny(1 + num / c)
        h = h * d * c
        num = -(a + m) * (a + b + m) * x / ((a + m2) * (a + 1 + m2))
        d, c = 1 / tiny(1 + num * d), tiny(1 + num / c)
        delta = d * c
        h = h * delta
        if bool((np.abs(delta - 1) <= eps).all()):
            break
    return torch.from_numpy(np.asarray(h)).to(device)  # np.asarray: a 0-d input leaves NumPy scalars


def incomplete_beta(a: torch.Tensor, b: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Regularised incomplete beta I_x(a, b) for x in [0, 1], element-wise (float64)."""
    a, b, x = (torch.as_tensor(v, dtype=torch.float64) for v in (a, b, x))
    a, b, x = torch.broadcast_tensors(a, b, x)
    inner = x.clamp(1e-300, 1 - 1e-16)
    log_front = (torch.lgamma(a + b) - torch.lgamma(a) - torch.lgamma(b) + a * inner.log()
                 + b * torch.log1p(-inner))
    direct = x < (a + 1) / (a + b + 2)  # the fraction converges fast here; else use I_x(a, b) = 1 - I_{1-x}(b, a)
    front = log_front.exp()
    first, second = torch.where(direct, a, b), torch.where(direct, b, a)  # one fraction per element, on its side
    fraction = front * _beta_fraction(first, second, torch.where(direct, inner, 1 - inner)) / first
    out = torch.where(direct, fraction, 1 - fraction)
    return torch.where(x <= 0, 0.0, torch.where(x >= 1, 1.0, out))


def t_two_sided(t: torch.Tensor, dof: torch.Tensor) -> torch.Tensor:
    """P(|T_nu| > |t|) for a Student t with nu = dof degrees of freedom (real, > 0; inf = normal).

        P(|T_nu| > t) = I_{nu / (nu + t^2)}(nu / 2, 1 / 2)
    """
    t, dof = torch.broadcast_tensors(torch.as_tensor(t, dtype=torch.float64), torch.as_tensor(dof, dtype=torch.float64))
    finite = dof.isfinite()
    nu = torch.where(finite, dof, torch.ones_like(dof))
    student = incomplete_beta(nu / 2, torch.full_like(nu, 0.5), nu / (nu + t * t))
    normal = torch.erfc(t.abs() / math.sqrt(2))
    return torch.where(t.isinf(), 0.0, torch.where(finite, student, normal))


def welch_dof(var_a: torch.Tensor, dof_a: torch.Tensor, var_b: torch.Tensor, dof_b: torch.Tensor) -> torch.Tensor:
    """Welch-Satterthwaite degrees of freedom of a sum of two independent variance estimates:

        nu = (v_a + v_b)^2 / (v_a^2 / nu_a + v_b^2 / nu_b)

    A term with infinite degrees of freedom (a known variance) adds nothing to the denominator; inf when
    the denominator is 0 (both variances known or 0)."""
    den = torch.where(dof_a.isinf(), 0.0, var_a.pow(2) / dof_a) + torch.where(dof_b.isinf(), 0.0, var_b.pow(2) / dof_b)
    return torch.where(den > 0, (var_a + var_b).pow(2) / den.clamp_min(_TINY), torch.inf)


def determined(credit: torch.Tensor, se: torch.Tensor, dof: torch.Tensor, z: float,
               looks: torch.Tensor | None = None, exact: torch.Tensor | None = None) -> torch.Tensor:
    """(...) bool: the credit differs from 0 at the two-sided false-call rate alpha(z) / looks.

    credit, se, dof, looks, exact: same shape. Where `exact` holds a p-value (cells whose rewards tie:
    `sign_flip_p`, `permutation_p`) that p-value decides; elsewhere (NaN) |d| / se against a Student t with
    `dof`; se = 0 with d != 0 is determined there (a deterministic estimator: no Monte-Carlo error). d = 0 and
    a NaN error never are.
    """
    alpha = torch.full(credit.shape, false_call_rate(z), dtype=torch.float64)
    if looks is not None:
        alpha = alpha / looks.double()  # Bonferroni over the looks a refined cell has had
    ratio = credit.double().abs() / se.double()
    ratio = torch.where(ratio.isnan() | (credit == 0), 0.0, ratio)
    p = t_two_sided(ratio, torch.where(dof.isnan(), 1.0, dof.double()))
    if exact is not None:
        p = torch.where(exact.isnan(), p, exact.double())
    return (p < alpha) & ~se.isnan() & (credit != 0)


# ---------------------------------------------------------------- exact tests where rewards tie

SUPPORT_BITS = 16  # log2 of the support points of an exact permutation distribution before sampling it instead
PERMUTATIONS = 9999  # sampled sign flips or relabellings when the exact support is larger
_REL = 1e-9  # relative tolerance when comparing sums of equal values added in another order


def has_ties(values: torch.Tensor) -> torch.Tensor:
    """(...) bool: two of the non-NaN values (..., n) of a row are equal (NaN is padding)."""
    s = values.sort(dim=-1).values  # NaN sorts last
    return ((s[..., 1:] == s[..., :-1]) & ~s[..., 1:].isnan()).any(dim=-1)


def _merge(points: np.ndarray, weights: np.ndarray, tol: float) -> tuple[np.ndarray, np.ndarray]:
    """Sum the weights of support points that are equal up to `tol` (sums of the same values in another
    order differ in the last bits)."""
    keys = np.round(points / tol) if tol > 0 else points
    uniq, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return points.ravel()[first], np.bincount(inverse.ravel(), weights=weights.ravel())


def sign_flip_p(diffs: np.ndarray, seed: int = 0) -> float:
    """Exact two-sided p-value of the sign-flip (Fisher-Pitman) test that the paired differences `diffs` (m,)
    have mean 0: P(|sum_k e_k |D_k|| >= |sum_k D_k|) over independent fair signs e_k, which under the null
    (D symmetric about 0) is the distribution of the sum given the |D_k|. The distribution is built by
    convolution over the distinct |D| values (a binomial per value), so a few-valued reward costs a few
    operations; past 2^SUPPORT_BITS points it is sampled (`PERMUTATIONS` flips, p = (1 + hits) / (1 + n))."""
    d = np.abs(diffs[diffs != 0])
    observed = abs(float(diffs.sum()))
    if d.size == 0:
        return 1.0
    scale = float(d.max()) * d.size
    values, counts = np.unique(d, return_counts=True)
    if np.log2(counts + 1.0).sum() > SUPPORT_BITS:
        flips = np.random.default_rng(seed).integers(0, 2, (PERMUTATIONS, d.size)) * 2 - 1
        hits = int((np.abs(flips @ d) >= observed - _REL * scale).sum())
        return (1 + hits) / (1 + PERMUTATIONS)
    points, weights = np.zeros(1), np.ones(1)
    for v, n in zip(values, counts):
        b = np.arange(n + 1)
        step = v * (2 * b - n)  # sum of n signed copies of v with b plus signs
        prob = np.array([math.comb(int(n), int(k)) for k in b], dtype=np.float64) / 2.0 ** n
        points, weights = _merge(points[:, None] + step[None, :], weights[:, None] * prob[None, :], _REL * scale)
    return float(min(1.0, weights[np.abs(points) >= observed - _REL * scale].sum()))


def permutation_p(a: np.ndarray, b: np.ndarray, seed: int = 0) -> float:
    """Exact two-sided p-value of the two-sample permutation test of mean(b) - mean(a): the share of the
    C(n_a + n_b, n_b) ways to split the pooled values whose difference is at least as large. The difference
    is linear in the sum of b's part, so the distribution of that sum is built over the distinct pooled values
    (how many copies of each go to b, weighted by binomial coefficients; Fisher's exact test for two values).
    Few-valued rewards keep that support small (sums on a lattice); past 2^SUPPORT_BITS points it is sampled
    instead (`PERMUTATIONS` relabellings, p = (1 + hits) / (1 + n))."""
    pooled = np.concatenate([a, b])
    n, nb = pooled.size, b.size
    centre = nb * pooled.sum() / n  # the sum of b's part where the means agree
    observed = abs(float(b.sum()) - centre)
    tol = _REL * (float(np.abs(pooled).max()) * n or 1.0)
    values, counts = np.unique(pooled, return_counts=True)
    if len(values) == 1:
        return 1.0
    if len(values) == 2:  # Fisher's exact test: x copies of the larger value in b, hypergeometric
        x = np.arange(max(0, nb - counts[0]), min(nb, counts[1]) + 1)
        weights = np.array([math.comb(int(counts[1]), int(k)) * math.comb(int(counts[0]), nb - int(k)) for k in x],
                           dtype=np.float64)
        points = nb * values[0] + x * (values[1] - values[0])
        return float(min(1.0, weights[np.abs(points - centre) >= observed - tol].sum() / math.comb(n, nb)))
    table = _split_sums(values, counts, nb, tol)
    if table is None:  # too many distinct sums: sample relabellings
        draws = np.random.default_rng(seed).random((PERMUTATIONS, n)).argpartition(nb - 1, axis=1)[:, :nb]
        hits = int((np.abs(pooled[draws].sum(axis=1) - centre) >= observed - tol).sum())
        return (1 + hits) / (1 + PERMUTATIONS)
    points, weights = table
    return float(min(1.0, weights[np.abs(points - centre) >= observed - tol].sum() / math.comb(n, nb)))


def _split_sums(values: np.ndarray, counts: np.ndarray, nb: int, tol: float) -> tuple[np.ndarray, np.ndarray] | None:
    """The distribution of the sum of nb values drawn without replacement from `counts` copies of each of
    `values`: support points and their numbers of ways. Built value by value, a row per number of copies taken
    so far; None once a row holds more than 2^SUPPORT_BITS points."""
    table = {0: (np.zeros(1), np.ones(1))}
    for v, c in zip(values, counts):
        grown: dict[int, list] = {}
        for k, (points, weights) in table.items():
            for x in range(min(int(c), nb - k) + 1):
                grown.setdefault(k + x, []).append((points + x * v, weights * math.comb(int(c), x)))
        table = {k: _merge(np.concatenate([p for p, _ in parts]), np.concatenate([w for _, w in parts]), tol)
                 for k, parts in grown.items()}
        if max(p.size for p, _ in table.values()) > 2 ** SUPPORT_BITS:
            return None
    return table[nb]
