"""The gradient-weight explainer (workbench.rl.explain): its bookkeeping against finite differences and
docs/methods.md "Gradient weights" closed forms, the chunk invariants, clipping, and moving a copy of the policy."""

from __future__ import annotations

import math

import pytest
import torch

from workbench.core.errors import WorkbenchError
from workbench.rl.explain import explain, moved_log_probs, paired_advantages, paired_estimator
from workbench.rl.objectives import OBJECTIVES, ObjectiveSettings, PolicyInputs

G, T = 4, 6


def case(seed: int = 0, spread: float = 0.3, dtype=torch.float64):
    """Random (new, old) log-probs (G, T) with log-ratios of size `spread`, and advantages (G,) of both signs."""
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(G, T, generator=gen, dtype=dtype)
    new = old + spread * torch.randn(G, T, generator=gen, dtype=dtype)
    adv = torch.tensor([1.3, -0.7, 0.4, -1.0], dtype=dtype)
    return new, old, adv


def finite_difference(name, new, old, adv, settings, mask, h=1e-6) -> torch.Tensor:
    """(G, T) central differences of the objective's loss in each log p_t: independent of autograd."""
    fn = OBJECTIVES.get(name)

    def loss(lp):
        return float(fn(PolicyInputs(lp, old, adv, step_mask=mask), settings).loss)
    grad = torch.zeros_like(new)
    for i in range(G):
        for t in range(T):
            bump = torch.zeros_like(new)
            bump[i, t] = h
            grad[i, t] = (loss(new + bump) - loss(new - bump)) / (2 * h)
    return grad


@pytest.mark.parametrize("name", OBJECTIVES.names())
def test_weights_equal_finite_differences_for_every_objective(name):
    new, old, adv = case(seed=1)
    mask = torch.ones(G, T, dtype=torch.bool)
    mask[1, 4:] = False  # a trajectory with fewer trained steps
    mask[3, 0] = False
    settings = ObjectiveSettings(clip_low=0.2, clip_high=0.25, chunks=[2, 1, 3])
    ex = explain(new, old, adv, settings, [name], step_mask=mask)
    expected = finite_difference(name, new, old, adv, settings, mask)
    assert ex.weight[0] == pytest.approx(expected, abs=1e-7)
    assert bool((ex.weight[0][~mask] == 0).all()) and bool(ex.weight[0].abs().sum() > 0)


def closed_form(name: str, new, old, adv, eps: float, sizes: list[int]) -> torch.Tensor:
    """docs/methods.md "Gradient weights", all steps trained: w = -A r / (B K |c|) per unclipped unit, 0 if clipped."""
    l = new - old  # (G, T)
    unit_sizes = {"step_grpo": [1] * T, "gfpo": [1] * T, "dapo": [1] * T, "gspo": [T], "chunk_grpo": sizes}[name]
    w = torch.zeros_like(l)
    start = 0
    for size in unit_sizes:
        r = l[:, start:start + size].mean(1).exp()  # (G,) the unit's ratio
        clipped = ((adv > 0) & (r > 1 + eps)) | ((adv < 0) & (r < 1 - eps))
        norm = G * T if name == "dapo" else G * len(unit_sizes) * size  # token mean: all steps of the batch
        w[:, start:start + size] = torch.where(clipped, 0.0, -adv * r / norm)[:, None]
        start += size
    return w


@pytest.mark.parametrize("name", ["step_grpo", "gfpo", "dapo", "chunk_grpo", "gspo", "gpg"])
@pytest.mark.parametrize("spread", [0.0, 0.05])
def test_weights_match_the_closed_forms(name, spread):
    new, old, adv = case(seed=2, spread=spread)
    sizes = [2, 1, 3]
    ex = explain(new, old, adv, ObjectiveSettings(clip_low=0.02, chunks=sizes), [name])
    expected = -adv[:, None].expand(G, T) / (G * T) if name == "gpg" else closed_form(name, new, old, adv, 0.02, sizes)
    assert ex.weight[0] == pytest.approx(expected, abs=1e-12)
    if spread:
        assert bool(ex.clipped[0].any()) == (name not in ("gpg", "gspo"))  # GPG never clips; GSPO's mean is small


