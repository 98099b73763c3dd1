"""Per-cell errors, classes and rates on hand-made numbers (docs/methods.md "Credit uncertainty")."""

import math

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


def test_variance_of_independent_and_paired_values():
    # G = 1, T = 3: states 1 and 2 with K = 3 continuations each
    branches = torch.tensor([[[1.0, 2.0, 3.0], [2.0, 4.0, 9.0]]])
    var1, var2 = 1.0 / 3, 13.0 / 3  # sample variances 1 and 13, divided by n = 3
    cov = (-1 * -3 + 0 * -1 + 1 * 4) / 2 / 3  # paired covariance 3.5 of the means: m c / (n_a n_b) = 3 * 3.5 / 9
    start = torch.tensor([0.25])
    ind = credit_variance(branches, start, [0, 1, 2, 3], paired=False)[0]
    crn = credit_variance(branches, start, [0, 1, 2, 3], paired=True)[0]
    assert ind.tolist() == pytest.approx([0.25 + var1, var1 + var2, var2])
    assert crn.tolist() == pytest.approx([0.25 + var1, var1 + var2 - 2 * cov, var2])  # start and end: no pairs
    diffs = torch.tensor([1.0, 2.0, 6.0])  # equal K: Var = sample var of the paired differences / K
    assert float(crn[1]) == pytest.approx(float(diffs.var() / 3))
    chunk = credit_variance(branches, start, [0, 3], paired=True)[0]  # one chunk: V(x_0) = r has no error
    assert chunk.tolist() == pytest.approx([0.25])


def test_unequal_counts_pair_only_the_shared_continuations():
    branches = torch.tensor([[[1.0, 2.0, NAN, NAN], [2.0, 4.0, 9.0, 5.0]]])  # K = 2 and 4
    got = credit_variance(branches, torch.zeros(1), [0, 1, 2, 3], paired=True)[0]
    var1, var2 = 0.5 / 2, branches[0, 1].var().item() / 4
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
    assert a["correlation"] == pytest.approx(float(torch.corrcoef(torch.stack([est.flatten(), ref.flatten()]))[0, 1]))
