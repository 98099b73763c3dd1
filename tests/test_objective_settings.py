"""The edges of ObjectiveSettings' ranges (docs/methods.md "Objectives"): what is allowed is allowed."""

from __future__ import annotations

import pytest

from workbench.core.errors import WorkbenchError
from workbench.rl.objectives import ObjectiveSettings


def test_clip_ranges_include_zero_and_exclude_one():
    assert ObjectiveSettings(clip_low=0.0).eps_high == 0.0  # 0: every moved ratio is clipped
    assert ObjectiveSettings(clip_low=0.2, clip_high=0.0).eps_high == 0.0
    assert ObjectiveSettings(clip_low=0.2).eps_high == 0.2  # no clip_high: symmetric
    for bad in (1.0, -1e-9):
        with pytest.raises(WorkbenchError, match="clip_low must be in"):
            ObjectiveSettings(clip_low=bad)
    with pytest.raises(WorkbenchError, match="clip_high must be >= 0"):
        ObjectiveSettings(clip_high=-0.1)
    assert ObjectiveSettings(kl_beta=0.0).kl_beta == 0.0
    with pytest.raises(WorkbenchError, match="kl_beta must be >= 0"):
        ObjectiveSettings(kl_beta=-0.01)
    for bad in ([], [2, 0], [1.5, 2]):
        with pytest.raises(WorkbenchError, match="chunks must be a non-empty list"):
            ObjectiveSettings(chunks=bad)