def test_chunk_size_one_is_step_grpo_and_one_chunk_is_gspo():
    new, old, adv = case(seed=3, spread=0.05)
    ones = explain(new, old, adv, ObjectiveSettings(clip_low=0.02, chunks=[1] * T), ["chunk_grpo", "step_grpo"])
    whole = explain(new, old, adv, ObjectiveSettings(clip_low=0.02, chunks=[T]), ["chunk_grpo", "gspo"])
    for ex in (ones, whole):
        assert torch.equal(ex.clipped[0], ex.clipped[1]) and bool(ex.clipped[0].any())
        assert ex.weight[0] == pytest.approx(ex.weight[1], abs=1e-15)
        assert ex.ratio[0] == pytest.approx(ex.ratio[1], abs=1e-15)
    assert whole.ratio[0] == pytest.approx((new - old).mean(1, keepdim=True).exp().expand(G, T))  # sequence ratio


def test_clipped_units_get_weight_zero_and_the_others_do_not():
    new, old, adv = case(seed=4, spread=0.1)
    ex = explain(new, old, adv, ObjectiveSettings(clip_low=0.02, chunks=[2, 1, 3]))
    for name in ("step_grpo", "dapo", "dr_grpo", "gfpo", "chunk_grpo", "gspo"):
        o = ex.index(name)
        clipped = ex.clipped[o]  # (G, T)
        assert bool(clipped.any()) and bool((~clipped).any()), name
        assert bool((ex.weight[o][clipped] == 0).all()) and bool((ex.weight[o][~clipped] != 0).all()), name
        ratio = ex.ratio[o]
        expected = ((adv[:, None] > 0) & (ratio > 1.02)) | ((adv[:, None] < 0) & (ratio < 0.98))
        assert torch.equal(clipped, expected), name  # "clipped" is the objective's own rule on the ratio it uses
    assert not bool(ex.clipped[ex.index("gpg")].any())  # GPG has no ratio and never clips


def test_chunks_push_a_first_chunk_step_3_5_times_a_last_chunk_step_at_ratio_1():
    old = -torch.rand(3, 16, generator=torch.Generator().manual_seed(0))
    adv = torch.tensor([1.5, -0.5, -1.0])
    ex = explain(old, old, adv, ObjectiveSettings(chunks=[2, 3, 4, 7]), ["chunk_grpo", "step_grpo"])
    chunk, step = ex.weight[0], ex.weight[1]  # (G, T) each
    assert chunk[:, 0] / chunk[:, -1] == pytest.approx(torch.full((3,), 3.5))  # 7 / 2
    assert chunk[:, :2] == pytest.approx((-adv / (3 * 4 * 2))[:, None].expand(3, 2))  # -A / (B K |c|)
    assert step == pytest.approx((-adv / (3 * 16))[:, None].expand(3, 16))  # -A / (B T) on every step
    assert torch.equal(ex.ratio, torch.ones_like(ex.ratio)) and not bool(ex.clipped.any())
    assert ex.share.sum(dim=(1, 2)) == pytest.approx(torch.ones(2))


def test_correlation_with_a_credit_map():
    new, old, adv = case(seed=5, spread=0.0)
    ex = explain(new, old, adv, ObjectiveSettings(chunks=[2, 1, 3]), ["step_grpo", "chunk_grpo"])
    credit = adv[:, None].expand(G, T).float()  # credit that agrees with A on every step
    corr = ex.correlation(credit)
    assert corr[0] == pytest.approx(1.0) and 0 < corr[1] < 1  # chunks weigh steps unequally
    flat = explain(new, old, torch.zeros(G, dtype=torch.float64), ObjectiveSettings(), ["step_grpo"])
    assert torch.isnan(flat.correlation(credit)).all() and torch.equal(flat.share, torch.zeros_like(flat.share))


