"""The critic V_phi(x_t, sigma_t, text) of ppo (rl/critic.py, docs/methods.md "Per-step advantages"): its size and
architecture as documented, the sigma embedding and prompt features by hand, the size checks in full, slicing in
`predict` and the mean loss and checks of `fit`. That it learns a known value function: test_step_advantages.py."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from workbench.core.errors import WorkbenchError
from workbench.flow.policy import Conditioning
from workbench.rl.critic import ValueNet, fit, parameter_count, predict, prompt_features, sigma_embedding


def states(n: int, channels: int = 3, text_dim: int = 4, seed: int = 0) -> tuple:
    """n random states: x (n, C, 32, 32), sigma (n,) in [0, 1], text (n, D)."""
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(n, channels, 32, 32, generator=gen), torch.rand(n, generator=gen),
            torch.randn(n, text_dim, generator=gen))


def test_sigma_embedding_by_hand():
    """dim 4: half = 2 frequencies 10000^(-k/2) = 1 and 0.01, angles 1000 sigma f, then [sin, sin, cos, cos].
    sigma 0 -> (0, 0, 1, 1); sigma 0.001 -> angles (1, 0.01); sigma 1 -> angles (1000, 10)."""
    emb = sigma_embedding(torch.tensor([0.0, 0.001, 1.0]), 4)
    expected = torch.tensor([[0.0, 0.0, 1.0, 1.0],
                             [math.sin(1), math.sin(0.01), math.cos(1), math.cos(0.01)],
                             [math.sin(1000), math.sin(10), math.cos(1000), math.cos(10)]])
    assert emb.dtype == torch.float32
    assert torch.allclose(emb, expected, atol=1e-5)


def test_sigma_embedding_of_an_odd_dim_ends_with_a_zero_column():
    """dim 5 has the same two frequencies as dim 4 (half = 2) and one zero column, so it is (B, 5) as the critic's
    time projection expects (it was (B, 4), and ValueNet(time_dim=5) failed in its first forward)."""
    sigma = torch.tensor([0.001, 1.0])
    emb = sigma_embedding(sigma, 5)
    assert emb.shape == (2, 5)
    assert torch.equal(emb[:, :4], sigma_embedding(sigma, 4)) and emb[:, 4].tolist() == [0.0, 0.0]
    critic = ValueNet(channels=3, text_dim=4, time_dim=5)
    assert critic(*states(2)).shape == (2,)


def test_sigma_embedding_is_float32_whatever_the_default_dtype():
    """The critic computes in float32 (it casts x and the text too); a float64 default dtype, as a notebook or a
    model builder may set (random_pipelines builds under another default), changes nothing."""
    sigma = torch.tensor([0.001, 0.3, 1.0])
    expected = sigma_embedding(sigma, 8)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        emb = sigma_embedding(sigma, 8)
    finally:
        torch.set_default_dtype(old)
    assert emb.dtype == torch.float32 and torch.equal(emb, expected)


def test_prompt_features_take_the_pooled_embedding_else_the_mean_token():
    """(B, D) features: the pooled embedding where the encoder gives one, else the mean over the L tokens; float32
    and detached either way (the critic's regression must not reach the text encoder)."""
    embeds = torch.arange(24, dtype=torch.float64).reshape(2, 3, 4).requires_grad_()  # (B, L, D) = (2, 3, 4)
    mean = prompt_features(Conditioning(embeds, None))
    assert mean.shape == (2, 4) and mean.dtype == torch.float32 and not mean.requires_grad
    assert mean.tolist() == [[4.0, 5.0, 6.0, 7.0], [16.0, 17.0, 18.0, 19.0]]  # token rows 0, 4, 8 (+ column)
    pooled = torch.tensor([[1.0, -1.0], [0.5, 2.0]], dtype=torch.float64, requires_grad=True)  # (B, P)
    feats = prompt_features(Conditioning(embeds, pooled))
    assert feats.dtype == torch.float32 and not feats.requires_grad
    assert feats.tolist() == [[1.0, -1.0], [0.5, 2.0]]


def test_value_net_size_by_hand():
    """The embedded model's critic (3 latent channels, 64-d text, width 32, hidden 64, time_dim 32): 67 thousand
    parameters (docs/methods.md), counted layer by layer, weights + biases."""
    convs = (3 * 32 * 9 + 32) + (32 * 64 * 9 + 64) + (64 * 64 * 9 + 64)  # 3x3 kernels: 896 + 18,496 + 36,928
    projections = (32 * 64 + 64) + (64 * 64 + 64)  # time (32 -> 64), text (64 -> 64)
    head = (64 * 64 + 64) + (64 + 1)  # MLP: 64 -> 64 -> 1
    assert convs + projections + head == 66_817
    assert parameter_count(ValueNet(channels=3, text_dim=64)) == 66_817


def test_value_net_downsamples_the_latent_by_8_before_pooling():
    """Three stride-2 convolutions: a 32 x 32 latent becomes 4 x 4 (16, 8, 4) of 2 x width channels, then its mean."""
    critic = ValueNet(channels=3, text_dim=4, width=8)
    x = states(2)[0]
    assert critic.latent[:6](x).shape == (2, 16, 4, 4)
    assert critic.latent(x).shape == (2, 16)


def test_value_net_computes_the_documented_function():
    """V = MLP(SiLU(pool(f(x)) + W_t emb(sigma) + W_p text)), f three SiLU(conv 3x3, stride 2, padding 1) and the MLP
    Linear, SiLU, Linear: written out with torch.nn.functional on the critic's own weights."""
    torch.manual_seed(0)
    critic = ValueNet(channels=3, text_dim=4, width=8)
    x, sigma, text = states(3)
    convs = [m for m in critic.latent if isinstance(m, nn.Conv2d)]
    first, last = [m for m in critic.head if isinstance(m, nn.Linear)]
    h = x
    for conv in convs:
        h = F.silu(F.conv2d(h, conv.weight, conv.bias, stride=2, padding=1))
    h = h.mean(dim=(2, 3)) + critic.time(sigma_embedding(sigma, 32)) + critic.text(text)  # (B, 16)
    expected = last(F.silu(first(F.silu(h)))).squeeze(1)  # (B,)
    assert len(convs) == 3
    assert torch.allclose(critic(x, sigma, text), expected, atol=1e-5)


def test_value_net_keeps_its_convolutions_channels_last():
    """The latent convolutions hold their weights channels-last (oneDNN takes NHWC without reordering, the CPU
    speed-up measured in rl/critic.py) and keep that layout when a saved state is loaded."""
    critic = ValueNet(channels=3, text_dim=4)
    saved = {k: v.contiguous() for k, v in ValueNet(channels=3, text_dim=4).state_dict().items()}
    critic.load_state_dict(saved)
    for conv in (m for m in critic.latent if isinstance(m, nn.Conv2d)):
        assert conv.weight.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("sizes", [dict(channels=0), dict(text_dim=0), dict(width=0), dict(time_dim=1)])
def test_value_net_refuses_a_size_below_its_minimum_in_full(sizes):
    args = {"channels": 3, "text_dim": 4, "width": 32, "time_dim": 32, **sizes}
    message = ("ValueNet needs channels, text_dim and width >= 1 and time_dim >= 2, got channels={channels}, "
               "text_dim={text_dim}, width={width}, time_dim={time_dim}").format(**args)
    with pytest.raises(WorkbenchError) as err:
        ValueNet(**args)
    assert str(err.value) == message


def test_value_net_accepts_its_smallest_sizes():
    critic = ValueNet(channels=1, text_dim=1, width=1, time_dim=2)
    assert critic(*states(2, channels=1, text_dim=1)).shape == (2,)


def test_predict_slices_give_every_states_value():
    """5 states in slices of 2 (2, 2, 1): the values of one pass over all 5, in order."""
    critic = ValueNet(channels=3, text_dim=4, width=8)
    x, sigma, text = states(5)
    with torch.no_grad():
        whole = critic(x, sigma, text)
    assert torch.allclose(predict(critic, x, sigma, text, batch=2), whole, atol=1e-6)


def test_fit_returns_the_mean_minibatch_loss():
    """With a learning rate of 0 the critic does not move: 2 passes over 4 states in minibatches of 2 have the mean
    loss of the critic's MSE on the targets (equal-sized minibatches), not their sum or count."""
    critic = ValueNet(channels=3, text_dim=4, width=8)
    x, sigma, text = states(4)
    target = torch.tensor([1.0, -1.0, 0.5, 2.0])
    with torch.no_grad():
        mse = float((critic(x, sigma, text) - target).pow(2).mean())
    loss = fit(critic, torch.optim.SGD(critic.parameters(), lr=0.0), x, sigma, text, target, epochs=2, batch=2,
               generator=torch.Generator().manual_seed(0))
    assert loss == pytest.approx(mse, rel=1e-5)


def test_fit_accepts_one_pass_of_single_states():
    critic = ValueNet(channels=3, text_dim=4, width=8)
    x, sigma, text = states(2)
    loss = fit(critic, torch.optim.SGD(critic.parameters(), lr=0.0), x, sigma, text, torch.zeros(2), epochs=1,
               batch=1, generator=torch.Generator().manual_seed(0))
    assert math.isfinite(loss) and not critic.training


@pytest.mark.parametrize("epochs,batch", [(0, 4), (1, 0)])
def test_fit_refuses_no_pass_or_an_empty_minibatch_in_full(epochs, batch):
    critic = ValueNet(channels=3, text_dim=4, width=8)
    with pytest.raises(WorkbenchError) as err:
        fit(critic, torch.optim.SGD(critic.parameters(), lr=0.0), *states(2), torch.zeros(2), epochs=epochs,
            batch=batch, generator=torch.Generator())
    assert str(err.value) == f"critic fitting needs epochs >= 1 and batch >= 1, got {epochs}, {batch}"
