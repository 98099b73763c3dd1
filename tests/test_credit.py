"""Monte-Carlo credit, common random numbers, refinement and the cheap estimators (docs/methods.md
"Monte-Carlo credit", "Credit uncertainty", "Credit estimators")."""

import time
from dataclasses import replace

import pytest
import torch
from support import PROMPT, mean_red

from workbench.core.errors import WorkbenchError
from workbench.flow.sampler import sample_group, transition
from workbench.flow.trajectory import SamplingConfig
from workbench.rewards import build_reward
from workbench.rl.credit import Credit, measure_credit, refine, refine_rounds
from workbench.rl.credit_estimators import ESTIMATORS, noise_seed, run_continuations


def test_credits_telescope_to_the_raw_advantage(random_policy, group):
    credit = measure_credit(random_policy, group, mean_red, continuations=3, chunks="2,3")
    assert credit.step_credit.shape == (4, 5) and credit.chunk_credit.shape == (4, 2)
    assert credit.step_se.shape == (4, 5) and credit.chunk_se.shape == (4, 2)
    raw = credit.rewards - credit.rewards.mean()
    assert torch.allclose(credit.step_credit.sum(1), raw, atol=1e-6)
    assert torch.allclose(credit.chunk_credit.sum(1), raw, atol=1e-6)
    assert torch.allclose(credit.values[:, -1], mean_red(group.images, [PROMPT] * 4))


def test_continuations_restart_from_the_stored_state(random_policy):
    """With noise level 0 every continuation is the ODE from its state: M continuations agree."""
    g = sample_group(random_policy, PROMPT, SamplingConfig(group=2, steps=4, noise_level=0.0))
    conts = measure_credit(random_policy, g, mean_red, continuations=3, chunks="2,2",
                           precision="float32").continuation_rewards  # as sampled
    final = mean_red(g.images, [PROMPT] * 2)
    assert torch.allclose(conts, final[:, None, None].expand(2, 3, 3), atol=1e-5)


@pytest.mark.parametrize("crn", [True, False])
def test_continuations_differ_under_the_sde_and_repeat_with_the_seed(random_policy, group, crn):
    def conts():
        return measure_credit(random_policy, group, mean_red, continuations=3, chunks="2,3", seed=0,
                              crn=crn).continuation_rewards

    first = conts()
    assert first.shape == (4, 4, 3) and first.std(-1).mean() > 0
    assert torch.equal(first, conts())


def _one_step(policy, group, traj: int, k: int, s: int, seed: int) -> torch.Tensor:
    """State s + 1 reached by continuation k of trajectory `traj` from state s (CRN noise)."""
    noise = torch.randn(group.states.shape[2:], generator=torch.Generator().manual_seed(
        noise_seed(seed, traj, k, s, None)))
    cond = policy.encode([group.prompt]).repeat(1)
    return transition(policy, group.states[traj, s][None], group.sigmas, s, cond, group.config,
                      noise=noise[None]).x_next[0]


@pytest.mark.parametrize("crn", [True, False])
def test_common_random_numbers_from_identical_states_give_identical_rewards(random_policy, group, crn):
    """Continuation k from x_1 passes through a state y at step 1; started from y, continuation k of the same
    trajectory reuses the noise of the steps they share (CRN) and ends with the same reward."""
    y = _one_step(random_policy, group, traj=2, k=1, s=1, seed=7)
    states = group.states.clone()
    states[2, 2] = y
    other = replace(group, states=states)
    from_1 = run_continuations(random_policy, group, mean_red, torch.tensor([[2, 1, 1]]), seed=7, crn=crn)
    from_2 = run_continuations(random_policy, other, mean_red, torch.tensor([[2, 2, 1]]), seed=7, crn=crn)
    same = run_continuations(random_policy, other, mean_red, torch.tensor([[2, 2, 1], [2, 2, 1]]), seed=7, crn=crn)
    assert same[0] == same[1]  # the same row twice: the same draw, CRN or not
    if crn:
        assert from_2 == pytest.approx(from_1, abs=1e-6)
    else:
        assert abs(float(from_2 - from_1)) > 1e-6  # independent continuations draw fresh noise