def test_paired_advantages_follow_the_presets():
    from workbench.train.presets import PRESETS, preset

    rewards = torch.tensor([0.2, 0.4, 0.9, 0.1])
    adv = paired_advantages(rewards, ["step_grpo", "dr_grpo", "gpg", "gfpo"], metric=torch.tensor([1., 2., 3., 4.]))
    assert adv["dr_grpo"] == pytest.approx(rewards - rewards.mean()) and adv["gpg"] == pytest.approx(adv["dr_grpo"])
    assert adv["step_grpo"] == pytest.approx((rewards - rewards.mean()) / (rewards.std(unbiased=False) + 1e-4))
    assert adv["gfpo"][:2].tolist() == [0.0, 0.0]  # GFPO keeps the top half by the metric
    with pytest.raises(WorkbenchError) as missing:
        paired_advantages(rewards, ["gfpo"])
    assert str(missing.value) == ("gfpo filters the group by a second score: pass metric (G,), e.g. the sharpness "
                                  "reward its preset uses, or leave gfpo out of the objectives")
    presets = [name for name in OBJECTIVES.names() if name in PRESETS]
    assert len(presets) >= 3, presets  # the check below runs on real cases
    for name in presets:
        assert paired_estimator(name) == preset(name).advantage, name
    OBJECTIVES.register("bare", info=None)(OBJECTIVES.get("step_grpo"))  # registered without an ObjectiveInfo
    try:
        assert paired_estimator("bare") == "grpo"
    finally:
        OBJECTIVES.unregister("bare")


def test_explain_rejects_a_kl_term_and_unknown_names():
    new, old, adv = case()
    with pytest.raises(WorkbenchError, match="^the explainer shows the policy term only: use settings with "
                                             "kl_beta=0$"):
        explain(new, old, adv, ObjectiveSettings(kl_beta=0.1))
    with pytest.raises(WorkbenchError, match="valid objectives"):
        explain(new, old, adv, ObjectiveSettings(), ["trpo"])
    with pytest.raises(WorkbenchError, match="no advantages for objective 'gspo'"):
        explain(new, old, {"step_grpo": adv}, ObjectiveSettings(), ["step_grpo", "gspo"])
    ex = explain(new, old, adv, ObjectiveSettings(), ["step_grpo", "gspo"])
    assert (ex.index("step_grpo"), ex.index("gspo")) == (0, 1)
    with pytest.raises(WorkbenchError, match=r"^objective 'gpg' was not explained; explained: step_grpo, gspo$"):
        ex.index("gpg")


def test_an_objective_outside_the_shared_paths_is_explained_with_zero_weights_and_no_ratio_map():
    """A registered objective whose loss does not reach log p (here through a parameter of its own) and that
    returns no step ratios: zero weights and shares, a NaN ratio map, no clip flags; its loss and advantages are
    still its own row's."""
    from workbench.rl.objectives import ObjectiveOutput

    own = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)

    def baseline_only(inputs, settings):
        loss = own * inputs.advantages.sum()  # reaches `own`, not log p
        return ObjectiveOutput(loss=loss, policy_loss=float(loss.detach()), kl_loss=0.0, clip_frac=0.0, approx_kl=0.0,
                               ratio_mean=1.0, ratio_std=0.0)

    OBJECTIVES.register("baseline_only")(baseline_only)
    try:
        new, old, _ = case()
        adv = torch.tensor([1.5, -0.5, 0.25, -1.0])  # float32, against float64 log-probs
        ex = explain(new, old, adv, ObjectiveSettings(), ["step_grpo", "baseline_only"])
    finally:
        OBJECTIVES.unregister("baseline_only")
    step = OBJECTIVES.get("step_grpo")(PolicyInputs(new, old, adv.double()), ObjectiveSettings()).loss
    assert torch.equal(ex.weight[1], torch.zeros(G, T, dtype=torch.float64)) and not ex.share[1].any()
    assert ex.ratio[1].isnan().all() and ex.clipped.dtype == torch.bool and not ex.clipped[1].any()
    assert ex.loss.tolist() == pytest.approx([float(step), 0.5 * 0.25], rel=1e-12)
    assert ex.advantage.dtype == torch.float64  # the advantages are read in the log-probs' precision
    assert torch.equal(ex.advantage, adv.double().expand(2, G))
    assert torch.equal(ex.step_advantage[1], adv.double()[:, None].expand(G, T))


