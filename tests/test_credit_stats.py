"""Per-cell errors, classes and rates on hand-made numbers (docs/methods.md "Credit uncertainty")."""

import math
import statistics
import warnings

import pytest
import torch

from workbench.rl.credit_stats import (
    ALIGNED,
    MISATTRIBUTED,
    UNDETERMINED,
    agreement,
    classify,
    credit_variance,
    rates,
    ratio_and_se,
)

NAN = float("nan")


def test_classes_follow_the_definition():
    credit = torch.tensor([[0.5, -0.5, 0.1, -0.1, 0.3], [0.5, -0.5, 0.1, 0.0, 0.3]])
    se = torch.tensor([[0.2, 0.2, 0.2, 0.0, NAN], [0.2, 0.2, 0.2, 0.0, 0.1]])
    adv = torch.tensor([1.0, -1.0])
    got = classify(credit, se, adv, z=2.0)
    # row 0 (A > 0): 0.5 > 0.4 aligned; -0.5 < -0.4 misattributed; 0.1 inside; -0.1 with se 0 misattributed;
    # NaN error (fewer than 2 continuations): undetermined. Row 1 (A < 0): signs flip; d = 0 is never determined
    assert got.tolist() == [[ALIGNED, MISATTRIBUTED, UNDETERMINED, MISATTRIBUTED, UNDETERMINED],
                            [MISATTRIBUTED, ALIGNED, UNDETERMINED, UNDETERMINED, MISATTRIBUTED]]
    assert classify(credit, se, adv, z=3.0)[0, 0] == UNDETERMINED  # 0.5 < 3 x 0.2
    # A = 0 gives no direction to agree with: every cell of that trajectory stays undetermined, whatever its error
    assert classify(credit, se, torch.tensor([0.0, -1.0]), z=2.0)[0].tolist() == [UNDETERMINED] * 5


def test_variance_of_independent_and_paired_values():
    # G = 1, T = 3: states 1 and 2 with M = 3 continuations each
    continuations = torch.tensor([[[1.0, 2.0, 3.0], [2.0, 4.0, 9.0]]])
    var1, var2 = 1.0 / 3, 13.0 / 3  # sample variances 1 and 13, divided by n = 3
    cov = (-1 * -3 + 0 * -1 + 1 * 4) / 2 / 3  # paired covariance 3.5 of the means: m c / (n_a n_b) = 3 * 3.5 / 9
    start = torch.tensor([0.25])
    ind = credit_variance(continuations, start, [0, 1, 2, 3], paired=False)[0]
    crn = credit_variance(continuations, start, [0, 1, 2, 3], paired=True)[0]
    assert ind.tolist() == pytest.approx([0.25 + var1, var1 + var2, var2])
    assert crn.tolist() == pytest.approx([0.25 + var1, var1 + var2 - 2 * cov, var2])  # start and end: no pairs
    diffs = torch.tensor([1.0, 2.0, 6.0])  # equal M: Var = sample var of the paired differences / M
    assert float(crn[1]) == pytest.approx(float(diffs.var() / 3))
    chunk = credit_variance(continuations, start, [0, 3], paired=True)[0]  # one chunk: V(x_0) = r has no error
    assert chunk.tolist() == pytest.approx([0.25])


def test_unequal_counts_pair_only_the_shared_continuations():
    continuations = torch.tensor([[[1.0, 2.0, NAN, NAN], [2.0, 4.0, 9.0, 5.0]]])  # M = 2 and 4
    got = credit_variance(continuations, torch.zeros(1), [0, 1, 2, 3], paired=True)[0]
    var1, var2 = 0.5 / 2, continuations[0, 1].var().item() / 4
    c = (1.0 - 1.5) * (2.0 - 3.0) * 2  # pairs (1, 2), (2, 4) around their own means, / (m - 1) = 1
    assert float(got[1]) == pytest.approx(var1 + var2 - 2 * 2 * c / (2 * 4))
    single = torch.tensor([[[1.0, NAN], [2.0, 3.0]]])  # one continuation: no error estimate
    assert math.isnan(float(credit_variance(single, torch.zeros(1), [0, 1, 2, 3], paired=True)[0, 0]))


