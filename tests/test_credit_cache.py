"""A Credit remembers its classes and halves; a re-chunk reuses what does not depend on the chunks and nothing
that does (the Chunks tab's edits rely on this to stay fast)."""

from dataclasses import replace

import torch

from workbench.rl.credit import Credit


def _credit(sizes=(2, 3, 4, 7)) -> Credit:
    gen = torch.Generator().manual_seed(3)
    g, t, m = 6, 16, 4
    rewards = torch.rand(g, generator=gen)
    # continuation rewards drift towards each trajectory's reward, so some cells are determined and some not
    drift = torch.linspace(0, 1, t - 1)[None, :, None] * (rewards[:, None, None] - rewards.mean())
    continuations = rewards.mean() + drift + 0.05 * torch.randn(g, t - 1, m, generator=gen)
    return Credit(prompt="p", rewards=rewards, advantages=rewards - rewards.mean(), continuation_rewards=continuations,
                  sizes=list(sizes))


def _fresh(credit: Credit) -> Credit:
    return replace(credit)  # the same fields, nothing remembered


def test_a_rechunk_gives_the_classes_and_rates_of_a_fresh_measurement():
    credit = _credit()
    credit.rates(2.0), credit.halves()  # fills the memory
    for spec in ("1,1,14", "4,4,4,4", "16", "8,8"):
        edited = credit.rechunk(spec)
        fresh = _fresh(edited)
        assert torch.equal(edited.chunk_classes(2.0), fresh.chunk_classes(2.0)), spec
        assert torch.equal(edited.step_classes(2.0), fresh.step_classes(2.0)), spec
        assert repr(edited.rates(2.0)) == repr(fresh.rates(2.0)), spec  # repr: NaN errors compare equal
        for a, b in zip(edited.halves(), fresh.halves()):
            assert a.sizes == b.sizes == edited.sizes
            assert repr(a.rates(2.0)) == repr(b.rates(2.0)), spec
        credit = edited


def test_step_classes_are_carried_and_chunk_classes_are_not():
    credit = _credit()
    steps = credit.step_classes(2.0)
    edited = credit.rechunk("8,8")
    assert edited.step_classes(2.0) is steps, "a re-chunk recomputed the step classes"
    assert edited.chunk_classes(2.0).shape == (6, 2), "the chunk classes of the old schedule came along"
    assert credit.chunk_classes(2.0).shape == (6, 4)


def test_classes_are_remembered_per_z():
    credit = _credit()
    assert credit.step_classes(2.0) is credit.step_classes(2.0)
    loose, strict = credit.step_classes(0.5), credit.step_classes(4.0)
    assert int((loose != 0).sum()) > int((strict != 0).sum()), "z did not change which cells are determined"