# --------------------------------------------------------------------------- moving a copy of the policy
@pytest.fixture(scope="module")
def small_group(random_policy):
    from workbench.flow.sampler import sample_group
    from workbench.flow.trajectory import SamplingConfig

    return sample_group(random_policy, "a red circle", SamplingConfig(group=3, steps=4, seed=0))


def test_moved_log_probs_leave_the_policy_alone_and_follow_the_advantage(random_policy, small_group):
    before = {k: v.clone() for k, v in random_policy.transformer.state_dict().items()}
    flags = [p.requires_grad for p in random_policy.transformer.parameters()]
    adv = torch.tensor([1.0, -1.0, 0.5])
    assert torch.equal(moved_log_probs(random_policy, small_group, adv, updates=0), small_group.log_probs)
    same = moved_log_probs(random_policy, small_group, adv, updates=1, lr=1e-30)  # batched re-scoring, no move
    assert same == pytest.approx(small_group.log_probs, abs=1e-5)
    settings = ObjectiveSettings(clip_low=0.5)  # wide: the updates are not clipped
    new = moved_log_probs(random_policy, small_group, adv, "step_grpo", settings, updates=1, lr=1e-6)
    old = small_group.log_probs
    def loss(log_prob):
        return float(OBJECTIVES.get("step_grpo")(PolicyInputs(log_prob, old, adv), settings).loss)
    assert loss(new) < loss(old)  # one small step along the gradient lowers the loss
    assert all(torch.equal(before[k], v) for k, v in random_policy.transformer.state_dict().items())
    assert flags == [p.requires_grad for p in random_policy.transformer.parameters()]
    with pytest.raises(WorkbenchError, match="updates >= 0"):
        moved_log_probs(random_policy, small_group, adv, updates=-1)


def tiny_group(policy, **config):
    """G = 2 trajectories of T = 3 steps on "a red circle" (seed 0), with `config`'s SamplingConfig fields."""
    from workbench.flow.sampler import sample_group
    from workbench.flow.trajectory import SamplingConfig

    return sample_group(policy, "a red circle", SamplingConfig(group=2, steps=3, seed=0, **config))


def adam_by_hand(policy, group, adv, objective, settings, updates, lr) -> torch.Tensor:
    """The log-probs (G, T) after `updates` plain Adam steps (no weight decay) on `objective` over the whole group,
    on a copy of the transformer, scoring the transitions step by step; for a group of guidance 1 that trains all
    its steps (no unconditional half, no step mask)."""
    import copy

    from workbench.flow.sampler import rescore, transition

    moved = policy.with_transformer(copy.deepcopy(policy.transformer).requires_grad_(True))
    optimizer = torch.optim.Adam(moved.transformer.parameters(), lr=lr)
    cfg, states, cond = group.config, group.states, moved.encode([group.prompt]).repeat(group.group_size)
    for _ in range(updates):
        log_prob = torch.stack([transition(moved, states[:, s], group.sigmas, s, cond, cfg, x_next=states[:, s + 1])
                                .log_prob for s in range(group.num_steps)], dim=1)  # (G, T)
        optimizer.zero_grad()
        OBJECTIVES.get(objective)(PolicyInputs(log_prob, group.log_probs, adv), settings).loss.backward()
        optimizer.step()
    return rescore(moved, group)


