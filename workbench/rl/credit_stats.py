"""Per-cell uncertainty of measured credit, its classification, and rates with errors (docs/methods.md
"Credit uncertainty", "False-call rate"). Pure functions over tensors: no sampling, no policy.

A cell is a (trajectory i, unit j) pair whose unit runs from state a to state b (a step: b = a + 1; a
chunk: its first and last state). Its credit is d = V(b) - V(a). Each value is a mean of continuation
rewards, so each cell has a standard error; with common random numbers (CRN) the k-th continuations
from a and from b share noise and their covariance is subtracted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from workbench.rl.significance import determined, has_ties, permutation_p, sign_flip_p, welch_dof

MISATTRIBUTED, UNDETERMINED, ALIGNED = -1, 0, 1


def state_counts(continuations: torch.Tensor) -> torch.Tensor:
    """Continuations per state (G, S) of NaN-padded rewards (G, S, M)."""
    return (~continuations.isnan()).sum(-1)


def state_means(continuations: torch.Tensor) -> torch.Tensor:
    """Mean continuation reward per state (G, S); NaN padding (states with fewer continuations) is ignored."""
    return continuations.nanmean(-1)


def _mean_variance(continuations: torch.Tensor) -> torch.Tensor:
    """Var of each state's mean (G, S): unbiased sample variance / n; NaN where n < 2 (no estimate)."""
    n = state_counts(continuations).float()  # (G, S)
    dev = continuations - state_means(continuations)[..., None]  # (G, S, M)
    var = dev.pow(2).nansum(-1) / (n - 1)  # (G, S)
    return torch.where(n >= 2, var / n, torch.nan)


def _paired_covariance(xa: torch.Tensor, xb: torch.Tensor) -> torch.Tensor:
    """Cov(V_a, V_b) of two means (..., ) from rewards (..., M) whose k-th entries share noise.

    Only the m = min(n_a, n_b) pairs present in both share noise, so Cov = m c / (n_a n_b) with c the sample
    covariance over those pairs; 0 where m < 2 (no estimate, and none of the start or end states has pairs).
    """
    both = ~(xa.isnan() | xb.isnan())  # (..., M)
    m = both.sum(-1).float()
    na, nb = (~xa.isnan()).sum(-1).float(), (~xb.isnan()).sum(-1).float()
    a, b = torch.where(both, xa, 0.0), torch.where(both, xb, 0.0)
    ma, mb = a.sum(-1) / m.clamp_min(1), b.sum(-1) / m.clamp_min(1)
    c = ((a - ma[..., None]) * (b - mb[..., None]) * both).sum(-1) / (m - 1).clamp_min(1)
    return torch.where(m >= 2, m * c / (na * nb).clamp_min(1), 0.0)


def credit_variance(continuations: torch.Tensor, start_var: torch.Tensor, edges: list[int], paired: bool,
                    start_continuations: torch.Tensor | None = None,
                    final_scores: torch.Tensor | None = None) -> torch.Tensor:
    """Variance (G, J) of the credit V(e_{j+1}) - V(e_j) of every unit between consecutive edges.

    continuations: (G, T - 1, M) continuation rewards of states 1..T-1, NaN-padded; start_var (G,): variance of
    V(x_T) (state 0), or start_continuations (G, M): the start's own continuations (trajectories that do not share
    x_T), which then count like any state; the final state's value is the reward itself (variance 0), or the
    mean of its `final_scores` (G, R) when a stochastic reward scored the image R times (variance S^2 / R,
    sharing no noise with the continuations). edges: state indices 0 = e_0 < ... < e_J = T. paired:
    continuations share noise (CRN), so Cov(V_a, V_b) is subtracted:

        Var(V_b - V_a) = s_a^2 / n_a + s_b^2 / n_b - 2 m c_ab / (n_a n_b)

    NaN where a state has fewer than 2 continuations.
    """
    var, ext = _extended(continuations, start_var, start_continuations, final_scores)
    a, b = torch.tensor(edges[:-1]), torch.tensor(edges[1:])  # (J,) each
    total = var[:, a] + var[:, b]  # (G, J)
    if paired:
        total = total - 2 * _paired_covariance(ext[:, a], ext[:, b])
    return total.clamp_min(0)


