"""Null-reward calibration of the credit classes (docs/methods.md "False-call rate", "The last step").

A reward that ignores the image gives every state the same value, so no cell that ends before the final
image has credit; the share of such cells called determined must stay within the nominal false-call rate
(binomial error) at M = 2, 3, 4 and 16, with common random numbers and without, for a Gaussian reward and a
0/1 reward, and after refinement. The numbers go through the real `Credit` classification; only the
continuation rewards are drawn here. The cells that end at the image hold a stochastic reward's noise unless
the image is scored again (`final_scores`).
"""

import math

import pytest
import torch

from workbench.rl.credit import Credit, refine_with
from workbench.rl.credit_stats import UNDETERMINED, classify, credit_dof, grow_looks, unit_looks
from workbench.rl.significance import false_call_rate

G, T = 1500, 4  # 1500 trajectories, steps 0..2 end before the image: 4500 null step cells per case


def _reward(latent: torch.Tensor, kind: str) -> torch.Tensor:
    return latent if kind == "gaussian" else (latent > 0).float()  # a 0/1 reward: the sign of a Gaussian


def null_credit(k: int, crn: bool, seed: int, g: int = G, kind: str = "gaussian") -> tuple[Credit, object]:
    """A credit of rewards drawn independently of the states; under CRN the k-th continuations of a
    trajectory share a component (as noise shared across start states would); returns the draw too."""
    gen = torch.Generator().manual_seed(seed)
    common = torch.randn(g, 1, 256, generator=gen) if crn else torch.zeros(g, 1, 256)  # (G, 1, K_max)

    def draw(rows: torch.Tensor, spent: int = 0) -> torch.Tensor:
        return _reward(common[rows[:, 0], 0, rows[:, 2]] + torch.randn(len(rows), generator=gen), kind)

    rows = torch.cartesian_prod(torch.arange(g), torch.arange(1, T), torch.arange(k))
    continuations = draw(rows).view(g, T - 1, k)
    rewards = _reward(torch.randn(g, generator=gen) * math.sqrt(2 if crn else 1), kind)  # spread as a continuation
    credit = Credit("null", rewards, rewards - rewards.mean(), continuations, [2, T - 2], crn=crn)
    return credit, draw


def _share(classes: torch.Tensor, valid: torch.Tensor) -> tuple[float, int]:
    return float(((classes != UNDETERMINED) & valid).sum() / valid.sum()), int(valid.sum())


def null_share(credit: Credit, z: float = 2.0) -> tuple[float, int]:
    """Share of determined cells among the steps and chunks that end before the final image (A_i != 0)."""
    classes = credit.classify(z)
    cells = torch.cat([classes.step[:, : T - 1], classes.chunk[:, :1]], 1)
    return _share(cells, torch.cat([credit.step_valid[:, : T - 1], credit.chunk_valid[:, :1]], 1))


def bound(n: int, z: float = 2.0) -> float:
    """Four binomial errors of the nominal rate over n cells."""
    alpha = false_call_rate(z)
    return 4 * math.sqrt(alpha * (1 - alpha) / n)


@pytest.mark.parametrize("crn", [True, False])
@pytest.mark.parametrize("k", [2, 4, 16])
def test_null_reward_false_calls_hold_the_nominal_rate(k, crn):
    credit, _ = null_credit(k, crn, seed=k + 10 * crn)
    share, n = null_share(credit)
    alpha = false_call_rate(2.0)
    assert share <= alpha + bound(n), f"M={k} crn={crn}: {share:.3f} determined, nominal {alpha:.3f}"
    # not bought by a blunt test: at M >= 4 the rate is the nominal one (M = 2 is conservative, ~2-4 %)
    assert k == 2 or share >= alpha - bound(n), f"M={k} crn={crn}: {share:.3f} determined, too conservative"


@pytest.mark.parametrize("crn", [True, False])
@pytest.mark.parametrize("k", [2, 3, 4, 16])
def test_a_zero_one_reward_holds_the_rate_too(k, crn):
    """A 0/1 reward ties: few continuations often agree, their spread is 0 and the t is infinite. The exact
    tests keep every M at or under the nominal rate (at M = 2 nothing can be determined: the smallest p of two
    pairs is 1/2, of 2 against 2 rewards 1/3)."""
    credit, _ = null_credit(k, crn, seed=100 + k + 10 * crn, kind="bernoulli")
    share, n = null_share(credit)
    assert share <= false_call_rate(2.0) + bound(n), f"M={k} crn={crn}: {share:.3f} determined"
    assert k != 2 or share == 0.0


def test_the_t_test_alone_over_calls_a_zero_one_reward():
    """The check has teeth: at M = 2 with independent continuations, both continuations of each end agree and
    differ from the other end's 2 (1/2)^3 = 1/4 of the time, half of it... 2 x (1/4)^2 = 12.5 % of the cells
    between states then have spread 0 and credit +-1; the t test calls them all determined."""
    credit, _ = null_credit(2, False, seed=5, kind="bernoulli")
    edges = list(range(T + 1))
    start_var = (credit.rewards.var() / G).expand(G)
    dof = credit_dof(credit.continuation_rewards, start_var, G - 1.0, edges, False)
    alone = classify(credit.step_credit, credit.step_se, credit.advantages, 2.0, dof)  # no exact p-values
    share, n = _share(alone[:, 1:T - 1], credit.step_valid[:, 1:T - 1])
    assert abs(share - 0.125) < 4 * math.sqrt(0.125 * 0.875 / n), share