def test_moved_log_probs_are_plain_adam_steps_on_the_whole_group(random_policy):
    """Two updates at lr 2e-3 equal two Adam steps done by hand, and `progress` hears of each. AdamW's default
    weight decay (0.01) would pull the weights to 0 and move the last step's log-probs by about 8e-3, a third
    update by about 0.5; batched against step-by-step scoring differ by under 3e-5 (rel 1e-6)."""
    group, adv, settings = tiny_group(random_policy), torch.tensor([1.0, -1.0]), ObjectiveSettings(clip_low=0.5)
    assert group.config.guidance_scale == 1.0 and bool(group.config.sde_mask().all())  # what adam_by_hand assumes
    calls = []
    moved = moved_log_probs(random_policy, group, adv, "step_grpo", settings, updates=2, lr=2e-3,
                            progress=lambda done, total: calls.append((done, total)))
    assert moved == pytest.approx(adam_by_hand(random_policy, group, adv, "step_grpo", settings, 2, 2e-3), rel=1e-5)
    assert calls == [(1, 2), (2, 2)]


def test_moved_log_probs_train_only_the_sde_window(random_policy):
    """With the SDE window (0, 1) of T = 3 each trajectory trains one step, so GSPO's sequence ratio (the geometric
    mean over the trained steps) is that step's ratio and GSPO moves the copy exactly as step GRPO does. Were the
    two ODE steps trained too (log-prob 0, ratio 1), GSPO would clip and weight r^(1/3) instead of r."""
    group, adv, settings = tiny_group(random_policy, window=(0, 1)), torch.tensor([1.0, -1.0]), ObjectiveSettings(
        clip_low=0.02)
    step = moved_log_probs(random_policy, group, adv, "step_grpo", settings, updates=3, lr=3e-3)
    gspo = moved_log_probs(random_policy, group, adv, "gspo", settings, updates=3, lr=3e-3)
    assert gspo == pytest.approx(step, abs=1e-6)
    assert bool(((step - group.log_probs)[:, 0].abs() > 0.02).all())  # moved past the clip range: clipping was met
    assert torch.equal(step[:, 1:], torch.zeros(2, 2))  # the ODE steps carry log-prob 0, ratio 1


def test_moved_log_probs_guide_as_the_group_was_sampled(random_policy):
    """A group sampled at guidance scale 2 is re-scored with the guided velocity (the conditioning carries the
    empty prompt's half): before the copy moves, every ratio is 1. Unguided, the log-probs would differ."""
    from dataclasses import replace

    from workbench.flow.sampler import rescore

    group = tiny_group(random_policy, guidance_scale=2.0)
    same = moved_log_probs(random_policy, group, torch.tensor([1.0, -1.0]), updates=1, lr=1e-30)  # no move
    assert same == pytest.approx(group.log_probs, abs=1e-5)
    unguided = rescore(random_policy, replace(group, config=replace(group.config, guidance_scale=1.0)))
    assert float((unguided - group.log_probs).abs().max()) > 0.1


def test_with_transformer_swaps_only_the_copy(random_policy):
    import copy

    other = random_policy.with_transformer(copy.deepcopy(random_policy.transformer))
    assert other.transformer is not random_policy.transformer and other.model.transformer is other.transformer
    assert random_policy.model.transformer is random_policy.transformer
    assert other.model.text_encoder is random_policy.model.text_encoder  # the rest is shared


