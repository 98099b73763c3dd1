"""The numerics of credit continuations (workbench/core/precision.py; docs/methods.md "Continuation numerics")."""

import pytest
import torch
from test_credit import PROMPT, mean_red  # the credit tests' prompt and reward

from workbench.core.errors import WorkbenchError
from workbench.core.precision import evaluation_numerics, native_bf16, resolve_precision
from workbench.flow.sampler import sample_group
from workbench.flow.trajectory import SamplingConfig
from workbench.rl.credit import measure_credit, refine
from workbench.rl.credit_estimators import run_continuations


@pytest.fixture(scope="module")
def group(random_policy):
    return sample_group(random_policy, PROMPT, SamplingConfig(group=4, steps=5, seed=1))


@pytest.fixture(scope="module")
def both(random_policy, group):
    """The same measurement in float32 and in bfloat16."""
    return {p: measure_credit(random_policy, group, mean_red, continuations=4, chunks="2,3", precision=p)
            for p in ("float32", "bfloat16")}


def test_names_resolve_and_an_unknown_one_lists_the_valid_ones(monkeypatch):
    assert resolve_precision("float32", "cpu") == "float32" and resolve_precision("bfloat16", "cpu") == "bfloat16"
    with pytest.raises(WorkbenchError, match="unknown precision 'half'; valid: auto, float32, bfloat16"):
        resolve_precision("half", "cpu")
    for native, expected in ((False, "float32"), (True, "bfloat16")):
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda n=native: n)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
        assert native_bf16("cpu") is native and resolve_precision("auto", "cpu") == expected


def test_a_half_precision_model_computes_in_its_own_dtype():
    assert resolve_precision("auto", "cpu", torch.float16) == "float16"
    assert resolve_precision("bfloat16", "cpu", torch.bfloat16) == "bfloat16"
    with pytest.raises(WorkbenchError, match="weights are float16: its continuations run in float16, not float32"):
        resolve_precision("float32", "cpu", torch.float16)
    layer = torch.nn.Linear(4, 4).to(torch.float16)
    with evaluation_numerics("float16", "cpu"):  # nothing to cast
        assert layer(torch.randn(2, 4, dtype=torch.float16)).dtype == torch.float16


def test_the_context_sets_the_dtype_of_model_evaluations():
    layer, x = torch.nn.Linear(4, 4), torch.randn(2, 4)
    with evaluation_numerics("float32", "cpu"):
        assert layer(x).dtype == torch.float32
    with evaluation_numerics("bfloat16", "cpu"):
        assert layer(x).dtype == torch.bfloat16
    assert layer(x).dtype == torch.float32  # nothing stays changed


def test_bfloat16_continuations_differ_from_float32_far_less_than_their_monte_carlo_spread(both):
    lo, hi = both["bfloat16"].continuation_rewards, both["float32"].continuation_rewards
    assert both["bfloat16"].precision == "bfloat16" and both["bfloat16"].summary()["precision"] == "bfloat16"
    assert not torch.equal(lo, hi)  # the numerics did change
    assert (lo - hi).abs().mean() < 0.1 * hi.std(-1).mean()  # but by a small part of the Monte-Carlo spread


def test_refinement_continues_in_the_numerics_of_the_measurement(random_policy, group, both):
    credit = both["bfloat16"]
    refined = refine(credit, random_policy, group, mean_red, budget=8)
    assert refined.precision == "bfloat16"
    old = credit.continuation_rewards.shape[-1]
    new = refined.continuation_rewards[..., old:]  # (G, T - 1, M') the refinement's continuations, NaN elsewhere
    cells = new.isfinite().nonzero()  # (R, 3) = (i, s - 1, k - old)
    rows = cells + torch.tensor([0, 1, old])  # (R, 3) = (i, s, k)
    for precision, same in (("bfloat16", True), ("float32", False)):
        again = run_continuations(random_policy, group, mean_red, rows, credit.seed, credit.crn, precision=precision)
        assert torch.equal(again, new[new.isfinite()]) is same