def test_ratio_and_its_error_clustered_by_trajectory():
    x = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    y = torch.ones(3, 2)
    r, se = ratio_and_se(x, y)
    # R = 3 / 6; trajectory residuals X_i - R Y_i = 0, 1, -1; se = sqrt(3 / 2 * 2) / 6
    assert r == pytest.approx(0.5) and se == pytest.approx(math.sqrt(3.0) / 6)
    assert math.isnan(ratio_and_se(x, torch.zeros(3, 2))[0])


def test_rates_on_hand_made_cells():
    credit = torch.tensor([[0.5, -0.5, 0.1, 0.2], [0.4, -0.3, 0.05, -0.2]])
    classes = torch.tensor([[1, -1, 0, 1], [-1, 1, 0, 1]], dtype=torch.int8)
    adv = torch.tensor([1.0, -1.0])
    valid = torch.tensor([[True, True, True, False], [True, True, True, True]])
    r = rates(credit, classes, adv, valid)
    assert r.cells == 7 and r.determined_cells == 5
    assert r.misattributed == pytest.approx(2 / 5) and r.determined == pytest.approx(5 / 7)
    assert r.plain == pytest.approx(3 / 7)  # against A: traj 0 step 1, traj 1 steps 0 and 2
    assert r.mass_against == pytest.approx((0.5 + 0.4 + 0.05) / (0.5 + 0.5 + 0.1 + 0.4 + 0.3 + 0.05 + 0.2))
    assert r.misattributed_se > 0 and r.determined_se > 0


def test_agreement_of_two_credit_maps():
    ref = torch.tensor([[1.0, -1.0, 0.5], [0.2, -0.3, 0.1]])
    est = torch.tensor([[2.0, -1.0, -0.5], [0.4, -0.6, 0.2]])
    valid = torch.ones(2, 3, dtype=torch.bool)
    det = torch.tensor([[True, True, False], [False, False, False]])
    a = agreement(est, ref, valid, det)
    assert a["sign_agreement"] == pytest.approx(5 / 6) and a["sign_agreement_determined"] == 1.0
    # Pearson's r from Python's statistics module, not the torch.corrcoef that agreement() calls
    assert a["correlation"] == pytest.approx(statistics.correlation(est.flatten().tolist(), ref.flatten().tolist()))
    assert a["correlation"] == pytest.approx(0.81194, abs=1e-5)


def _three_trajectories():
    """G = 3 trajectories, J = 3 steps; trajectory 2 has no determined cell and its last step is not trained.

    signed credit d sign(A):  traj 0 (A > 0) [ 0.4, -0.2,  0.1]  classes [+1, -1, +1]
                              traj 1 (A < 0) [-0.3,  0.5, -0.2]  classes [-1, +1,  0]
                              traj 2 (A > 0) [ 0.1, -0.1,  (0.2 invalid)]  classes [0, 0, 0]
    """
    credit = torch.tensor([[0.4, -0.2, 0.1], [0.3, -0.5, 0.2], [0.1, -0.1, 0.2]])
    classes = torch.tensor([[1, -1, 1], [-1, 1, 0], [0, 0, 0]], dtype=torch.int8)
    adv = torch.tensor([1.0, -1.0, 2.0])
    valid = torch.tensor([[True, True, True], [True, True, True], [True, True, False]])
    return credit, classes, adv, valid