@pytest.mark.parametrize("name", ["ppo", "dense_grpo"])
@pytest.mark.parametrize("spread", [0.0, 0.05])
def test_per_step_advantages_weights_match_finite_differences_and_the_closed_form(name, spread):
    """With A_{i,t} (G, T) the weight is w = -A_{i,t} rho_{i,t} / (B T_i) on unclipped steps (docs/methods.md)."""
    new, old, _ = case(seed=3, spread=spread)
    adv = torch.randn(G, T, generator=torch.Generator().manual_seed(4), dtype=torch.float64)  # (G, T)
    mask = torch.ones(G, T, dtype=torch.bool)
    mask[2, 4:] = False
    settings = ObjectiveSettings(clip_low=0.02)
    ex = explain(new, old, {name: adv}, settings, [name], step_mask=mask)
    assert ex.weight[0] == pytest.approx(finite_difference(name, new, old, adv, settings, mask), abs=1e-7)
    rho = (new - old).exp()
    clipped = ((adv > 0) & (rho > 1.02)) | ((adv < 0) & (rho < 0.98))
    expected = torch.where(mask & ~clipped, -adv * rho / (G * mask.sum(1, keepdim=True)), torch.zeros_like(adv))
    assert ex.weight[0] == pytest.approx(expected, abs=1e-12)
    assert torch.equal(ex.step_advantage[0], adv) and bool(ex.clipped[0].any()) == bool(spread)


# ------------------------------------------------------------------------- the Objectives tab's rows (train.explained)
def test_ordered_objectives_follow_the_registrations_order_then_the_name():
    """The orders registered in rl/objectives.py: chunk_grpo 0, step_grpo 1, gspo 2, ppo 3, dense_grpo 4, dapo 5,
    gpg 6, gfpo 7, dr_grpo 8 (alphabetical would start with chunk_grpo, dapo); one without a record comes last."""
    from workbench.train.explained import ordered_objectives

    assert ordered_objectives() == ["chunk_grpo", "step_grpo", "gspo", "ppo", "dense_grpo", "dapo", "gpg", "gfpo",
                                    "dr_grpo"]
    OBJECTIVES.register("a_bare", info=None)(OBJECTIVES.get("step_grpo"))
    try:
        assert ordered_objectives()[-1] == "a_bare"
    finally:
        OBJECTIVES.unregister("a_bare")


def test_objective_advantages_join_the_paired_and_the_per_step_ones(random_policy, small_group, monkeypatch):
    """Paired (G,) advantages of the rewards (gfpo's filtered by the sharpness score of the group's images), joined
    with what `per_step_advantages` gives for the same group, names, reward and batched context."""
    import workbench.train.explained as explained
    from workbench.train.presets import gfpo_scores

    calls, per_step = [], {"ppo": torch.ones(3, 4)}

    def fake(*args, **kwargs):
        calls.append((args, kwargs))
        return per_step

    monkeypatch.setattr(explained, "per_step_advantages", fake)
    rewards, names, reward_fn, batched = torch.tensor([0.1, 0.9, 0.5]), ["step_grpo", "gfpo", "ppo"], object(), object()
    adv = explained.objective_advantages(random_policy, small_group, rewards, names, reward_fn, batched=batched)
    paired = paired_advantages(rewards, ["step_grpo", "gfpo"], metric=gfpo_scores(small_group))
    assert adv.keys() == {"step_grpo", "gfpo", "ppo"} and adv["ppo"] is per_step["ppo"]
    assert torch.equal(adv["step_grpo"], paired["step_grpo"]) and torch.equal(adv["gfpo"], paired["gfpo"])
    assert calls == [((random_policy, small_group, rewards, names, reward_fn), {"batched": batched})]


def explained_case():
    """A stand-in group of G = 2, T = 3 whose last step is untrained, log-probs -1 before the updates and log-ratios
    [[0.2, 0.3, 0.5], [0, -0.2, 0.3]] after them, and advantages A = (1, -1)."""
    from types import SimpleNamespace

    from workbench.flow.trajectory import SamplingConfig

    old = -torch.ones(2, 3, dtype=torch.float64)
    group = SimpleNamespace(log_probs=old, config=SamplingConfig(group=2, steps=3, window=(0, 2)))
    moved = old + torch.tensor([[0.2, 0.3, 0.5], [0.0, -0.2, 0.3]], dtype=torch.float64)
    return group, moved, torch.tensor([1.0, -1.0], dtype=torch.float64)