def _extended(continuations: torch.Tensor, start_var: torch.Tensor, start_continuations: torch.Tensor | None = None,
              final_scores: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Variances of the means (G, T + 1) of states 0..T and the continuations (G, T + 1, M) with the final
    state, and the start state unless it has continuations of its own, as empty (NaN) rows (the final scores
    pair with no continuation, so they are not among them)."""
    g, s, k = continuations.shape
    k = k if start_continuations is None else max(k, start_continuations.shape[1])
    pad = torch.full((g, 1, k), torch.nan, dtype=continuations.dtype)
    first = pad.clone()
    if start_continuations is not None:
        first[:, 0, : start_continuations.shape[1]] = start_continuations
    body = torch.cat([continuations, torch.full((g, s, k - continuations.shape[2]), torch.nan)], dim=2)  # (G, T - 1, M)
    ext = torch.cat([first, body, pad], dim=1)  # (G, T + 1, M): states 0..T
    var = _mean_variance(ext)  # (G, T + 1)
    if start_continuations is None:
        var[:, 0] = start_var
    var[:, -1] = 0.0 if final_scores is None else final_scores.var(-1) / final_scores.shape[-1]
    return var, ext


def credit_dof(continuations: torch.Tensor, start_var: torch.Tensor, start_dof: float, edges: list[int],
               paired: bool, start_continuations: torch.Tensor | None = None,
               final_scores: torch.Tensor | None = None) -> torch.Tensor:
    """Degrees of freedom (G, J) of each unit's variance estimate (`credit_variance`), for its Student t.

    A state with n continuations has n - 1; the start value V(x_T) `start_dof` (G - 1 for the group mean, inf
    for a look-ahead value; n - 1 with start_continuations), the final reward inf (no error; R - 1 with R
    `final_scores`). Independent continuations, and units that touch the final state: Welch-Satterthwaite over
    the two terms (`significance.welch_dof`). Units from the group-mean start, and to an image scored several
    times: min(nu_a, nu_b) (Hsu's conservative bound; Welch's estimate jumps towards the other side's degrees of
    freedom whenever a state's few continuations happen to agree, which overshoots the rate at M = 2). Paired
    (CRN) units between two states with continuations: m - 1, m the pairs (the variance of m paired
    differences). NaN where a state has fewer than 2 continuations.
    """
    var, ext = _extended(continuations, start_var, start_continuations, final_scores)
    n = state_counts(ext).double()  # (G, T + 1)
    dof = n - 1
    if start_continuations is None:
        dof[:, 0] = start_dof
    dof[:, -1] = torch.inf if final_scores is None else final_scores.shape[-1] - 1.0
    a, b = torch.tensor(edges[:-1]), torch.tensor(edges[1:])  # (J,) each
    out = welch_dof(var[:, a].double(), dof[:, a], var[:, b].double(), dof[:, b])  # (G, J)
    # Hsu's bound min(nu_a, nu_b) next to the group-mean start and the image's scores (see docs/methods.md)
    hsu = ((a == 0) & (start_continuations is None)) | ((b == a.new_tensor(edges[-1])) & (final_scores is not None))
    out = torch.where(hsu[None, :], torch.minimum(dof[:, a], dof[:, b]), out)
    if paired:
        lowest = 0 if start_continuations is not None else 1
        inner = ((a >= lowest) & (b < ext.shape[1] - 1))[None, :]  # (1, J): both ends have continuations
        pairs = torch.minimum(n[:, a], n[:, b])  # (G, J)
        out = torch.where(inner, pairs - 1, out)
    return torch.where(var[:, a].isnan() | var[:, b].isnan(), torch.nan, out)


def _samples(continuations: torch.Tensor, edges: list[int], first: torch.Tensor, final: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """The rewards behind the two values of every unit, (G, J, N) each, NaN-padded: `first` (G, N_0) those of
    state 0, continuations (G, T - 1, M) those of states 1..T-1, `final` (G, R) those of the image."""
    g, s, m = continuations.shape
    rows = torch.full((g, s + 2, max(m, first.shape[1], final.shape[1])), torch.nan)  # (G, T + 1, N): states 0..T
    rows[:, 0, : first.shape[1]] = first
    rows[:, 1:-1, :m] = continuations
    rows[:, -1, : final.shape[1]] = final
    return rows[:, edges[:-1]], rows[:, edges[1:]]


def exact_p(continuations: torch.Tensor, rewards: torch.Tensor, edges: list[int], paired: bool,
            start_continuations: torch.Tensor | None = None, final_scores: torch.Tensor | None = None,
            start: torch.Tensor | None = None) -> torch.Tensor:
    """Exact p-values (G, J) of the units whose rewards tie, NaN for the others (the t test decides those).

    A unit from a to b compares the rewards behind V_a and V_b (`_samples`). Under common random numbers,
    when both are states with continuations, the m = min(n_a, n_b) paired differences D_k go to the sign-flip
    test (p = 1 when n_a != n_b and their mean has the other sign than d). Against a value without error (the
    final reward scored once; a look-ahead `start` (G,)) the differences from that value go to the sign-flip
    test. Otherwise (independent continuations; the group-mean start, whose rewards are the G `rewards`; the
    image's `final_scores` (G, R)) the two samples go to the two-sample permutation test. A unit ties when
    the absolute differences (what the sign-flip test holds fixed), or the pooled rewards (what the
    permutation test holds fixed), hold two equal values: the choice of test then depends only on what the
    chosen test conditions on, so each keeps its exact level.
    """
    g = rewards.shape[0]
    first = (start_continuations if start_continuations is not None
             else start[:, None] if start is not None else rewards[None, :].expand(g, -1))  # (G, N_0)
    final = rewards[:, None] if final_scores is None else final_scores  # (G, R)
    xa, xb = _samples(continuations, edges, first, final)  # (G, J, N) each
    a, b = torch.tensor(edges[:-1]), torch.tensor(edges[1:])  # (J,)
    own_start = start_continuations is not None
    both = (a >= (0 if own_start else 1)) & (b < edges[-1]) & paired  # (J,) paired continuations at both ends
    fixed_b = (b == edges[-1]) & (final_scores is None)  # (J,) the image's reward, scored once
    fixed_a = (a == 0) & (start is not None and not own_start)  # (J,) a look-ahead start value
    fixed = torch.where(fixed_b[None, :, None], xb[..., :1], xa[..., :1])  # (G, J, 1)
    sample = torch.where(fixed_b[None, :, None], xa, xb)  # (G, J, N)
    diffs = torch.where(both[None, :, None], xb - xa,  # (G, J, N) whose sum has the sign of d
                        torch.where(fixed_b[None, :, None], fixed - sample, sample - fixed))
    one = (both | fixed_a | fixed_b)[None, :]  # (1, J) a one-sample (sign-flip) test
    tied = torch.where(one, has_ties(diffs.abs()), has_ties(torch.cat([xa, xb], -1)))  # (G, J)
    out = torch.full(tied.shape, torch.nan, dtype=torch.float64)
    d_all, a_all, b_all = (x.double().numpy() for x in (diffs, xa, xb))  # NumPy: ~1 us an index, not ~5
    for i, j in tied.nonzero().tolist():
        if bool(one[0, j]):
            d = d_all[i, j][~np.isnan(d_all[i, j])]
            out[i, j] = sign_flip_p(d)
            if bool(both[j]) and np.sign(d.sum()) != np.sign(np.nanmean(b_all[i, j]) - np.nanmean(a_all[i, j])):
                out[i, j] = 1.0  # the pairs point the other way than the means of all continuations
        else:
            out[i, j] = permutation_p(a_all[i, j][~np.isnan(a_all[i, j])], b_all[i, j][~np.isnan(b_all[i, j])])
    return out


def grow_looks(looks: torch.Tensor | None, look_rounds: torch.Tensor | None, rows: torch.Tensor, states: torch.Tensor,
               shape: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The per-state look counts (G, S) and round masks (G, S) int64 after one refinement round that grew the
    states (rows[k], states[k]): each grown state counts the round once, however many continuations it got,
    and its mask gets the round's bit (the next unused one: rounds so far = the highest bit in use + 1)."""
    looks = torch.zeros(shape) if looks is None else looks.clone()
    rounds = torch.zeros(shape, dtype=torch.int64) if look_rounds is None else look_rounds.clone()
    done = int(rounds.max()).bit_length() if rounds.numel() else 0  # bits 0..done-1 are in use
    if done >= 62:  # each round doubles M somewhere: no budget comes near this
        raise ValueError("more than 62 refinement rounds")
    grew = (rows, states)
    looks[grew] = looks[grew] + 1  # indexing reads before it writes: repeated (row, state) pairs count once
    rounds[grew] = rounds[grew] | (1 << done)
    return looks, rounds


def unit_looks(looks: torch.Tensor | None, look_rounds: torch.Tensor | None, edges: list[int], g: int) -> torch.Tensor:
    """(G, J) times each unit between consecutive edges has been tested: once when measured, and again in every
    refinement round that grew either of its end states, a round that grew both counted once, from the round
    masks (G, T - 1) of states 1..T-1. From the per-state counts `looks` alone (no masks): 1 + their sum, an
    upper bound that counts such a round twice."""
    a, b = edges[:-1], edges[1:]
    t = edges[-1]
    if look_rounds is not None:
        rounds = torch.zeros(g, t + 1, dtype=torch.int64)
        rounds[:, 1:-1] = look_rounds
        either = rounds[:, a] | rounds[:, b]  # (G, J)
        return 1 + sum((either >> r) & 1 for r in range(63)).double()
    grown = torch.zeros(g, t + 1)
    if looks is not None:
        grown[:, 1:-1] = looks
    return 1 + grown[:, a] + grown[:, b]


def classify(credit: torch.Tensor, se: torch.Tensor, advantages: torch.Tensor, z: float,
             dof: torch.Tensor | None = None, looks: torch.Tensor | None = None,
             exact: torch.Tensor | None = None) -> torch.Tensor:
    """Classes (G, J) int8: MISATTRIBUTED (-1) or ALIGNED (+1) when d sign(A) is significant at the two-sided
    false-call rate alpha(z) = P(|N(0, 1)| > z) against a Student t with `dof` (G, J) degrees of freedom
    (None: normal), or by the exact p-value in `exact` (G, J) where it is not NaN (`exact_p`), alpha divided
    by `looks` (G, J) for refined cells; else UNDETERMINED (0). A NaN error (no estimate) is undetermined."""
    signed = credit * advantages.sign()[:, None]  # (G, J)
    dof = torch.full(credit.shape, torch.inf, dtype=torch.float64) if dof is None else dof
    sure = determined(signed, se, dof, z, looks, exact)  # (G, J) bool
    cls = torch.where(signed > 0, ALIGNED, MISATTRIBUTED)
    return torch.where(sure, cls, UNDETERMINED).to(torch.int8)


def ratio_and_se(x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """R = sum x / sum y over cells (G, J), with the linearised standard error clustered by trajectory:

        X_i = sum_j x_ij, Y_i = sum_j y_ij,   se(R) = sqrt(n / (n - 1) sum_i (X_i - R Y_i)^2) / sum_i Y_i

    over the n trajectories with sum_j y_ij > 0 (cells of one trajectory are not independent). NaN when sum y = 0.
    """
    big_x, big_y = x.sum(-1).double(), y.sum(-1).double()  # (G,)
    keep = big_y > 0
    n, total = int(keep.sum()), float(big_y.sum())
    if total <= 0:
        return math.nan, math.nan
    r = float(big_x.sum()) / total
    if n < 2:
        return r, math.nan
    resid = (big_x - r * big_y)[keep]
    return r, float((n / (n - 1) * resid.pow(2).sum()).sqrt() / total)


@dataclass
class Rates:
    """What a user reads for one kind of cell (steps or chunks); every share comes with its error."""

    misattributed: float  # misattributed cells / determined cells
    misattributed_se: float
    determined: float  # determined cells / cells (misattributed or aligned by more than z errors)
    determined_se: float
    mass_against: float  # share of absolute credit whose sign is against the advantage
    mass_against_se: float
    plain: float  # plain sign rate: credit against the advantage / cells, no errors considered
    plain_se: float
    cells: int  # cells counted (trained, advantage not 0)
    determined_cells: int
    fixed_cells: int = 0  # counted cells whose credit is the raw advantage by construction (always aligned)

    @property
    def by_construction(self) -> bool:
        """Every counted cell is fixed by construction: the rates describe the definition, not the policy."""
        return self.cells > 0 and self.fixed_cells == self.cells


def rates(credit: torch.Tensor, classes: torch.Tensor, advantages: torch.Tensor, valid: torch.Tensor,
          fixed: torch.Tensor | None = None) -> Rates:
    """Rates over the valid cells (G, J) bool of a credit map (G, J) and its classes (G, J); `fixed` (G, J)
    bool marks cells whose credit is the raw advantage by construction (counted, and reported)."""
    v = valid.double()
    det = (classes != UNDETERMINED).double() * v  # (G, J)
    wrong = (classes == MISATTRIBUTED).double() * v
    against = (credit * advantages.sign()[:, None] < 0).double() * v
    mass = credit.abs().double() * v
    m, m_se = ratio_and_se(wrong, det)
    d, d_se = ratio_and_se(det, v)
    w, w_se = ratio_and_se(against * mass, mass)
    p, p_se = ratio_and_se(against, v)
    n_fixed = 0 if fixed is None else int((fixed & valid).sum())
    return Rates(m, m_se, d, d_se, w, w_se, p, p_se, int(v.sum()), int(det.sum()), n_fixed)


def agreement(estimate: torch.Tensor, reference: torch.Tensor, valid: torch.Tensor,
              determined: torch.Tensor | None = None) -> dict[str, float]:
    """How an estimator's credit (G, J) tracks a reference (G, J) on the valid cells: the share of equal signs
    (also among the cells `determined` in the reference) and the Pearson correlation."""
    e, r = estimate[valid].double(), reference[valid].double()
    same = (e.sign() == r.sign()).double()
    # NaN without two cells; torch.corrcoef would give it too, with a warning about degrees of freedom
    corr = float(torch.corrcoef(torch.stack([e, r]))[0, 1]) if e.numel() > 1 else math.nan
    out = {"sign_agreement": float(same.mean()), "correlation": corr, "cells": int(e.numel())}  # mean of none: NaN
    if determined is not None:
        d = determined[valid]
        out["sign_agreement_determined"] = float(same[d].mean())  # NaN without a determined cell
        out["determined_cells"] = int(d.sum())
    return out
