"""Per-step advantages: GAE over a learned critic (PPO) and the gains of a look-ahead reward (dense GRPO).

docs/methods.md "Per-step advantages". The denoising MDP of one trajectory has T transitions x_t -> x_{t+1}
(state 0 is noise, state T the image) and one reward, r_i of the image, at the end (DPOK, arXiv 2305.16381):

    delta_{i,t} = r_{i,t} + gamma V(x_{t+1}^i) - V(x_t^i),   r_{i,t} = r_i if t = T - 1 else 0,  V(x_T) = 0
    A_{i,t}     = sum_k (gamma lambda)^k delta_{i,t+k}                     (GAE, arXiv 1506.02438)
    R_{i,t}     = A_{i,t} + V(x_t^i)                                       (the critic's regression target)

Dense look-ahead credit (TP-GRPO, arXiv 2602.06422): with R_t the reward of a look-ahead from state t (the
ODE completion, or the x0 prediction for Stepwise-Flow-GRPO, arXiv 2603.28718) and R_T = r_i,

    d_{i,t} = R_{t+1}^i - R_t^i,     A_{i,t} = (d_{i,t} - mean_G d_t) / (std_G d_t + eps)  (per step, in the group)

    adv, ret = gae(final_rewards(r, T), values, gamma=1.0, lam=0.95)   # (B, T) each
"""

from __future__ import annotations

import math

import torch

from workbench.core.errors import WorkbenchError

EPS = 1e-4  # std offset of the per-step group normalisation (Flow-GRPO's advantage eps)
CLIP = 5.0  # per-step advantages are clipped to +-5 like the trajectory ones (Flow-GRPO, GCPO)


def final_rewards(rewards: torch.Tensor, steps: int) -> torch.Tensor:
    """(B, T) per-step rewards of trajectories rewarded only at the end: r_i on the last step, 0 before."""
    out = torch.zeros(rewards.shape[0], steps, dtype=rewards.dtype, device=rewards.device)
    out[:, -1] = rewards
    return out


def gae(rewards: torch.Tensor, values: torch.Tensor, gamma: float, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages (B, T), returns (B, T)) of per-step rewards (B, T) and state values (B, T + 1).

    values[:, T] is the value after the last step (0 for a terminal image). The backward recursion
    A_t = delta_t + gamma lam A_{t+1} is written as one matrix product: A = delta @ M with
    M[k, t] = (gamma lam)^(k - t) for k >= t.
    """
    if rewards.dim() != 2 or values.shape != (rewards.shape[0], rewards.shape[1] + 1):
        raise WorkbenchError(f"need rewards (B, T) and values (B, T + 1), got {tuple(rewards.shape)} and "
                             f"{tuple(values.shape)}")
    if not (0 <= gamma <= 1 and 0 <= lam <= 1):
        raise WorkbenchError(f"gamma and lambda must be in [0, 1], got gamma={gamma}, lambda={lam}")
    t = rewards.shape[1]
    delta = rewards + gamma * values[:, 1:] - values[:, :-1]  # (B, T)
    k = torch.arange(t, device=rewards.device)
    gap = (k[:, None] - k[None, :]).to(rewards.dtype)  # (T, T) k - t
    base = torch.full_like(gap, gamma * lam)
    decay = torch.where(gap >= 0, base ** gap.clamp_min(0), torch.zeros_like(gap))  # (T, T); 0^0 = 1 on the diagonal
    adv = delta @ decay  # (B, T)
    return adv, adv + values[:, :-1]


def normalise(adv: torch.Tensor, mask: torch.Tensor | None = None, eps: float = 1e-8) -> torch.Tensor:
    """(B, T) advantages with mean 0 and std 1 over the masked cells (CleanRL's norm_adv), clipped to +-CLIP."""
    cells = adv[mask] if mask is not None else adv.flatten()
    if cells.numel() < 2:
        return torch.zeros_like(adv)
    return ((adv - cells.mean()) / (cells.std(unbiased=False) + eps)).clamp(-CLIP, CLIP)


def lookahead_advantages(values: torch.Tensor, eps: float = EPS, tol: float = 1e-6) -> torch.Tensor:
    """(G, T) TP-GRPO advantages of one group from look-ahead values (G, T + 1), R_0 .. R_{T-1} and r_i.

    d = R_{t+1} - R_t, normalised per step across the group; a step whose gains are equal across the group
    (std < tol) gets 0, as a zero-variance group does in GRPO.
    """
    if values.dim() != 2 or values.shape[1] < 2:
        raise WorkbenchError(f"look-ahead values must be (G, T + 1) with T >= 1, got {tuple(values.shape)}")
    d = values.diff(dim=1)  # (G, T)
    std = d.std(dim=0, unbiased=False)  # (T,)
    adv = (d - d.mean(dim=0)) / (std + eps)  # (G, T)
    return torch.where(std >= tol, adv, torch.zeros_like(adv)).clamp(-CLIP, CLIP)  # std < tol: 0


def explained_variance(predicted: torch.Tensor, target: torch.Tensor) -> float:
    """1 - Var(target - predicted) / Var(target) (CleanRL's explained_var); NaN when the target is constant."""
    var = target.double().var(unbiased=False)
    if float(var) == 0:
        return math.nan
    return float(1 - (target.double() - predicted.double()).var(unbiased=False) / var)