@pytest.mark.parametrize("crn", [True, False])
def test_per_cell_errors_match_repeated_measurements(random_policy, crn):
    """The spread of each credit over 40 repeated measurements (new seeds) matches its estimated error."""
    g = sample_group(random_policy, PROMPT, SamplingConfig(group=2, steps=4, seed=3, noise_level=1.2))
    runs = [measure_credit(random_policy, g, mean_red, continuations=6, chunks="1,3", seed=s, crn=crn)
            for s in range(40)]
    credit = torch.stack([c.step_credit for c in runs])[:, :, 1:]  # (R, G, T - 1): step 0 uses the fixed r mean
    se = torch.stack([c.step_se for c in runs])[:, :, 1:]
    brute, estimated = credit.std(0), se.pow(2).mean(0).sqrt()  # (G, T - 1)
    ratio = float(estimated.pow(2).mean().sqrt() / brute.pow(2).mean().sqrt())
    assert 0.75 < ratio < 1.3, ratio
    chunk = torch.stack([c.chunk_credit[:, 1] for c in runs])  # (R, G): chunk of steps 1..3 = V(x_4) - V(x_1)
    chunk_se = torch.stack([c.chunk_se[:, 1] for c in runs]).pow(2).mean(0).sqrt()
    assert 0.6 < float(chunk_se.mean() / chunk.std(0).mean()) < 1.5


def test_common_random_numbers_shrink_the_errors(random_policy):
    g = sample_group(random_policy, PROMPT, SamplingConfig(group=3, steps=6, seed=2, noise_level=1.2))
    crn = measure_credit(random_policy, g, mean_red, continuations=8, chunks="6", crn=True)
    ind = measure_credit(random_policy, g, mean_red, continuations=8, chunks="6", crn=False)
    assert float(crn.step_se[:, 1:-1].median()) < float(ind.step_se[:, 1:-1].median())


def test_plain_rates_by_hand():
    rewards = torch.tensor([1.0, 0.0])  # mean 0.5, A = [+, -]
    # values: [0.5, v1, v2, r]; trajectory 0: 0.5 -> 0.2 -> 0.9 -> 1.0 (first step misattributed)
    conts = torch.tensor([[[0.2, 0.2], [0.9, 0.9]], [[0.3, 0.3], [0.6, 0.6]]])  # (G=2, T-1=2, M=2)
    c = Credit("p", rewards, torch.tensor([1.0, -1.0]), conts, [1, 2])
    assert torch.allclose(c.step_credit, torch.tensor([[-0.3, 0.7, 0.1], [-0.2, 0.3, -0.6]]))
    assert c.misattributed_steps().tolist() == [[True, False, False], [False, True, False]]
    m = c.misattribution()
    assert m["step_misattribution"] == pytest.approx(2 / 6)
    # chunks [1, 2]: traj 0: -0.3 | 0.8 ; traj 1: -0.2 | -0.3  -> one misattributed chunk of four
    assert m["chunk_misattribution"] == pytest.approx(1 / 4)
    # identical continuations: no Monte-Carlo error inside; only the first step carries the start value's error
    assert c.step_se[:, 1:].abs().max() == 0 and c.step_se[:, 0].min() > 0
    # first step: |d| = 0.3 or 0.2 against an error of sqrt(0.5 / 2) = 0.5. The others have error 0 only because
    # the two continuations agree: they tie, so the exact sign-flip test decides, and two equal differences have
    # p = P(both signs agree) = 2 / 2^2 = 0.5; an infinite t once called them all determined
    classes = c.classify(2.0)
    assert classes.step.tolist() == [[0, 0, 0], [0, 0, 0]] and classes.chunk.tolist() == [[0, 0], [0, 0]]


