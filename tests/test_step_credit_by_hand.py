"""The trainer's per-step advantages against hand values (docs/methods.md "Per-step advantages"): the discount
and lambda a ppo run is configured with are the ones its GAE uses, and dense_grpo normalises each step's gains
within the group, not all steps together."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
import torch

from workbench.flow.sampler import sample_group
from workbench.models.embedded import EmbeddedPolicy, build_embedded
from workbench.rl.step_advantages import lookahead_advantages
from workbench.train import TrainConfig, Trainer, preset

SMALL = dict(group=2, steps=3, chunks="1,2", prompts_per_iteration=1, eval_prompts=0, iterations=1)


def fresh_policy() -> EmbeddedPolicy:
    model = build_embedded(seed=0)
    model.text_encoder.eval().requires_grad_(False)
    return EmbeddedPolicy(model)


def test_ppo_advantages_use_the_configured_discount_and_lambda():
    """A critic that values every state c = 0.3 (V = 0 after the image); T = 4 transitions (3 trained and the
    untrained last one, Flow-GRPO's), gamma 0.5, lambda 0.8:

        delta_t = gamma c - c = -0.15 (t < 3),   delta_3 = r - c,   A_t = delta_t + gamma lambda A_{t+1} (0.4)
        r = 1: A_3 = 0.7, A_2 = -0.15 + 0.28 = 0.13, A_1 = -0.15 + 0.4 x 0.13 = -0.098, A_0 = -0.1892
        r = 0: A_3 = -0.3, A_2 = -0.27, A_1 = -0.258, A_0 = -0.15 + 0.4 x (-0.258) = -0.2532

    gamma and lambda swapped give A_2 = -0.06 + 0.28 = 0.22 for r = 1; the defaults (1, 0.95) 0.665."""
    config = replace(preset("ppo"), **SMALL, gae_gamma=0.5, gae_lambda=0.8)
    assert TrainConfig.from_dict(config.to_dict()).gae_gamma == 0.5  # a resumed run reads them back
    assert TrainConfig.from_dict(config.to_dict()).gae_lambda == 0.8
    trainer = Trainer(config, None, fresh_policy())
    head = trainer.step_credit.critic.head[-1]
    with torch.no_grad():
        head.weight.zero_()
        head.bias.fill_(0.3)
    group = sample_group(trainer.policy, trainer.pool[0], config.sampling_config(1))
    rewards = torch.tensor([[1.0, 0.0]])  # (L = 1, G = 2)
    adv, returns, values, _ = trainer.step_credit.gae([group], rewards)
    expected = torch.tensor([[-0.1892, -0.098, 0.13, 0.7], [-0.2532, -0.258, -0.27, -0.3]])
    assert torch.allclose(values, torch.full((2, 4), 0.3), atol=1e-6)
    assert torch.allclose(adv.cpu(), expected, atol=1e-6) and torch.allclose(returns.cpu(), expected + 0.3, atol=1e-6)
    # the advantages the objective gets: those of the trained steps, normalised over them (mean 0, std 1)
    steps = config.trained_steps(1)
    assert steps == [0, 1, 2]
    trained, _ = trainer.step_credit(1, [group], rewards, torch.tensor(steps))
    cells = expected[:, steps]
    assert torch.allclose(trained.cpu(), (cells - cells.mean()) / cells.std(unbiased=False), atol=1e-4)


def test_dense_grpo_normalises_each_steps_gains_in_the_group_by_hand():
    """Gains d = R_{t+1} - R_t of G = 3: step 0 (1, 0, -1), step 1 (0.01, 0, -0.01). Each step on its own scale:
    (d - mean) / (std + 1e-4), std over the group (population): 1 / sqrt(2/3) = 1.2247 for step 0 and
    0.01 / (0.0081650 + 0.0001) = 1.2099 for step 1. Normalised over both steps together, step 1 would be
    ~0.012."""
    values = torch.tensor([[0.0, 1.0, 1.01], [0.0, 0.0, 0.0], [0.0, -1.0, -1.01]])  # (G, T + 1): R_0, R_1, r
    adv = lookahead_advantages(values)
    s0, s1 = (2 / 3) ** 0.5, 0.01 * (2 / 3) ** 0.5
    top = [1 / (s0 + 1e-4), 0.01 / (s1 + 1e-4)]
    expected = torch.tensor([top, [0.0, 0.0], [-top[0], -top[1]]])
    assert torch.allclose(adv, expected, atol=1e-5)
    assert adv[0, 1] == pytest.approx(1.2099, abs=1e-4)


def test_dense_grpo_advantages_in_the_trainer_are_normalised_per_step():
    """Through the trainer: every trained step's advantages over the group have mean 0 and the spread of that
    step's own gains divided by itself (+ 1e-4), whatever the other steps' scale."""
    config = replace(preset("dense_grpo"), **{**SMALL, "group": 4})
    trainer = Trainer(config, None, fresh_policy())
    group = sample_group(trainer.policy, trainer.pool[0], config.sampling_config(1))
    rewards = trainer.reward_fn(group.images, [group.prompt] * 4)
    steps = torch.tensor(config.trained_steps(1))  # (S,) = 0, 1, 2 of T = 4 transitions
    adv, _ = trainer.step_credit(1, [group], rewards[None], steps)  # (G, S)
    values, _ = trainer.step_credit.values(group, rewards)  # (G, T + 1) look-ahead rewards, then r_i
    gains = values.diff(dim=1)[:, steps]  # (G, S)
    spread = gains.std(dim=0, unbiased=False)  # (T,)
    assert float(spread.max() / spread.min()) > 1.5  # steps on different scales: a pooled normalisation differs
    assert torch.allclose(adv.mean(dim=0), torch.zeros(3), atol=1e-5)
    assert torch.allclose(adv.std(dim=0, unbiased=False), spread / (spread + 1e-4), atol=1e-4)


def test_ppo_reports_its_critic_and_regresses_it_on_the_iterations_stream(random_policy, monkeypatch):
    """The critic of the first test (every state valued 0.3) after one call at iteration 1: the metrics are the
    values' mean 0.3, their explained variance of the returns 1 - Var(A) / Var(A + 0.3) = 0, the regression's mean
    loss and its wall and CPU seconds. The regression shuffles its minibatches (4 states here) with the stream
    (seed, iteration, 7), whatever ran before: the same as a twin critic fitted by hand on it, not as at iteration 2."""
    import workbench.train.step_credit as step_credit

    monkeypatch.setattr(step_credit, "CRITIC_BATCH", 4)  # 8 states in 2 minibatches: their order matters
    config, policy = replace(preset("ppo"), **SMALL, seed=3), random_policy

    def flat_critic() -> step_credit.CriticCredit:
        credit = step_credit.CriticCredit(config, policy)
        head = credit.critic.head[-1]
        with torch.no_grad():
            head.weight.zero_()
            head.bias.fill_(0.3)
        return credit

    group = sample_group(policy, "a red circle", config.sampling_config(1))
    rewards = torch.tensor([[1.0, 0.0]])  # (L = 1, G = 2)
    credit, twin, later = flat_critic(), flat_critic(), flat_critic()
    wall, cpu = time.perf_counter(), time.process_time()
    _, metrics = credit(1, [group], rewards, torch.tensor([0, 1, 2]))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert metrics.keys() == {"critic/loss", "critic/explained_var", "critic/value_mean", "time/critic_s",
                              "time/critic_cpu_s"}
    assert metrics["critic/value_mean"] == pytest.approx(0.3)
    assert metrics["critic/explained_var"] == pytest.approx(0.0, abs=1e-5)
    assert 0 < metrics["time/critic_s"] <= wall and 0 < metrics["time/critic_cpu_s"] <= cpu  # within the call
    _, returns, _, inputs = twin.gae([group], rewards)
    assert metrics["critic/loss"] == twin.fit(inputs, returns, config.critic_epochs, step_credit._seed(3, 1, 7))
    assert all(torch.equal(a, b) for a, b in zip(credit.critic.parameters(), twin.critic.parameters()))
    later(2, [group], rewards, torch.tensor([0, 1, 2]))
    assert not all(torch.equal(a, b) for a, b in zip(credit.critic.parameters(), later.critic.parameters()))


def test_the_explainers_critic_advantages_by_hand(random_policy):
    """step_compare.critic_advantages on a group of G = 2, T = 4 whose last step is untrained, gamma 0.5, lambda
    0.8, rewards (1, 0). A run's critic (every state 0.3) gives the first test's GAE advantages, normalised over the
    3 trained steps and 0 on the last. Without one, the seed's critic is regressed on the Monte-Carlo returns
    gamma^(T-1-t) r_i, (0.125, 0.25, 0.5, 1) and (0, 0, 0, 0) (lambda 1: not the GAE returns of its own values)."""
    from workbench.rl.step_advantages import normalise
    from workbench.train.step_compare import critic_advantages
    from workbench.train.step_credit import CriticCredit

    config = replace(preset("ppo"), **SMALL, gae_gamma=0.5, gae_lambda=0.8)
    group = sample_group(random_policy, "a red circle", config.sampling_config(1))
    rewards = torch.tensor([1.0, 0.0])
    run = CriticCredit(config, random_policy)
    head = run.critic.head[-1]
    with torch.no_grad():
        head.weight.zero_()
        head.bias.fill_(0.3)
    adv, source = critic_advantages(random_policy, group, rewards, config, critic_state=run.state_dict())
    hand = torch.tensor([[-0.1892, -0.098, 0.13], [-0.2532, -0.258, -0.27]])
    assert source == "the run's trained critic"
    assert torch.allclose(adv[:, :3], (hand - hand.mean()) / hand.std(unbiased=False), atol=1e-4)
    assert adv[:, 3].tolist() == [0.0, 0.0]

    adv, source = critic_advantages(random_policy, group, rewards, config, fit_epochs=5)
    assert source == "a critic fitted on this group's returns (5 passes)"
    twin = CriticCredit(config, random_policy)
    inputs = twin.gae([group], rewards)[3]
    twin.fit(inputs, torch.tensor([[0.125, 0.25, 0.5, 1.0], [0.0, 0.0, 0.0, 0.0]]), 5, config.seed)
    mask = torch.tensor([[True, True, True, False]] * 2)
    expected = torch.where(mask, normalise(twin.gae([group], rewards)[0], mask), torch.zeros(2, 4))
    assert torch.allclose(adv, expected, atol=1e-6) and adv[:, 3].tolist() == [0.0, 0.0]


def test_dense_grpo_adds_up_the_look_ahead_evaluations_of_every_group(monkeypatch):
    """One call over L = 2 groups (their look-ahead values stubbed): each group's advantages in turn, the transformer
    evaluations both look-aheads spent (5 + 7), and the call's wall and CPU seconds."""
    from types import SimpleNamespace

    from workbench.train.step_credit import LookaheadCredit

    credit = LookaheadCredit(preset("dense_grpo"), SimpleNamespace(device=torch.device("cpu")), reward_fn=None)
    values = {"first": (torch.tensor([[0.0, 1.0, 1.0], [0.0, 0.0, 0.0]]), 5),
              "second": (torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, -1.0]]), 7)}  # (G, T + 1), evaluations
    monkeypatch.setattr(credit, "values", lambda group, rewards: values[group])
    wall, cpu = time.perf_counter(), time.process_time()
    adv, metrics = credit(1, ["first", "second"], torch.zeros(2, 2), torch.tensor([0, 1]))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert torch.equal(adv, torch.cat([lookahead_advantages(values[g][0]) for g in ("first", "second")]))
    assert metrics["lookahead/nfe"] == 12.0
    assert 0 < metrics["time/lookahead_s"] <= wall and 0 <= metrics["time/lookahead_cpu_s"] <= cpu


