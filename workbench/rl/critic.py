"""A small critic V_phi(x_t, t, prompt) for PPO on the denoising MDP (docs/methods.md "Per-step advantages").

Adapted in design (no code copied) from DPOK's `ValueMulti` (arXiv 2305.16381; google-research/google-research
`dpok/reward_model.py`): there, three 256-wide layers run over the flattened SD latent concatenated with the
768-d text embedding, each layer scaled per timestep by a learned embedding of the step index. Here a
three-layer strided convolution pools the latent (so the size does not grow with the resolution), the
timestep enters as a sinusoidal embedding of the noise level sigma_t (so the critic does not depend on the
number of steps), and the prompt as the policy's pooled text embedding (or its mean token embedding).
Embedded model: 3 x 32 x 32 latents, 64-d text, about 70 thousand parameters.

    critic = ValueNet(channels=3, text_dim=64)
    v = critic(x_t, sigma_t, prompt_features(cond))   # (B,)
"""

from __future__ import annotations

import math

import torch
from torch import nn

from workbench.core.errors import WorkbenchError
from workbench.flow.policy import Conditioning


def prompt_features(cond: Conditioning) -> torch.Tensor:
    """(B, D) text features of encoded prompts: the pooled embedding, else the mean token embedding (detached)."""
    feats = cond.pooled if cond.pooled is not None else cond.embeds.mean(dim=1)
    return feats.detach().float()


def sigma_embedding(sigma: torch.Tensor, dim: int) -> torch.Tensor:
    """(B, dim) sinusoidal embedding of noise levels sigma (B,) in [0, 1] (transformer positional style, x 1000),
    in float32; an odd dim ends with a zero column (as diffusers' `get_timestep_embedding`)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10_000.0) * torch.arange(half, device=sigma.device, dtype=torch.float32) / half)
    angles = 1000.0 * sigma.float()[:, None] * freqs[None]  # (B, half)
    return nn.functional.pad(torch.cat([angles.sin(), angles.cos()], dim=1), (0, dim % 2))  # (B, dim)


class ValueNet(nn.Module):
    """V_phi(x_t, sigma_t, text) -> (B,): latent conv features + timestep and text projections, then an MLP."""

    def __init__(self, channels: int, text_dim: int, width: int = 32, time_dim: int = 32):
        super().__init__()
        if channels < 1 or text_dim < 1 or width < 1 or time_dim < 2:
            raise WorkbenchError(f"ValueNet needs channels, text_dim and width >= 1 and time_dim >= 2, got "
                                 f"channels={channels}, text_dim={text_dim}, width={width}, time_dim={time_dim}")
        hidden = 2 * width
        self.time_dim = time_dim
        self.latent = nn.Sequential(
            nn.Conv2d(channels, width, 3, stride=2, padding=1), nn.SiLU(),
            nn.Conv2d(width, hidden, 3, stride=2, padding=1), nn.SiLU(),
            nn.Conv2d(hidden, hidden, 3, stride=2, padding=1), nn.SiLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten())
        # Channels-last convolutions: oneDNN's kernels take NHWC without reordering every input, weight and gradient
        # (140b72a:scripts/bench_critic.py, a probe since removed; 60 passes over 128 states: 3.1 -> 2.6 s of CPU
        # on one thread, 3.9 -> 2.9 s on two; the same loss to 8 digits). Saved weights load whatever their layout.
        self.latent.to(memory_format=torch.channels_last)
        self.time = nn.Linear(time_dim, hidden)
        self.text = nn.Linear(text_dim, hidden)
        self.head = nn.Sequential(nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor, sigma: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        """x (B, C, H, W), sigma (B,), text (B, D) -> values (B,)."""
        pooled = self.latent(x.float().contiguous(memory_format=torch.channels_last))
        h = pooled + self.time(sigma_embedding(sigma, self.time_dim)) + self.text(text.float())
        return self.head(h).squeeze(1)  # (B,)


def parameter_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def predict(critic: ValueNet, x: torch.Tensor, sigma: torch.Tensor, text: torch.Tensor,
            batch: int = 1024) -> torch.Tensor:
    """Values (N,) of N states, in slices of `batch`."""
    critic.eval()
    return torch.cat([critic(x[s:s + batch], sigma[s:s + batch], text[s:s + batch])
                      for s in range(0, x.shape[0], batch)])


predict = torch.no_grad()(predict)  # not a decorator: mutmut skips decorated functions


def fit(critic: ValueNet, optimizer: torch.optim.Optimizer, x: torch.Tensor, sigma: torch.Tensor,
        text: torch.Tensor, target: torch.Tensor, epochs: int, batch: int, generator: torch.Generator) -> float:
    """Regress V_phi on targets (N,) for `epochs` passes of shuffled minibatches; returns the mean MSE loss."""
    if epochs < 1 or batch < 1:
        raise WorkbenchError(f"critic fitting needs epochs >= 1 and batch >= 1, got {epochs}, {batch}")
    critic.train()
    losses = []
    for _ in range(epochs):
        for idx in torch.randperm(x.shape[0], generator=generator).split(batch):
            idx = idx.to(x.device)
            loss = (critic(x[idx], sigma[idx], text[idx]) - target[idx].float()).pow(2).mean()
            optimizer.zero_grad(set_to_none=True)  # pragma: no mutate (each backward reaches every weight)
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
    critic.eval()
    return sum(losses) / len(losses)