def test_explain_rows_explain_the_group_at_ratio_1_and_after_the_updates():
    from workbench.train.explained import explain_rows, ordered_objectives

    group, moved, a = explained_case()
    names = ["step_grpo", "chunk_grpo"]
    rows = explain_rows(group, {n: a for n in names}, moved, [1, 2], clip=0.12, updates=1, names=names)
    assert [(key, title) for key, title, _ in rows] == [("ratio1", "at ratio 1"), ("moved", "after 1 update")]
    mask = torch.tensor([[True, True, False]] * 2)
    settings = ObjectiveSettings(clip_low=0.12, chunks=[1, 2])
    for (_, _, ex), new in zip(rows, (group.log_probs, moved)):
        expected = explain(new, group.log_probs, a, settings, names, mask)
        assert ex.names == names and ex.settings == settings and torch.equal(ex.step_mask, mask)
        assert torch.equal(ex.weight, expected.weight) and torch.equal(ex.clipped, expected.clipped)
    assert rows[1][2].log_ratio == pytest.approx(torch.tensor([[0.2, 0.3, 0.0], [0.0, -0.2, 0.0]], dtype=torch.float64))
    everything = explain_rows(group, {n: a for n in OBJECTIVES.names()}, moved, [3], clip=0.12, updates=2)
    assert everything[1][1] == "after 2 updates" and everything[0][2].names == ordered_objectives()


def test_objective_numbers_by_hand():
    """clip 0.12. step_grpo clips (0, 0), (0, 1) (rho > 1.12, A > 0) and (1, 1) (rho = e^-0.2 < 0.88, A < 0): 3 of
    the 4 trained steps; gspo clips trajectory 0 (e^0.25 > 1.12), not trajectory 1 (e^-0.1 = 0.905): 2 of 4.
    Credit [1, 0; 0, -1] on the trained steps. At ratio 1 both push A_i / 4 on every step, (1, 1, -1, -1):
    correlation 2 / (2 sqrt 2) = 0.7071. After the updates step_grpo pushes only (1, 0), -0.25: centred
    (1, 1, -3, 1) / 16, orthogonal to the credit (0); gspo pushes trajectory 1 alone, again 0.7071."""
    from workbench.train.explained import correlation_text, explain_rows, objective_numbers

    group, moved, a = explained_case()
    names = ["step_grpo", "gspo"]
    rows = explain_rows(group, {n: a for n in names}, moved, [3], clip=0.12, updates=3, names=names)
    credit = torch.tensor([[1.0, 0.0, 9.0], [0.0, -1.0, 9.0]])  # 9 on the untrained steps: left out
    step, gspo = objective_numbers(rows, credit)
    assert (step.name, gspo.name) == ("step_grpo", "gspo")
    assert (step.clipped, gspo.clipped) == (0.75, 0.5)
    assert step.corr_at_one == pytest.approx(0.5 ** 0.5) and step.corr_moved == pytest.approx(0.0, abs=1e-6)
    assert gspo.corr_at_one == pytest.approx(0.5 ** 0.5) and gspo.corr_moved == pytest.approx(0.5 ** 0.5)
    bare = objective_numbers(rows, None)
    assert [(n.name, n.clipped, n.corr_at_one, n.corr_moved) for n in bare] == [("step_grpo", 0.75, None, None),
                                                                                ("gspo", 0.5, None, None)]
    assert [correlation_text(v) for v in (0.2249, -0.5, 0.0, None, math.nan)] == ["+0.22", "-0.50", "+0.00", "n/a",
                                                                                    "n/a"]