def test_untrained_steps_are_left_out_of_every_rate():
    rewards, adv = torch.tensor([1.0, 0.0]), torch.tensor([1.0, -1.0])
    conts = torch.tensor([[[0.2, 0.2], [0.9, 0.9]], [[0.3, 0.3], [0.6, 0.6]]])
    every = Credit("p", rewards, adv, conts, [1, 2])
    window = Credit("p", rewards, adv, conts, [1, 2], trained=torch.tensor([False, True, True]))
    assert every.rates().step.cells == 6 and window.rates().step.cells == 4
    assert window.misattribution()["step_misattribution"] == pytest.approx(1 / 4)  # only traj 1's step 1
    assert window.rates().chunk.cells == 2  # chunk [0] has no trained step


def test_rechunk_reuses_the_samples(random_policy, group):
    credit = measure_credit(random_policy, group, mean_red, continuations=2, chunks="5")
    other = credit.rechunk("1,1,1,1,1")
    assert torch.equal(other.continuation_rewards, credit.continuation_rewards)
    m1, m5 = other.misattribution(), credit.misattribution()
    assert m1["chunk_misattribution"] == pytest.approx(m1["step_misattribution"])  # chunk size 1 == steps
    assert torch.allclose(other.chunk_se, other.step_se, equal_nan=True)
    assert other.rates(2.0).chunk == other.rates(2.0).step  # the classified rates too (notebook 02's slider at 1)
    assert m5["step_misattribution"] == m1["step_misattribution"]
    with pytest.raises(WorkbenchError, match="sum"):
        credit.rechunk("2,2")


def test_refinement_never_decreases_k_and_stops_at_the_budget(random_policy, group):
    credit = measure_credit(random_policy, group, mean_red, continuations=2, chunks="2,3")
    before, counts = credit.counts, [credit.counts]
    rounds = list(refine_rounds(credit, random_policy, group, mean_red, budget=37, z=50.0))  # z=50: all undetermined
    for r in rounds:
        assert (r.counts >= counts[-1]).all()
        counts.append(r.counts)
    assert int((counts[-1] - before).sum()) == 37 and len(rounds) >= 2
    last = rounds[-1]
    assert torch.equal(last.continuation_rewards[..., :2], credit.continuation_rewards)  # old continuations kept
    assert last.cost["nfe"] > credit.cost["nfe"]
    # every cell determined (z = 0): nothing to refine, the budget is not spent
    assert torch.equal(refine(credit, random_policy, group, mean_red, budget=37, z=0.0).counts, before)
    with pytest.raises(WorkbenchError, match="budget"):
        refine(credit, random_policy, group, mean_red, budget=0)


def test_refinement_serves_states_next_to_undetermined_cells_first(random_policy, group):
    credit = measure_credit(random_policy, group, mean_red, continuations=2, chunks="5")
    only_1 = replace(credit, advantages=torch.tensor([0.0, 1.0, 0.0, 0.0]))  # other rows count in no rate
    refined = refine(only_1, random_policy, group, mean_red, budget=4, z=50.0)
    grown = (refined.counts > credit.counts).nonzero()
    assert grown[:, 0].tolist() == [1, 1]  # two states of trajectory 1 doubled their M (2 + 2)
    even = refine(only_1, random_policy, group, mean_red, budget=8, z=50.0)
    assert even.counts[1].tolist() == [4, 4, 4, 4] and torch.equal(even.counts[0], credit.counts[0])  # equal M
    with pytest.raises(WorkbenchError, match="no Monte-Carlo error"):
        x0 = measure_credit(random_policy, group, mean_red, estimator="x0", chunks="5")
        refine(x0, random_policy, group, mean_red, 4)