def test_every_rate_and_its_error_by_hand():
    credit, classes, adv, valid = _three_trajectories()
    fixed = torch.tensor([[False, False, False], [False, False, False], [True, False, True]])
    r = rates(credit, classes, adv, valid, fixed)
    assert (r.cells, r.determined_cells, r.fixed_cells, r.by_construction) == (8, 5, 1, False)
    # se(R) = sqrt(n / (n - 1) sum_i (X_i - R Y_i)^2) / sum_i Y_i over the n trajectories with Y_i > 0.
    # misattributed: X = wrong per trajectory = [1, 1, 0], Y = determined = [3, 2, 0]; R = 2 / 5.
    # Trajectory 2 has Y = 0 and is left out: n = 2, residuals 1 - 1.2 = -0.2, 1 - 0.8 = 0.2,
    # se = sqrt(2 / 1 x 0.08) / 5 = 0.08 (keeping it would give n = 3 and sqrt(3 / 2 x 0.08) / 5 = 0.0693)
    assert r.misattributed == pytest.approx(0.4) and r.misattributed_se == pytest.approx(0.08)
    # determined: X = [3, 2, 0], Y = valid = [3, 3, 2]; R = 5 / 8; residuals 3 - 15/8, 2 - 15/8, 0 - 10/8
    # = 9/8, 1/8, -10/8; sum of squares 182 / 64; se = sqrt(3 / 2 x 182 / 64) / 8
    assert r.determined == pytest.approx(5 / 8)
    assert r.determined_se == pytest.approx(math.sqrt(1.5 * 182 / 64) / 8)
    # plain: against = d sign(A) < 0 on valid cells: X = [1, 2, 1], Y = [3, 3, 2]; R = 1 / 2;
    # residuals -0.5, 0.5, 0; se = sqrt(3 / 2 x 0.5) / 8
    assert r.plain == pytest.approx(0.5) and r.plain_se == pytest.approx(math.sqrt(0.75) / 8)
    # mass against: X = |d| against = [0.2, 0.5, 0.1], Y = |d| = [0.7, 1.0, 0.2]; R = 0.8 / 1.9 = 8 / 19;
    # residuals (3.8 - 5.6) / 19, (9.5 - 8) / 19, (1.9 - 1.6) / 19 = -1.8, 1.5, 0.3 (/ 19); sum sq 5.58 / 361;
    # se = sqrt(3 / 2 x 5.58 / 361) / 1.9
    assert r.mass_against == pytest.approx(8 / 19)
    assert r.mass_against_se == pytest.approx(math.sqrt(1.5 * 5.58 / 361) / 1.9)


def test_one_trajectory_with_determined_cells_has_no_error():
    credit, classes, adv, valid = _three_trajectories()
    rows = torch.tensor([0, 2])  # trajectory 2 determines nothing, so only n = 1 trajectory counts
    r = rates(credit[rows], classes[rows], adv[rows], valid[rows])
    assert r.misattributed == pytest.approx(1 / 3) and math.isnan(r.misattributed_se)
    # determined: X = [3, 0], Y = [3, 2]; R = 3 / 5; residuals 3 - 1.8, 0 - 1.2; se = sqrt(2 x 2.88) / 5
    assert r.determined == pytest.approx(0.6) and r.determined_se == pytest.approx(math.sqrt(5.76) / 5)
    # mass against: X = [0.2, 0.1], Y = [0.7, 0.2] (trajectory 2's last cell is not valid): R = 0.3 / 0.9
    assert r.mass_against == pytest.approx(1 / 3) and r.fixed_cells == 0 and not r.by_construction


def test_a_map_with_no_determined_cell_has_no_misattributed_rate():
    credit, _, adv, valid = _three_trajectories()
    r = rates(credit, torch.zeros_like(credit, dtype=torch.int8), adv, valid)
    assert math.isnan(r.misattributed) and math.isnan(r.misattributed_se)  # 0 / 0 determined cells
    # determined: X = [0, 0, 0], Y = [3, 3, 2]: R = 0 with every residual 0, so se = 0
    assert (r.determined, r.determined_se, r.determined_cells, r.cells) == (0.0, 0.0, 0, 8)
    assert r.plain == pytest.approx(0.5)  # the plain rate needs no errors: as in the three-trajectory case
    assert r.fixed_cells == 0


def test_zero_credit_is_not_against_the_advantage():
    credit = torch.tensor([[0.0, -0.5], [0.0, 0.25]])
    valid = torch.ones(2, 2, dtype=torch.bool)
    r = rates(credit, torch.zeros(2, 2, dtype=torch.int8), torch.tensor([1.0, -1.0]), valid)
    # against: only -0.5 x sign(+1) < 0 and 0.25 x sign(-1) < 0; the two zeros are neither way: 2 of 4
    assert r.plain == pytest.approx(0.5) and r.mass_against == pytest.approx(1.0)


