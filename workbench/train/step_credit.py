"""Per-step advantages for the trainer: PPO's critic with GAE, and dense look-ahead credit (TP-GRPO).

An objective whose registration names a `step_credit` ('critic' or 'lookahead', `rl/objective_info.py`) is
trained with advantages (L, S), one per trajectory and trained step, computed here from the iteration's
groups; the maths is in `rl/step_advantages.py` and `rl/critic.py`, the look-ahead rewards come from the
credit estimators (`rl/credit_estimators.py`). docs/methods.md "Per-step advantages".

    credit = make_step_credit(config, policy, reward_fn)       # None for objectives with one A_i
    adv, metrics = credit(iteration, groups, rewards, steps)   # (L * G, S), {"critic/loss": ...}
"""

from __future__ import annotations

import time

import numpy as np
import torch

from workbench.core.errors import WorkbenchError
from workbench.flow.policy import FlowPolicy
from workbench.flow.trajectory import TrajectoryGroup
from workbench.rl import critic as critic_lib
from workbench.rl.credit_estimators import ESTIMATORS
from workbench.rl.objectives import OBJECTIVES
from workbench.rl.step_advantages import explained_variance, final_rewards, gae, lookahead_advantages, normalise
from workbench.train.config import TrainConfig

CRITIC_BATCH = 256  # states per critic minibatch


def _seed(*parts: int) -> int:
    return int(np.random.SeedSequence(list(parts)).generate_state(1)[0])


def group_states(policy: FlowPolicy, groups: list[TrajectoryGroup]) -> tuple:
    """(x (L*G*T, C, H, W), sigma (L*G*T,), text (L*G*T, D)) of states 0..T-1 of every trajectory, row-major
    (trajectory, step), and T."""
    t = groups[0].num_steps
    x = torch.cat([grp.states[:, :t] for grp in groups]).flatten(0, 1).to(policy.device)  # (L*G*T, C, H, W)
    g = groups[0].group_size
    sigma = groups[0].sigmas[:t].to(policy.device).repeat(len(groups) * g)  # (L*G*T,)
    text = critic_lib.prompt_features(policy.encode([grp.prompt for grp in groups]))  # (L, D)
    return x, sigma, text.repeat_interleave(g * t, dim=0), t


