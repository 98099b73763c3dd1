"""Per-step advantages: GAE, the critic, the look-ahead gains, and ppo / dense_grpo in the trainer (with resume)."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import pytest
import torch

from workbench.core.errors import WorkbenchError
from workbench.models.embedded import EmbeddedPolicy, build_embedded
from workbench.rl.critic import ValueNet, fit, parameter_count, predict
from workbench.rl.objectives import OBJECTIVES, ObjectiveSettings, PolicyInputs
from workbench.rl.step_advantages import explained_variance, final_rewards, gae, lookahead_advantages, normalise
from workbench.train import TrainConfig, Trainer, preset
from workbench.train.store import RunStore


def gae_loop(rewards: torch.Tensor, values: torch.Tensor, gamma: float, lam: float) -> torch.Tensor:
    """The textbook backward recursion, one step at a time."""
    b, t = rewards.shape
    adv, last = torch.zeros(b, t, dtype=torch.float64), torch.zeros(b, dtype=torch.float64)
    for s in reversed(range(t)):
        delta = rewards[:, s] + gamma * values[:, s + 1] - values[:, s]
        last = delta + gamma * lam * last
        adv[:, s] = last
    return adv


@pytest.mark.parametrize("gamma,lam", [(1.0, 1.0), (1.0, 0.95), (0.9, 0.5), (0.99, 0.0), (0.0, 0.7)])
def test_gae_equals_the_backward_loop(gamma, lam):
    gen = torch.Generator().manual_seed(0)
    rewards = final_rewards(torch.randn(5, generator=gen, dtype=torch.float64), 7)  # (5, 7) reward at the end
    values = torch.randn(5, 8, generator=gen, dtype=torch.float64)
    values[:, -1] = 0  # terminal
    adv, ret = gae(rewards, values, gamma, lam)
    assert torch.allclose(adv, gae_loop(rewards, values, gamma, lam), atol=1e-12)
    assert torch.allclose(ret, adv + values[:, :-1])


def test_gae_hand_cases():
    r = final_rewards(torch.tensor([1.0]), 3)  # one trajectory, reward 1 after 3 steps
    v = torch.tensor([[0.2, 0.5, 0.9, 0.0]])
    adv, ret = gae(r, v, gamma=1.0, lam=1.0)  # Monte-Carlo: A_t = r - V(x_t), return = r everywhere
    assert torch.allclose(adv, torch.tensor([[0.8, 0.5, 0.1]])) and torch.allclose(ret, torch.ones(1, 3))
    adv, _ = gae(r, v, gamma=1.0, lam=0.0)  # one-step TD errors V(x_{t+1}) - V(x_t), and r - V on the last
    assert torch.allclose(adv, torch.tensor([[0.3, 0.4, 0.1]]))
    with pytest.raises(WorkbenchError, match="values"):
        gae(r, v[:, :3], 1.0, 1.0)


def test_gae_refuses_a_discount_or_lambda_outside_0_1():
    r, v = final_rewards(torch.tensor([1.0]), 2), torch.zeros(1, 3)
    for gamma, lam in ((1.5, 0.9), (0.9, 1.5), (-0.1, 0.9), (0.9, -0.1)):
        with pytest.raises(WorkbenchError, match=f"^gamma and lambda must be in \\[0, 1\\], got gamma={gamma}, "
                                                 f"lambda={lam}$"):
            gae(r, v, gamma, lam)


def test_final_rewards_and_gae_stay_on_the_rewards_device():
    """torch's meta device stands in for a GPU: a tensor made on the CPU cannot meet a meta one, nor a CUDA one."""
    r = final_rewards(torch.ones(2, device="meta"), 3)
    adv, ret = gae(r, torch.zeros(2, 4, device="meta"), 0.9, 0.95)
    assert (r.device.type, adv.device.type, ret.device.type) == ("meta", "meta", "meta")