def test_one_fixed_cell_is_by_construction():
    valid = torch.tensor([[True]])
    r = rates(torch.tensor([[0.5]]), torch.ones(1, 1, dtype=torch.int8), torch.tensor([1.0]), valid, valid)
    assert (r.cells, r.fixed_cells, r.by_construction) == (1, 1, True)


def test_agreement_by_hand():
    """Signs and Pearson correlation on the valid cells, worked by hand (docs/methods.md, cheap estimators)."""
    from workbench.rl.credit_stats import agreement

    estimate = torch.tensor([[1.0, -2.0, 3.0], [0.5, 9.0, -1.0]])
    reference = torch.tensor([[2.0, 1.0, 4.0], [1.0, 7.0, -3.0]])
    valid = torch.tensor([[True, True, True], [True, False, True]])  # the 9.0 / 7.0 cell is left out
    determined = torch.tensor([[True, True, False], [False, True, True]])
    out = agreement(estimate, reference, valid, determined)
    # valid cells: e = (1, -2, 3, 0.5, -1), r = (2, 1, 4, 1, -3); signs agree on 4 of 5 (the -2 / 1 cell differs)
    assert out["cells"] == 5 and out["sign_agreement"] == 0.8
    # determined among the valid: (1, -2) and (-1): 2 of 3 agree
    assert out["determined_cells"] == 3 and abs(out["sign_agreement_determined"] - 2 / 3) < 1e-12
    # Pearson r: means e 0.3, r 1.0; sum de*dr = 0.7*1 + -2.3*0 + 2.7*3 + 0.2*0 + -1.3*-4 = 14.0;
    # sum de^2 = 0.49 + 5.29 + 7.29 + 0.04 + 1.69 = 14.8; sum dr^2 = 1 + 0 + 9 + 0 + 16 = 26
    assert abs(out["correlation"] - 14.0 / (14.8 * 26) ** 0.5) < 1e-12
    none_determined = agreement(estimate, reference, valid, torch.zeros_like(valid))
    assert none_determined["determined_cells"] == 0 and none_determined["sign_agreement_determined"] != \
        none_determined["sign_agreement_determined"]  # nan: no determined cell
    one = agreement(estimate, reference, torch.tensor([[True, False, False], [False, False, False]]))
    assert one["cells"] == 1 and one["correlation"] != one["correlation"] and "determined_cells" not in one
    empty = agreement(estimate, reference, torch.zeros_like(valid))
    assert empty["cells"] == 0 and empty["sign_agreement"] != empty["sign_agreement"]


def test_agreement_of_two_cells_correlates_exactly():
    """Two points lie on one line: Pearson r is +1 when the estimate rises with the reference, -1 when it falls."""
    from workbench.rl.credit_stats import agreement

    valid = torch.ones(1, 2, dtype=torch.bool)
    rising = agreement(torch.tensor([[1.0, 2.0]]), torch.tensor([[3.0, 5.0]]), valid)
    falling = agreement(torch.tensor([[1.0, 2.0]]), torch.tensor([[5.0, 3.0]]), valid)
    assert rising["correlation"] == pytest.approx(1.0) and falling["correlation"] == pytest.approx(-1.0)


def test_agreement_without_two_cells_is_nan_without_a_warning():
    """One cell or none has no correlation: NaN, and no warning from torch.corrcoef about degrees of freedom."""
    from workbench.rl.credit_stats import agreement

    estimate, reference = torch.tensor([[1.0, -2.0]]), torch.tensor([[2.0, 1.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        one = agreement(estimate, reference, torch.tensor([[True, False]]), torch.tensor([[False, False]]))
        none = agreement(estimate, reference, torch.zeros(1, 2, dtype=torch.bool), torch.zeros(1, 2, dtype=torch.bool))
    assert one["sign_agreement"] == 1.0 and math.isnan(one["correlation"])
    assert math.isnan(one["sign_agreement_determined"])
    assert all(math.isnan(none[key]) for key in ("sign_agreement", "correlation", "sign_agreement_determined"))