@torch.no_grad()
def test_ode_estimator_is_the_reward_of_the_ode_completion(random_policy, group):
    credit = measure_credit(random_policy, group, mean_red, estimator="ode", chunks="2,3", precision="float32")
    cond = random_policy.encode([PROMPT]).repeat(4)
    sig = group.sigmas
    for s in (0, 2, 4):
        x = group.states[:, s]
        for u in range(s, group.num_steps):
            x = x + (sig[u + 1] - sig[u]) * random_policy.velocity(x, sig[u].expand(4), cond)
        expected = mean_red(random_policy.decode(x), [PROMPT] * 4)
        assert torch.allclose(credit.values[:, s], expected, atol=1e-5)
    assert credit.deterministic and credit.step_se.abs().max() == 0 and credit.cost["nfe"] == 4 * (5 + 4 + 3 + 2 + 1)


@torch.no_grad()
def test_x0_estimator_is_the_reward_of_the_denoised_prediction(random_policy, group):
    credit = measure_credit(random_policy, group, mean_red, estimator="x0", chunks="2,3")
    cond = random_policy.encode([PROMPT]).repeat(4)
    for s in range(group.num_steps):
        x, t = group.states[:, s], group.sigmas[s]
        x0 = x - t * random_policy.velocity(x, t.expand(4), cond)
        assert torch.allclose(credit.values[:, s], mean_red(random_policy.decode(x0), [PROMPT] * 4), atol=1e-5)
    assert torch.allclose(credit.values[:, -1], credit.rewards) and credit.cost["nfe"] == 0
    assert credit.precision == "float32"  # the sampler's predictions, whatever numerics continuations would get


def test_measure_credit_with_a_registered_reward(random_policy, group):
    credit = measure_credit(random_policy, group, build_reward("adherence"), continuations=2, chunks="2,3")
    s = credit.summary()
    assert len(s["credit"]) == 4 and len(s["credit"][0]) == 5 and len(s["chunk_credit"][0]) == 2
    assert len(s["credit_se"][0]) == 5 and set(sum(s["step_classes"], [])) <= {-1, 0, 1}
    assert 0 <= s["step_misattribution"] <= 1 and s["step_misattribution_se"] >= 0
    assert s["false_call_rate"] == pytest.approx(0.0455, abs=1e-4) and s["chunk_fixed_by_construction"] is False


def test_bad_inputs(random_policy, group):
    with pytest.raises(WorkbenchError, match="continuations"):
        measure_credit(random_policy, group, mean_red, continuations=0)
    with pytest.raises(WorkbenchError, match="sum"):
        measure_credit(random_policy, group, mean_red, chunks="2,2")
    with pytest.raises(WorkbenchError, match="valid credit estimators: mc, ode, x0"):
        measure_credit(random_policy, group, mean_red, estimator="nope")
    assert ESTIMATORS.names() == ["mc", "ode", "x0"]


def test_refinement_spends_on_undetermined_steps_when_only_a_whole_trajectory_chunk_is_within_reach(
        random_policy, group):
    credit = measure_credit(random_policy, group, mean_red, continuations=2, chunks="5")
    mean = float(credit.rewards.mean())
    g, s, _ = credit.continuation_rewards.shape
    noisy = torch.stack([torch.full((g, s), mean - 1.0), torch.full((g, s), mean + 1.0)], dim=-1)  # V = mean, se ~1
    made = replace(credit, continuation_rewards=noisy, crn=False)  # independent: a step between two states has se ~1
    z = 1e6  # nothing determined; the one chunk (r_i - V(x_T), small error) is within reach, no step is
    assert bool((made.chunk_credit.abs() >= made.chunk_se).any()) and not bool((made.step_credit.abs()
                                                                                >= made.step_se).any())
    refined = refine(made, random_policy, group, mean_red, budget=6, z=z)
    assert int((refined.counts - made.counts).sum()) == 6  # the budget goes to the steps, not nowhere