def test_the_critics_initial_weights_come_from_its_own_stream_of_the_seed(random_policy):
    """CriticCredit draws its critic's weights from the stream (seed, 7), the tag its regressions' streams
    (seed, iteration, 7) share, in a forked generator: the same weights for a seed whatever ran before, others for
    another seed, and the global generator left as it was."""
    from workbench.rl.critic import ValueNet, prompt_features
    from workbench.train import step_credit

    config = replace(preset("ppo"), seed=3)
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    credit = step_credit.CriticCredit(config, random_policy)
    assert torch.equal(torch.random.get_rng_state(), before)
    text_dim = prompt_features(random_policy.encode([""])).shape[1]
    torch.manual_seed(step_credit._seed(3, 7))
    twin = ValueNet(random_policy.latent_shape[0], text_dim).state_dict()
    assert all(torch.equal(v, twin[k]) for k, v in credit.critic.state_dict().items())
    other = step_credit.CriticCredit(replace(config, seed=4), random_policy).critic.state_dict()
    assert not all(torch.equal(v, other[k]) for k, v in credit.critic.state_dict().items())


def test_the_critic_steps_at_the_configured_learning_rate(random_policy):
    """Adam's first step moves each weight by lr x g / (|g| + 1e-8): the largest move is critic_lr (0.02 here, not
    the default 1e-3), on one minibatch of 4 states regressed towards 5."""
    from workbench.train.step_credit import CriticCredit

    credit = CriticCredit(replace(preset("ppo"), critic_lr=0.02), random_policy)
    gen = torch.Generator().manual_seed(0)
    d = credit.critic.text.in_features
    inputs = (torch.randn(4, *random_policy.latent_shape, generator=gen), torch.rand(4, generator=gen),
              torch.randn(4, d, generator=gen))
    before = [p.detach().clone() for p in credit.critic.parameters()]
    credit.fit(inputs, torch.full((4,), 5.0), epochs=1, seed=0)
    moved = max(float((p.detach() - b).abs().max()) for p, b in zip(credit.critic.parameters(), before))
    assert moved == pytest.approx(0.02, rel=1e-3)


def test_ppo_advantages_are_float32_whatever_the_rewards_dtype(random_policy, group):
    """A 0/1 reward given as integers, or rewards in float64, give the advantages and returns of the same rewards in
    float32 (the critic's dtype): GAE's discount table is built in the rewards' dtype, where an integer
    gamma x lambda = 0.95 would be 0."""
    from workbench.train.step_credit import CriticCredit

    credit = CriticCredit(preset("ppo"), random_policy)
    adv, returns, _, _ = credit.gae([group], torch.tensor([[0.0, 1.0, 1.0, 0.0]]))  # (L = 1, G = 4)
    for rewards in (torch.tensor([[0, 1, 1, 0]]), torch.tensor([[0.0, 1.0, 1.0, 0.0]], dtype=torch.float64)):
        a, r, _, _ = credit.gae([group], rewards)
        assert a.dtype == r.dtype == torch.float32
        assert torch.allclose(a, adv, atol=1e-6) and torch.allclose(r, returns, atol=1e-6)
