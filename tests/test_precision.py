"""The numerics of credit continuations (workbench/core/precision.py; docs/methods.md "Continuation numerics")."""

import pytest
import torch
from support import PROMPT, mean_red  # the credit tests' prompt and reward

from workbench.core.errors import WorkbenchError
from workbench.core.precision import evaluation_numerics, native_bf16, resolve_precision
from workbench.rl.credit import measure_credit, refine
from workbench.rl.credit_estimators import run_continuations


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


def test_gelus_are_exact_in_bfloat16_on_the_cpu_and_keep_the_tanh_form_elsewhere(random_policy):
    from diffusers.models.activations import GELU

    from workbench.core.precision import exact_gelu_in_bfloat16

    gelus = [m for m in random_policy.transformer.modules() if isinstance(m, GELU)]
    assert len(gelus) == 7 and all(m.approximate == "tanh" for m in gelus)  # 4 image + 3 context feed-forwards
    assert exact_gelu_in_bfloat16(random_policy.transformer) == 0  # the policy already changed them
    module, gate = gelus[0], torch.linspace(-8, 8, 4001)
    tanh = torch.nn.functional.gelu(gate, approximate="tanh")
    assert torch.equal(module.gelu(gate), tanh)  # float32 keeps the tanh form
    low = module.gelu(gate.bfloat16())
    assert torch.equal(low, torch.nn.functional.gelu(gate.bfloat16()))  # bfloat16 on the CPU takes the erf form
    # ... and is as close to the tanh form as bfloat16 can write it: within the rounding of its outputs
    assert (low.double() - tanh.double()).abs().max() <= (tanh.bfloat16().double() - tanh.double()).abs().max() * 1.5


def test_the_exact_gelu_changes_a_bfloat16_forward_far_less_than_bfloat16_itself(random_policy):
    """The whole model: the velocity under bfloat16 autocast with the erf GELUs is as far from the float32 velocity
    as with the tanh ones, and the two bfloat16 velocities differ by a small part of that distance."""
    from workbench.core.precision import _gelu_classes

    gelu, exact = _gelu_classes()
    x = torch.randn(4, *random_policy.latent_shape, generator=torch.Generator().manual_seed(0))
    sigma = torch.full((4,), 0.6)
    cond = random_policy.encode([PROMPT]).repeat(4)
    with torch.no_grad():
        full = random_policy.velocity(x, sigma, cond, 1.0)
        with evaluation_numerics("bfloat16", "cpu"):
            erf = random_policy.velocity(x, sigma, cond, 1.0).float()
            changed = [m for m in random_policy.transformer.modules() if type(m) is exact]
            try:
                for m in changed:
                    m.__class__ = gelu
                tanh = random_policy.velocity(x, sigma, cond, 1.0).float()
            finally:
                for m in changed:
                    m.__class__ = exact
    assert not torch.equal(erf, tanh)  # the GELUs did change
    off = (tanh - full).abs().mean()
    assert (erf - full).abs().mean() < 1.2 * off and (erf - tanh).abs().mean() < 0.5 * off, (erf - tanh, off)