class CriticCredit:
    """PPO: A_{i,t} by GAE over V_phi, normalised over the batch; then V_phi regressed on the returns."""

    def __init__(self, config: TrainConfig, policy: FlowPolicy):
        self.config, self.policy = config, policy
        text_dim = critic_lib.prompt_features(policy.encode([""])).shape[1]
        with torch.random.fork_rng(devices=[]):  # pragma: no mutate (only the CPU generator draws here)
            torch.manual_seed(_seed(config.seed, 7))  # the critic's initial weights depend on the seed only
            self.critic = critic_lib.ValueNet(policy.latent_shape[0], text_dim).to(policy.device)
        self.optimizer = torch.optim.Adam(self.critic.parameters(), lr=config.critic_lr)

    def gae(self, groups: list[TrajectoryGroup], rewards: torch.Tensor) -> tuple:
        """(raw GAE advantages (B, T), returns (B, T), values (B, T), the critic's inputs) under the current critic."""
        cfg = self.config
        x, sigma, text, t = group_states(self.policy, groups)
        n = rewards.numel()
        values = critic_lib.predict(self.critic, x, sigma, text).view(n, t)  # (B, T)
        values = torch.cat([values, torch.zeros(n, 1, device=values.device)], dim=1)  # (B, T + 1), V(x_T) = 0
        r = rewards.reshape(-1).to(values)  # (B,)
        adv, returns = gae(final_rewards(r, t), values, cfg.gae_gamma, cfg.gae_lambda)  # (B, T) each
        return adv, returns, values[:, :t], (x, sigma, text)

    def fit(self, inputs: tuple, returns: torch.Tensor, epochs: int, seed: int) -> float:
        """Regress the critic on returns (B, T) of the states in inputs; the mean MSE loss."""
        gen = torch.Generator().manual_seed(seed)
        return critic_lib.fit(self.critic, self.optimizer, *inputs, returns.reshape(-1), epochs, CRITIC_BATCH, gen)

    def __call__(self, it: int, groups: list[TrajectoryGroup], rewards: torch.Tensor, steps: torch.Tensor
                 ) -> tuple[torch.Tensor, dict[str, float]]:
        """Advantages (L * G, S) of the trained steps, normalised over the batch, and the critic/* metrics; then
        one round of critic regression on the returns (the advantages use the critic before it)."""
        start, cpu = time.perf_counter(), time.process_time()
        adv, returns, values, inputs = self.gae(groups, rewards)
        adv = normalise(adv[:, steps.to(adv.device)])  # (B, S)
        explained = explained_variance(values, returns)
        loss = self.fit(inputs, returns, self.config.critic_epochs, _seed(self.config.seed, it, 7))
        return adv, {"critic/loss": loss, "critic/explained_var": explained,
                     "critic/value_mean": float(values.mean()), "time/critic_s": time.perf_counter() - start,
                     "time/critic_cpu_s": time.process_time() - cpu}

    def state_dict(self) -> dict:
        return {"critic": self.critic.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict | None) -> None:
        if not state or "critic" not in state:
            raise WorkbenchError("this checkpoint holds no critic (critic.pt): it was not written by a ppo run; "
                                 "resume it with its own objective")
        self.critic.load_state_dict(state["critic"])
        self.optimizer.load_state_dict(state["optimizer"])


class LookaheadCredit:
    """Dense GRPO: A_{i,t} from the gains of a look-ahead reward along each trajectory, per step in its group."""

    def __init__(self, config: TrainConfig, policy: FlowPolicy, reward_fn):
        self.config, self.policy, self.reward_fn = config, policy, reward_fn
        self.estimator = ESTIMATORS.get(config.lookahead)

    def values(self, group: TrajectoryGroup, rewards: torch.Tensor) -> tuple[torch.Tensor, int]:
        """(G, T + 1) look-ahead values R_0 .. R_{T-1}, r_i of one group, and the transformer evaluations spent."""
        est = self.estimator(self.policy, group, self.reward_fn)
        return torch.cat([est.start[:, None], est.continuation_rewards[..., 0], rewards.cpu()[:, None]], dim=1), est.nfe

    def __call__(self, it: int, groups: list[TrajectoryGroup], rewards: torch.Tensor, steps: torch.Tensor
                 ) -> tuple[torch.Tensor, dict[str, float]]:
        start, cpu, advs, nfe = time.perf_counter(), time.process_time(), [], 0
        for grp, r in zip(groups, rewards):
            values, spent = self.values(grp, r)
            advs.append(lookahead_advantages(values)[:, steps.cpu()])  # (G, S)
            nfe += spent
        adv = torch.cat(advs).to(self.policy.device)  # (L * G, S)
        return adv, {"lookahead/nfe": float(nfe), "time/lookahead_s": time.perf_counter() - start,
                     "time/lookahead_cpu_s": time.process_time() - cpu}

    def state_dict(self) -> None:
        return None

    def load_state_dict(self, state) -> None:
        return None


def make_step_credit(config: TrainConfig, policy: FlowPolicy, reward_fn, world: int = 1):
    """The per-step advantage source of config.objective, or None when it trains with one A_i per trajectory."""
    kind = OBJECTIVES.info(config.objective).step_credit
    if kind is None:
        return None
    if world > 1:
        raise WorkbenchError(f"{config.objective} computes per-step advantages on one process only; run it "
                             "without torchrun / accelerate launch")
    return CriticCredit(config, policy) if kind == "critic" else LookaheadCredit(config, policy, reward_fn)