def test_a_normal_threshold_would_not_hold_it():
    """The check has teeth: the same cells tested against the normal (z = 2 errors) overshoot at M = 4."""
    credit, _ = null_credit(4, True, seed=3)
    steps = credit.step_credit[:, : T - 1] / credit.step_se[:, : T - 1]
    assert float((steps.abs() > 2).double().mean()) > 0.1


@pytest.mark.parametrize("kind", ["gaussian", "bernoulli"])
@pytest.mark.parametrize("crn", [True, False])
def test_null_false_calls_hold_after_refinement_rounds(crn, kind):
    credit, draw = null_credit(4, crn, seed=7 + crn, g=600, kind=kind)
    rounds = list(refine_with(credit, draw, budget=600 * (T - 1) * 12, z=2.0))
    assert len(rounds) >= 2 and int(rounds[-1].counts.max()) >= 16
    grown = rounds[-1].looks  # (G, T - 1): rounds in which each state got continuations, at most one per round
    assert int(grown.max()) == len(rounds) and bool(((grown > 0) == (rounds[-1].counts > 4)).all())
    share, n = null_share(rounds[-1])
    assert share <= false_call_rate(2.0) + bound(n), f"{share:.3f} determined after refinement"


# --------------------------------------------------------------------------- the last step
def noisy_credit(k: int, kind: str, rescore: int, seed: int, g: int = 500) -> Credit:
    """A reward that is pure noise, a new draw each time anything is scored: the final image's value is one
    draw, or the mean of 1 + rescore draws (`final_scores`). 500 trajectories: the step from the group-mean
    start pools all their rewards in its permutation test, whose cost grows with them."""
    gen = torch.Generator().manual_seed(seed)
    continuations = _reward(torch.randn(g, T - 1, k, generator=gen), kind)
    scores = _reward(torch.randn(g, 1 + rescore, generator=gen), kind)  # (G, 1 + R)
    rewards = scores.mean(1)
    return Credit("noise", rewards, rewards - rewards.mean(), continuations, [2, T - 2], crn=False,
                  final_scores=scores if rescore else None)


def last_share(credit: Credit) -> tuple[float, int]:
    return _share(credit.step_classes(2.0)[:, -1], credit.step_valid[:, -1])


@pytest.mark.parametrize("kind,k", [("gaussian", 4), ("gaussian", 16), ("bernoulli", 16)])
def test_the_last_step_holds_a_noisy_rewards_noise_unless_the_image_is_scored_again(kind, k):
    """The final reward taken as exact: a reward that is noise gives the last step a credit of pure noise, with an
    error that only counts the continuations' spread (called determined 20-90 % of the time). Scored 1 + 4 times,
    the image's value has its own error and the last step holds the nominal rate."""
    once, n = last_share(noisy_credit(k, kind, 0, seed=k))
    assert once > 0.15, once
    again, n = last_share(noisy_credit(k, kind, 4, seed=k))
    assert again <= false_call_rate(2.0) + bound(n), again


# --------------------------------------------------------------------------- looks of refined cells
def test_a_round_that_grows_both_end_states_is_one_look():
    """Each refinement round tests a cell again when either end state got continuations: once per round. Three
    states; rounds 0 and 1 grow states 1 and 2 together, round 2 grows state 1 alone, round 3 state 3 alone."""
    looks, rounds = None, None
    for grown in ([0, 1], [0, 1], [0], [2]):  # state columns 0..2 = states 1..3
        states = torch.tensor(grown)
        looks, rounds = grow_looks(looks, rounds, torch.zeros_like(states), states, (1, 3))
    assert looks.tolist() == [[3.0, 2.0, 1.0]]
    steps = unit_looks(looks, rounds, [0, 1, 2, 3, 4], 1)[0]  # x_T-1, 1-2, 2-3, 3-image
    # step 1->2: rounds {0, 1, 2} -> 1 + 3 looks (not 1 + 3 + 2); step 2->3: rounds {0, 1, 3} -> 4; the ends
    # x_T and the image never grow
    assert steps.tolist() == [4.0, 4.0, 4.0, 2.0]
    assert unit_looks(looks, None, [0, 1, 2, 3, 4], 1)[0].tolist() == [4.0, 6.0, 4.0, 2.0]  # the per-state sum
    chunk = unit_looks(looks, rounds, [0, 2, 4], 1)[0]  # x_T -> state 2 (rounds 0, 1), state 2 -> image
    assert chunk.tolist() == [3.0, 3.0]


def test_repeated_rows_of_one_state_in_a_round_count_once():
    looks, rounds = grow_looks(None, None, torch.tensor([0, 0, 1]), torch.tensor([1, 1, 1]), (2, 2))
    assert looks.tolist() == [[0.0, 1.0], [0.0, 1.0]] and rounds.tolist() == [[0, 1], [0, 1]]