def test_a_chunk_from_the_shared_start_to_the_image_is_fixed_by_construction():
    rewards = torch.tensor([1.0, 0.0, 0.4])
    conts = torch.rand(3, 3, 4)  # (G, T - 1 = 3, M = 4)
    c = Credit("p", rewards, rewards - rewards.mean(), conts, [4])
    assert c.chunk_fixed.all() and c.rates().chunk.by_construction and c.rates().chunk.fixed_cells == 3
    assert torch.allclose(c.chunk_credit[:, 0], rewards - rewards.mean())  # the raw advantage: never against A
    split = c.rechunk("2,2")
    assert not split.chunk_fixed.any() and not split.rates().chunk.by_construction
    own = replace(c, start_continuations=torch.rand(3, 4))  # own x_T per trajectory: its value is measured, not fixed
    assert not own.chunk_fixed.any()


def test_without_shared_start_noise_each_start_is_valued_by_its_own_continuations(random_policy):
    own = sample_group(random_policy, PROMPT, SamplingConfig(group=3, steps=4, seed=2, shared_noise=False))
    credit = measure_credit(random_policy, own, mean_red, continuations=3, chunks="4")
    assert credit.start_continuations.shape == (3, 3)
    assert credit.cost["nfe"] == 3 * (10 + 7 + 4 + 1)  # from state s: 1 + 3 (T - s - 1), the first step shared
    assert torch.allclose(credit.values[:, 0], credit.start_continuations.mean(1))  # V(x_T^i), not the group mean
    assert torch.allclose(credit.chunk_credit[:, 0], credit.rewards - credit.start_continuations.mean(1), atol=1e-6)
    assert not credit.chunk_fixed.any() and bool(credit.step_se[:, 0].isfinite().all())
    rows = torch.tensor([[i, 0, k] for i in range(3) for k in range(3)])
    again = run_continuations(random_policy, own, mean_red, rows, seed=0, crn=True, precision=credit.precision)
    assert torch.allclose(again.view(3, 3), credit.start_continuations)  # the same continuations, from each own x_T


def test_two_halves_of_the_continuations_are_two_measurements():
    rewards = torch.tensor([1.0, 0.0, 0.4])
    conts = torch.rand(3, 3, 6)  # (G, T - 1, M = 6)
    c = Credit("p", rewards, rewards - rewards.mean(), conts, [2, 2], start_continuations=torch.rand(3, 6))
    a, b = c.halves()
    assert torch.equal(a.continuation_rewards, conts[..., :3]) and torch.equal(b.continuation_rewards, conts[..., 3:])
    assert torch.equal(b.start_continuations, c.start_continuations[:, 3:])
    assert a.rates().step.cells == c.rates().step.cells
    uneven = conts.clone()
    uneven[0, 0, 4:] = float("nan")  # one state with M = 4 (refined elsewhere): halves would not pair
    assert replace(c, continuation_rewards=uneven).halves() is None
    assert replace(c, continuation_rewards=conts[..., :2]).halves() is None


def test_the_halves_line_counts_their_determined_cells_and_warns_when_few():
    """"35.7 % misattributed" beside halves that "find 66.7 % and 66.7 %" read as a contradiction: the halves' shares
    rested on 3 and 6 cells. The line now gives the counts, and says when they are too few to compare."""
    from workbench.viz.credit_view import FEW_CELLS, rates_text

    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0])
    conts = torch.full((4, 1, 4), 0.5)
    conts[1:, 0] += torch.tensor([-3.0, 3.0, -3.0, 3.0])  # one trajectory's state is determined, the rest noise
    line = rates_text(Credit("p", rewards, rewards - rewards.mean(), conts, [1, 1]), 2.0).splitlines()[-1]
    a, b = Credit("p", rewards, rewards - rewards.mean(), conts, [1, 1]).halves()
    counts = [half.step_rates(2.0).determined_cells for half in (a, b)]
    assert line.startswith("**Spread over continuation noise:**") and max(counts) < FEW_CELLS
    assert f"of {counts[0]} and " in line and f"of {counts[1]} determined steps" in line and "of 8 steps" in line
    assert f"fewer than {FEW_CELLS} cells" in line


