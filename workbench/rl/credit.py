"""Monte-Carlo step credit: measure advantage misattribution (METHODS.md section 5).

Step GRPO gives every step of trajectory i the same advantage A_i. What a step actually contributed is
measured here from the value of the states around it:

    V(x_t^i)  = mean reward of K continuations sampled from x_t^i with the same policy
    V(x_T)    = the group mean reward (all trajectories start from the same noise),  V(x_0^i) = r_i
    d_{i,t}   = V(x_{t+1}^i) - V(x_t^i)      (state index t = 0 is noise; step t goes t -> t + 1)

The credits of a trajectory telescope to r_i - V(x_T), so they decompose its raw advantage exactly up
to Monte-Carlo noise. A step is misattributed when its credit has the opposite sign of A_i; a chunk is
misattributed when the sum of its step credits has. Standard errors come from a bootstrap over the K
continuations of every state, so they shrink as K grows.

`Credit` keeps the raw continuation rewards, so `rechunk` recomputes chunk credits, rates and their
errors for a new schedule without sampling (milliseconds).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from workbench.core.errors import WorkbenchError
from workbench.flow.policy import FlowPolicy
from workbench.flow.trajectory import TrajectoryGroup
from workbench.rl.chunking import chunk_sum, parse_chunk_spec

BOOTSTRAP = 200  # bootstrap replicates for the standard errors


@dataclass
class Credit:
    """Step and chunk credit of one group. G trajectories, T steps, K continuations per state."""

    prompt: str
    rewards: torch.Tensor  # (G,) r_i of the final images
    advantages: torch.Tensor  # (G,) A_i the objective would use (only its sign matters here)
    branch_rewards: torch.Tensor  # (G, T - 1, K) rewards of the continuations from states 1..T-1
    sizes: list[int]  # chunk sizes over the T steps
    seed: int = 0  # bootstrap seed

    @property
    def num_steps(self) -> int:
        return self.branch_rewards.shape[1] + 1

    @property
    def values(self) -> torch.Tensor:
        """(G, T + 1) state values V(x_t^i): group mean, continuation means, final rewards."""
        return _values(self.rewards, self.branch_rewards.mean(-1))

    @property
    def step_credit(self) -> torch.Tensor:
        """(G, T) d_{i,t} = V(x_{t+1}^i) - V(x_t^i)."""
        return self.values.diff(dim=1)

    @property
    def chunk_credit(self) -> torch.Tensor:
        """(G, K) sum of the step credits inside each chunk."""
        return chunk_sum(self.step_credit, self.sizes)

    def rechunk(self, spec) -> Credit:
        """The same measurement under another chunk schedule ("2,3,4,7" or a list of sizes)."""
        return replace(self, sizes=parse_chunk_spec(spec, self.num_steps))

    def misattribution(self) -> dict[str, float]:
        """Step and chunk misattribution rates with their bootstrap standard errors."""
        step, chunk = _rates(self.rewards, self.branch_rewards, self.advantages, self.sizes)  # scalars
        boot_step, boot_chunk = _rates(self.rewards, self._bootstrap_branches(), self.advantages, self.sizes)
        return {"step_misattribution": float(step), "step_misattribution_se": float(boot_step.std()),
                "chunk_misattribution": float(chunk), "chunk_misattribution_se": float(boot_chunk.std())}

    def misattributed_steps(self) -> torch.Tensor:
        """(G, T) bool: cells whose credit sign is opposite to the advantage sign."""
        return self.step_credit * self.advantages[:, None] < 0

    def _bootstrap_branches(self) -> torch.Tensor:
        """(R, G, T - 1, K) continuation rewards resampled with replacement within each state."""
        gen = torch.Generator().manual_seed(self.seed)
        k = self.branch_rewards.shape[-1]
        idx = torch.randint(k, (BOOTSTRAP, *self.branch_rewards.shape), generator=gen)  # (R, G, T-1, K)
        return torch.gather(self.branch_rewards.expand(BOOTSTRAP, *self.branch_rewards.shape), -1, idx)

    def summary(self) -> dict:
        """JSON-ready numbers: advantage (G), credit (G x T), chunk_credit (G x K), rates and errors."""
        return {"prompt": self.prompt, "chunks": self.sizes, "rewards": self.rewards.tolist(),
                "advantage": self.advantages.tolist(), "values": self.values.tolist(),
                "credit": self.step_credit.tolist(), "chunk_credit": self.chunk_credit.tolist(),
                **self.misattribution()}


def _values(rewards: torch.Tensor, branch_means: torch.Tensor) -> torch.Tensor:
    """rewards (G,), branch means (..., G, T - 1) -> values (..., G, T + 1)."""
    start = rewards.mean().expand(*branch_means.shape[:-1], 1)  # (..., G, 1)
    end = rewards.expand(*branch_means.shape[:-1])[..., None]  # (..., G, 1)
    return torch.cat([start, branch_means, end], dim=-1)


def _rates(rewards, branches, advantages, sizes) -> tuple[torch.Tensor, torch.Tensor]:
    """Misattribution rates for branches (..., G, T - 1, K); cells with A_i = 0 are left out."""
    credit = _values(rewards, branches.mean(-1)).diff(dim=-1)  # (..., G, T)
    sign = advantages.sign()[:, None]  # (G, 1)
    valid = (sign != 0).float()  # (G, 1)
    denom = valid.sum().clamp_min(1)
    step = ((credit * sign < 0).float() * valid).sum((-2, -1)) / (denom * credit.shape[-1])
    chunks = chunk_sum(credit, sizes)  # (..., G, K)
    chunk = ((chunks * sign < 0).float() * valid).sum((-2, -1)) / (denom * chunks.shape[-1])
    return step, chunk


@torch.no_grad()
def continuation_rewards(policy: FlowPolicy, group: TrajectoryGroup, reward_fn, branches: int = 4,
                         seed: int = 0, progress=None, max_rows: int = 256) -> torch.Tensor:
    """Rewards (G, T - 1, K) of K continuations from every intermediate state x_1 .. x_{T-1}.

    All continuations run in one loop over steps: the rows that start at state s join the batch at step
    s, so each step is one forward pass over every active row (G * K * s rows at step s), in slices of
    at most `max_rows` rows to bound memory.
    """
    from workbench.flow.sampler import transition

    g, t_steps, cfg = group.group_size, group.num_steps, group.config
    sigmas = group.sigmas.to(policy.device)
    cond = policy.encode([group.prompt], cfg=cfg.guidance_scale != 1.0)
    gen = torch.Generator().manual_seed(seed)
    x = torch.empty(0, *group.states.shape[2:], device=policy.device)  # active rows (R, C, H, W)
    for s in range(1, t_steps):
        start = group.states[:, s].repeat_interleave(branches, dim=0).to(policy.device)  # (G * K, C, H, W)
        x = torch.cat([x, start])
        noise = torch.randn(x.shape, generator=gen).to(policy.device)
        x = torch.cat([transition(policy, xb, sigmas, s, cond.repeat(xb.shape[0]), cfg, noise=nb).x_next
                       for xb, nb in zip(x.split(max_rows), noise.split(max_rows))])  # bounded memory
        if progress is not None:
            progress(s, t_steps - 1)
    # rows were appended start by start: row block j (size G * K) started at state j + 1; R = (T - 1) G K
    rewards = torch.cat([torch.as_tensor(reward_fn(policy.decode(xb), [group.prompt] * xb.shape[0]),
                                         dtype=torch.float32).cpu() for xb in x.split(max_rows)])  # (R,)
    return rewards.view(t_steps - 1, g, branches).permute(1, 0, 2).contiguous()  # (G, T - 1, K)


def measure_credit(policy: FlowPolicy, group: TrajectoryGroup, reward_fn, branches: int = 4,
                   chunks="2,3,4,7", advantage: str = "grpo", seed: int = 0, progress=None) -> Credit:
    """Monte-Carlo credit of a sampled group under `reward_fn` (a RewardFunction or any rewards callable)."""
    from workbench.rl.advantages import ADVANTAGES

    if branches < 1:
        raise WorkbenchError(f"branches (K) must be a positive integer, got {branches}")
    if group.num_steps < 2:
        raise WorkbenchError("credit needs at least 2 steps: there is no intermediate state to branch from")
    sizes = parse_chunk_spec(chunks, group.num_steps)
    rewards = torch.as_tensor(reward_fn(group.images, [group.prompt] * group.group_size), dtype=torch.float32).cpu()
    advantages = ADVANTAGES.get(advantage)(rewards[None]).values[0]  # (G,)
    branch = continuation_rewards(policy, group, reward_fn, branches, seed, progress)
    return Credit(group.prompt, rewards, advantages, branch, sizes, seed)