def test_lookahead_advantages_normalise_each_step_in_the_group():
    values = torch.tensor([[0.0, 0.5, 1.0], [0.0, 0.0, 0.0], [0.0, 0.1, 0.2]])  # R_0, R_1, r_i of G = 3
    adv = lookahead_advantages(values)
    d = values.diff(dim=1)
    expected = (d - d.mean(0)) / (d.std(0, unbiased=False) + 1e-4)
    assert torch.allclose(adv, expected)
    flat = lookahead_advantages(torch.tensor([[0.0, 1.0], [0.0, 1.0]]))  # equal gains: no signal
    assert torch.equal(flat, torch.zeros(2, 1))


def test_lookahead_advantages_by_hand_per_step():
    """values (R_0, R_1, r) = (0, 1, 1) and (0, 0, 2): gains d = (1, 0) and (0, 2).
    Step 0: mean 0.5, population std 0.5 -> (1, -1); step 1: mean 1, std 1 -> (-1, 1) (eps 0)."""
    adv = lookahead_advantages(torch.tensor([[0.0, 1.0, 1.0], [0.0, 0.0, 2.0]]), eps=0.0)
    assert adv.tolist() == [[1.0, -1.0], [-1.0, 1.0]]


def test_lookahead_advantages_clip_both_signs_at_5():
    """G = 37, one trajectory gains 1 at step 0 and loses 1 at step 1, the others 0: its z-score is
    (1 - 1/37) / (6/37) = 6 (population std sqrt(p (1 - p)) = 6/37 with p = 1/37), clipped to +5 and -5."""
    values = torch.zeros(37, 3)
    values[0, 1] = 1.0  # R_1 of trajectory 0; its r stays 0
    adv = lookahead_advantages(values, eps=0.0)
    assert adv[0].tolist() == [5.0, -5.0]
    assert torch.allclose(adv[1:], torch.tensor([-1 / 6, 1 / 6]).expand(36, 2))


def test_lookahead_advantages_keep_a_step_whose_std_equals_tol():
    """std < tol is a zero-variance step (as grpo's groups): gains (0, 1) have std 0.5, kept at tol = 0.5."""
    values = torch.tensor([[0.0, 0.0], [0.0, 1.0]])
    assert lookahead_advantages(values, eps=0.0, tol=0.5).tolist() == [[-1.0], [1.0]]
    assert lookahead_advantages(values, eps=0.0, tol=0.6).tolist() == [[0.0], [0.0]]


def test_lookahead_advantages_need_a_group_by_steps_table():
    for shape in ((3,), (3, 1)):  # no step axis, or no step
        with pytest.raises(WorkbenchError, match=re.escape(f"look-ahead values must be (G, T + 1) with T >= 1, "
                                                           f"got {shape}") + "$"):
            lookahead_advantages(torch.zeros(shape))


def test_normalise_by_hand_over_the_masked_cells():
    """Cells 1 and 3 (the mask): mean 2, population std 1; with eps 1 every cell is (a - 2) / 2, clipped to +-5."""
    adv = torch.tensor([[-100.0, 1.0, 3.0, 100.0]])
    mask = torch.tensor([[False, True, True, False]])
    assert normalise(adv, mask, eps=1.0).tolist() == [[-5.0, -0.5, 0.5, 5.0]]
    assert torch.allclose(normalise(adv, mask), torch.tensor([[-5.0, -1.0, 1.0, 5.0]]))  # eps 1e-8
    assert normalise(adv, torch.tensor([[False, True, False, False]])).tolist() == [[0.0] * 4]  # one cell: no scale


def test_explained_variance_by_hand():
    """target (0, 2): mean 1, population variance 1. Predicting (0, 0) leaves residuals (0, 2), population
    variance 1: 1 - 1 / 1 = 0. A constant target has no variance to explain: NaN."""
    target = torch.tensor([0.0, 2.0])
    assert explained_variance(target, target) == 1.0 and explained_variance(torch.zeros(2), target) == 0.0
    assert math.isnan(explained_variance(torch.zeros(2), torch.ones(2)))