def test_rescoring_values_the_image_by_the_mean_of_its_scores(random_policy, group):
    """A reward that gives another number each time (here: the call's index plus the red mean): with rescore=2 the
    image is scored three times, in the first three calls, before any continuation; its value is the mean
    (offset 1), the telescoping still holds, and the last step's error includes the scores' spread: Var(mean of
    0, 1, 2 offsets) = 1 / 3, so se >= sqrt(1/3) however the continuations agree."""
    calls = []

    def noisy(images, prompts):
        calls.append(len(images))
        return mean_red(images, prompts) + (len(calls) - 1)

    credit = measure_credit(random_policy, group, noisy, continuations=2, chunks="2,3", rescore=2)
    base = mean_red(group.images, [PROMPT] * 4)
    assert credit.final_scores.shape == (4, 3) and calls[:3] == [4, 4, 4]
    assert torch.allclose(credit.final_scores - base[:, None], torch.tensor([0.0, 1.0, 2.0]).expand(4, 3), atol=1e-6)
    assert torch.allclose(credit.rewards, base + 1, atol=1e-6)
    assert torch.allclose(credit.step_credit.sum(1), credit.rewards - credit.rewards.mean(), atol=1e-5)
    assert bool((credit.step_se[:, -1] >= (1 / 3) ** 0.5 - 1e-6).all())
    once = measure_credit(random_policy, group, mean_red, continuations=2, chunks="2,3")
    assert once.final_scores is None
    with pytest.raises(WorkbenchError, match="rescore"):
        measure_credit(random_policy, group, mean_red, continuations=2, rescore=-1)


def test_refinement_pairs_with_its_credits_noise_and_reports_continuations_spent(random_policy, group):
    """Without common random numbers too, a refined cell's M = 4 continuations are those that measuring with
    M = 4 draws; progress counts continuations against the budget, as whole numbers, up to the budget."""
    credit = measure_credit(random_policy, group, mean_red, continuations=2, chunks="5", crn=False, precision="float32")
    calls = []
    refined = refine(credit, random_policy, group, mean_red, budget=32, z=50.0,
                     progress=lambda done, total: calls.append((done, total)))
    four = measure_credit(random_policy, group, mean_red, continuations=4, chunks="5", crn=False, precision="float32")
    grown = refined.counts >= 4  # (G, T - 1)
    assert int(grown.sum()) >= 8
    assert torch.allclose(refined.continuation_rewards[..., :4][grown], four.continuation_rewards[grown], atol=1e-5)
    assert calls[-1] == (32, 32) and all(type(done) is int and total == 32 for done, total in calls)
    assert [done for done, _ in calls] == sorted(done for done, _ in calls) and len(calls) >= 2
    with pytest.raises(WorkbenchError, match=r"^refine needs the group the credit was measured on \(G and T differ\)$"):
        refine(credit, random_policy, replace(group, states=group.states[:2]), mean_red, 4)


@torch.no_grad()
def test_x0_estimator_decodes_in_slices_of_256_into_float32_and_times_itself(random_policy, group):
    from workbench.rl.credit_estimators import denoised_prediction

    big = replace(group, states=group.states.repeat(15, 1, 1, 1, 1), x0_preds=group.x0_preds.repeat(15, 1, 1, 1, 1))
    sizes = []

    def double_reward(images, prompts):  # a reward in float64, as numpy-based rewards give
        sizes.append(len(prompts))
        return mean_red(images, prompts).double()

    before = time.perf_counter()
    estimate = ESTIMATORS.get("x0")(random_policy, big, double_reward)
    elapsed = time.perf_counter() - before
    assert sizes == [256, 300 - 256]  # G T = 60 x 5 states
    assert estimate.continuation_rewards.dtype == estimate.start.dtype == torch.float32
    small = denoised_prediction(random_policy, group, mean_red)
    assert torch.allclose(estimate.continuation_rewards, small.continuation_rewards.repeat(15, 1, 1))
    assert 0 < estimate.seconds <= elapsed
