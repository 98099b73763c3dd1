"""Per-step advantages of one group held against its Monte-Carlo credit (docs/methods.md "Per-step advantages").

For one sampled group with a measured `Credit` (state values from continuations), each method's advantage map
(G, T) is set beside the credit d_{i,t}: GRPO's uniform A_i (what step_grpo, chunk_grpo and gspo give every
step), ppo's GAE over a critic (a run's trained critic, or one fitted on this group), and dense_grpo's
look-ahead gains. Agreement is measured on the trained cells with A_i != 0: the share of equal signs
(also on the cells whose credit sign is determined, `credit_stats.classify`) and the Pearson correlation.

    cmp = compare_step_advantages(policy, group, reward_fn, credit, TrainConfig())
    cmp.agreement["ppo"]   # {"sign_agreement": ..., "sign_agreement_determined": ..., "correlation": ...}
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, replace

import torch

from workbench.flow.policy import FlowPolicy
from workbench.flow.trajectory import TrajectoryGroup
from workbench.rl.credit import Credit
from workbench.rl.credit_stats import agreement
from workbench.rl.step_advantages import final_rewards, gae, lookahead_advantages, normalise
from workbench.train.config import TrainConfig
from workbench.train.step_credit import CriticCredit, LookaheadCredit

FIT_EPOCHS = 200  # critic passes over the group's G x T states when no trained critic is given
UNIFORM = "grpo (A_i on every step)"


@dataclass
class StepComparison:
    """Advantage maps of M methods on one group and their agreement with its credit."""

    names: list[str]  # M methods
    advantages: torch.Tensor  # (M, G, T) each method's per-step advantage; 0 on untrained steps
    credit: torch.Tensor  # (G, T) Monte-Carlo credit d_{i,t}
    valid: torch.Tensor  # (G, T) bool: trained steps of trajectories with A_i != 0
    determined: torch.Tensor  # (G, T) bool: credit sign determined at the credit's z
    agreement: dict[str, dict[str, float]]  # method -> sign_agreement, sign_agreement_determined, correlation
    notes: dict[str, str]  # method -> where its advantages came from

    def table(self) -> list[dict]:
        """One row per method: name, sign agreement (all / determined cells), correlation, source."""
        return [{"method": n, **self.agreement[n], "source": self.notes[n]} for n in self.names]


def critic_advantages(policy: FlowPolicy, group: TrajectoryGroup, rewards: torch.Tensor, config: TrainConfig,
                      critic_state: dict | None = None, fit_epochs: int = FIT_EPOCHS) -> tuple[torch.Tensor, str]:
    """ppo's (G, T) GAE advantages on the group, normalised over its trained cells, and their source: a run's
    critic (`critic_state`, from a checkpoint's critic.pt) or a critic regressed on this group's Monte-Carlo
    returns (every state of trajectory i -> r_i, with gamma 1)."""
    credit = CriticCredit(config, policy)
    if critic_state is not None:
        credit.load_state_dict(critic_state)
        source = "the run's trained critic"
    else:  # regressed on the Monte-Carlo returns gamma^(T-1-t) r_i: GAE returns of an untrained critic would pull
        # the early states' targets towards its random values (lambda^(T-1-t) of them)
        inputs = credit.gae([group], rewards)[3]
        t = group.num_steps
        returns = gae(final_rewards(rewards, t), torch.zeros(len(rewards), t + 1), config.gae_gamma, 1.0)[1]
        credit.fit(inputs, returns.to(inputs[0].device), fit_epochs, config.seed)
        source = f"a critic fitted on this group's returns ({fit_epochs} passes)"
    adv = credit.gae([group], rewards)[0].cpu()  # (G, T)
    mask = group.config.sde_mask()[None].expand_as(adv)  # (G, T)
    return torch.where(mask, normalise(adv, mask), torch.zeros_like(adv)), source


def compare_step_advantages(policy: FlowPolicy, group: TrajectoryGroup, reward_fn, credit: Credit,
                            config: TrainConfig, critic_state: dict | None = None,
                            lookahead: str | None = None, batched=nullcontext) -> StepComparison:
    """The per-step advantages of GRPO, ppo and dense_grpo on `group` beside `credit` (measured on it). `batched()`:
    the context the look-ahead's batched passes run in (the app's `Workbench.batched_threads`: every core)."""
    rewards = credit.rewards.float()  # (G,)
    g, t = group.group_size, group.num_steps
    trained = group.config.sde_mask()  # (T,)
    uniform = torch.where(trained[None], credit.advantages.float()[:, None].expand(g, t), torch.zeros(g, t))
    ppo, ppo_source = critic_advantages(policy, group, rewards, config, critic_state)
    look = LookaheadCredit(replace(config, lookahead=lookahead or config.lookahead), policy, reward_fn)
    with batched():
        values, nfe = look.values(group, rewards)
    dense = torch.where(trained[None], lookahead_advantages(values), torch.zeros(g, t))
    names = [UNIFORM, "ppo", "dense_grpo"]
    maps = torch.stack([uniform, ppo, dense])  # (M, G, T)
    valid = credit.step_valid  # (G, T)
    determined = credit.step_classes() != 0
    ref = credit.step_credit
    return StepComparison(names, maps, ref, valid, determined,
                          {n: agreement(m, ref, valid, determined) for n, m in zip(names, maps)},
                          {UNIFORM: "GRPO advantages of the group's rewards", "ppo": ppo_source,
                           "dense_grpo": f"{look.config.lookahead} look-ahead ({nfe} transformer evaluations)"})


def per_step_advantages(policy: FlowPolicy, group: TrajectoryGroup, rewards: torch.Tensor, names: list[str],
                        reward_fn, config: TrainConfig | None = None, batched=nullcontext) -> dict[str, torch.Tensor]:
    """{objective: (G, T)} per-step advantages of the objectives among `names` whose registration names a
    `step_credit`: ppo's GAE over a critic fitted on this group, dense_grpo's look-ahead gains (0 off the trained
    steps). The explainer uses these in place of the paired (G,) advantages. `batched()`: the context the
    look-ahead's batched passes run in, as in `compare_step_advantages`."""
    from workbench.rl.objectives import OBJECTIVES

    config = config or TrainConfig()
    trained = group.config.sde_mask()[None]  # (1, T)
    out = {}
    for name in names:
        kind = OBJECTIVES.info(name).step_credit if OBJECTIVES.info(name) is not None else None
        if kind == "critic":
            out[name] = critic_advantages(policy, group, rewards.float(), config)[0]
        elif kind == "lookahead":
            with batched():
                values, _ = LookaheadCredit(config, policy, reward_fn).values(group, rewards.float())
            out[name] = torch.where(trained, lookahead_advantages(values), torch.zeros(()))
    return out