def test_normalise_and_explained_variance():
    adv = normalise(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    assert abs(float(adv.mean())) < 1e-6 and abs(float(adv.std(unbiased=False)) - 1) < 1e-4
    target = torch.tensor([1.0, 2.0, 3.0])
    assert explained_variance(target, target) == 1.0 and explained_variance(torch.zeros(3), target) < 0.01


def test_critic_fits_a_known_value_function():
    """V(x, sigma, text) = mean(x) * (1 - sigma) + text[0]: the critic learns it to a small error."""
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    n = 512
    x, sigma = torch.randn(n, 3, 8, 8, generator=gen), torch.rand(n, generator=gen)
    text = torch.randn(n, 4, generator=gen)
    target = x.mean(dim=(1, 2, 3)) * 4 * (1 - sigma) + text[:, 0]
    critic = ValueNet(3, 4)
    assert parameter_count(critic) < 300_000
    before = explained_variance(predict(critic, x, sigma, text), target)
    fit(critic, torch.optim.Adam(critic.parameters(), lr=3e-3), x, sigma, text, target, epochs=30, batch=128,
        generator=gen)  # explained variance 0.999 after 30 epochs (seeds 0, 1), 0.98 after 10
    after = explained_variance(predict(critic, x, sigma, text), target)
    assert before < 0.2 and after > 0.9, (before, after)


def test_per_step_advantages_only_for_step_objectives():
    lp = torch.zeros(2, 4, requires_grad=True)
    inputs = PolicyInputs(lp, torch.zeros(2, 4), torch.randn(2, 4))
    OBJECTIVES.get("ppo")(inputs, ObjectiveSettings()).loss.backward()
    with pytest.raises(WorkbenchError, match="per-step advantages"):
        OBJECTIVES.get("chunk_grpo")(inputs, ObjectiveSettings(chunks=[2, 2]))
    with pytest.raises(WorkbenchError, match="advantages must have shape"):
        PolicyInputs(lp, torch.zeros(2, 4), torch.randn(2, 3))


# 2 prompts x 2 trajectories x 3 trained steps on a random embedded model
TINY = TrainConfig(group=2, steps=3, chunks="1,2", prompts_per_iteration=2, eval_prompts=1, eval_every=2,
                   iterations=2, sample_every=10, checkpoint_every=10, lr=1e-3, clip_low=0.2)


def fresh_policy() -> EmbeddedPolicy:
    model = build_embedded(seed=0)
    model.text_encoder.eval().requires_grad_(False)
    return EmbeddedPolicy(model)


def untimed(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.startswith("time/")}


@pytest.mark.parametrize("objective,metrics", [("ppo", ["critic/loss", "critic/explained_var"]),
                                               ("dense_grpo", ["lookahead/nfe", "time/lookahead_s"])])
def test_per_step_objectives_run_and_resume_exactly(tmp_path, objective, metrics):
    config = replace(preset(objective), **{k: getattr(TINY, k) for k in (
        "group", "steps", "chunks", "prompts_per_iteration", "eval_prompts", "eval_every", "iterations",
        "sample_every", "checkpoint_every", "lr", "clip_low")})
    straight = fresh_policy()
    a = Trainer(config, tmp_path / "a", straight)
    a.run()
    first = Trainer(config, tmp_path / "b", fresh_policy())
    first.run(callback=lambda e: first.request_stop() if e.kind == "iteration" and e.iteration == 1 else None)
    if objective == "ppo":
        assert (RunStore(tmp_path / "b").latest_checkpoint().critic or {}).get("critic") is not None
    resumed = Trainer.resume(tmp_path / "b", policy=fresh_policy())
    resumed.run()
    rows_a, rows_b = RunStore(tmp_path / "a").metrics(), RunStore(tmp_path / "b").metrics()
    assert all(m in rows_a[-1] for m in metrics)
    assert untimed(rows_a[-1]) == untimed(rows_b[-1])
    for k, v in straight.transformer.state_dict().items():
        assert torch.equal(v, resumed.policy.transformer.state_dict()[k]), k
    if objective == "ppo":  # the critic itself continues where it stopped
        for k, v in a.step_credit.critic.state_dict().items():
            assert torch.equal(v, resumed.step_credit.critic.state_dict()[k]), k


def test_ppo_refuses_to_resume_without_a_critic(tmp_path):
    config = replace(TINY, iterations=1)
    Trainer(config, tmp_path / "run", fresh_policy()).run()
    store = RunStore(tmp_path / "run")
    store.write_config(replace(config, objective="ppo", chunks="3", iterations=2).to_dict())
    with pytest.raises(WorkbenchError, match="no critic"):
        Trainer.resume(tmp_path / "run", policy=fresh_policy())


def test_dense_grpo_with_the_x0_look_ahead_needs_no_extra_sampling(tmp_path):
    config = replace(preset("dense_grpo"), lookahead="x0", **{k: getattr(TINY, k) for k in (
        "group", "steps", "chunks", "prompts_per_iteration", "lr", "clip_low")}, iterations=1, eval_prompts=0)
    Trainer(config, tmp_path / "run", fresh_policy()).run()
    row = RunStore(tmp_path / "run").metrics()[-1]
    assert row["lookahead/nfe"] == 0 and row["loss/policy"] == row["loss/policy"]  # x0 predictions are stored


def test_the_explainers_per_step_advantages(random_policy, monkeypatch):
    """step_compare.per_step_advantages: (G, T) advantages for the objectives registered with a step credit only;
    ppo's from `critic_advantages` (its 200 critic passes stubbed here), dense_grpo's the trainer's look-ahead gains
    under the given config (x0: the stored predictions), computed in the `batched()` context, 0 on the untrained
    last step."""
    from contextlib import contextmanager

    import workbench.train.step_compare as step_compare
    from workbench.flow.sampler import sample_group
    from workbench.flow.trajectory import SamplingConfig
    from workbench.rewards import build_reward
    from workbench.train.step_credit import LookaheadCredit

    group = sample_group(random_policy, "a red circle", SamplingConfig(group=3, steps=4, seed=0, window=(0, 3)))
    reward_fn, rewards = build_reward("adherence"), torch.tensor([0.1, 0.9, 0.5], dtype=torch.float64)
    config, critic, calls, entered = TrainConfig(lookahead="x0"), torch.full((3, 4), 2.0), [], []
    monkeypatch.setattr(step_compare, "critic_advantages", lambda *args: calls.append(args) or (critic, "stub"))

    @contextmanager
    def batched():
        entered.append(True)
        yield

    OBJECTIVES.register("a_bare", info=None)(OBJECTIVES.get("step_grpo"))  # no record: no step credit
    try:
        out = step_compare.per_step_advantages(random_policy, group, rewards, ["step_grpo", "ppo", "dense_grpo",
                                                                               "gspo", "a_bare"], reward_fn, config,
                                               batched=batched)
    finally:
        OBJECTIVES.unregister("a_bare")
    assert out.keys() == {"ppo", "dense_grpo"} and out["ppo"] is critic and entered == [True]
    assert len(calls) == 1 and calls[0][:2] == (random_policy, group) and calls[0][3] is config
    assert calls[0][2].dtype == torch.float32 and torch.equal(calls[0][2], rewards.float())
    values, _ = LookaheadCredit(config, random_policy, reward_fn).values(group, rewards.float())  # (G, T + 1)
    assert torch.equal(out["dense_grpo"][:, :3], lookahead_advantages(values)[:, :3])
    assert out["dense_grpo"][:, 3].tolist() == [0.0] * 3 and bool((out["dense_grpo"][:, :3] != 0).all())
