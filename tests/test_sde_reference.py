"""Reference values for every SDE kind with noise (docs/methods.md "SDE step").

Two references that do not come from workbench/flow/sde.py itself:

1. Exact moments. For a point mass at x0 the exact velocity is v = (x_t - x0) / t (convention
   x_t = (1 - t) x0 + t eps, v = eps - x0), so one step is affine in (x0, eps, z):
       x_next = (1 - t_next) x0 + c eps + s z,   z ~ N(0, I),
   with c and s derived by hand below for each kind. Over eps and z, x_next - (1 - t_next) x0 has mean 0 and
   variance c^2 + s^2, which a marginal-preserving sampler makes t_next^2 (CPS exactly; the SDEs to first order
   in dt, the second-order miss also derived by hand).
2. The released code: each released step is re-implemented in a few lines of plain torch here, and the
   workbench step must give the same mean, std, sample and log-prob on fixed random inputs.
"""

import math

import pytest
import torch

from workbench.flow.schedule import sd3_sigmas
from workbench.flow.sde import sde_step_with_logprob

NOISY_KINDS = ("flow_grpo", "dance_grpo", "cps")
LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))


def _hand_coefficients(kind: str, t: float, t_next: float, a: float) -> tuple[float, float]:
    """(c, s) of x_next = (1 - t_next) x0 + c eps + s z for the exact point-mass velocity, derived by hand.

    flow_grpo: sigma_t^2 = a^2 t / (1 - t); mean = x (1 + sigma_t^2 dt / 2t) + v (1 + sigma_t^2 (1 - t) / 2t) dt.
      Substituting x = (1 - t) x0 + t eps, v = eps - x0: the x0 terms sum to (1 - t - dt) x0 = (1 - t_next) x0,
      the eps terms to (t + sigma_t^2 dt / 2 + dt + sigma_t^2 (1 - t) dt / 2t) = t_next + sigma_t^2 dt / 2t.
      s = sigma_t sqrt(-dt).
    dance_grpo: mean = x + dt (v + a^2 / 2 (x - (1 - t) x0_hat) / t^2), x0_hat = x - t v = x0, so
      x - (1 - t) x0 = t eps and c = t + dt + a^2 dt / 2t = t_next + a^2 dt / 2t; s = a sqrt(-dt).
    cps: s = t_next sin(a pi / 2); mean = (1 - t_next) x0_hat + sqrt(t_next^2 - s^2) x1_hat with x0_hat = x0 and
      x1_hat = x + (1 - t) v = eps, so c = sqrt(t_next^2 - s^2).
    """
    dt = t_next - t
    if kind == "flow_grpo":
        s2 = a**2 * t / (1 - t)
        return t_next + s2 * dt / (2 * t), math.sqrt(s2 * -dt)
    if kind == "dance_grpo":
        return t_next + a**2 * dt / (2 * t), a * math.sqrt(-dt)
    s = t_next * math.sin(a * math.pi / 2)
    return math.sqrt(t_next**2 - s**2), s


def _point_mass(t: float, n: int = 20000, seed: int = 0):
    """x0 (1, 1, 1, n) fixed, eps and z standard normal, x_t on the path and its exact velocity."""
    g = torch.Generator().manual_seed(seed)
    x0 = torch.linspace(-1.0, 1.0, n).view(1, 1, 1, n)
    eps, z = torch.randn(1, 1, 1, n, generator=g), torch.randn(1, 1, 1, n, generator=g)
    x = (1 - t) * x0 + t * eps
    return x0, eps, z, x, (x - x0) / t


@pytest.mark.parametrize("kind", NOISY_KINDS)
@pytest.mark.parametrize("t,t_next,a", [(0.8, 0.7, 0.7), (0.5, 0.3, 0.9), (0.3, 0.25, 0.5)])
def test_point_mass_step_has_the_hand_derived_moments(kind, t, t_next, a):
    x0, eps, z, x, v = _point_mass(t)
    c, s = _hand_coefficients(kind, t, t_next, a)
    out = sde_step_with_logprob(x, v, torch.tensor([t]), torch.tensor([t_next]), a, kind, noise=z)
    # conditional on eps: the step's own mean and std are the affine map above
    assert torch.allclose(out.mean, (1 - t_next) * x0 + c * eps, atol=1e-5)
    assert out.std.item() == pytest.approx(s, rel=1e-5)
    assert torch.allclose(out.x0_pred, x0, atol=1e-5)  # x_t - t v is x0 itself for the exact velocity
    # over eps and z: residual r = x_next - (1 - t_next) x0 ~ N(0, c^2 + s^2); n draws, 5 standard errors
    r = (out.x_next - (1 - t_next) * x0).flatten().double()
    n, var = r.numel(), c**2 + s**2
    assert abs(r.mean().item()) < 5 * math.sqrt(var / n)
    assert abs(r.var().item() - var) < 5 * var * math.sqrt(2 / (n - 1))


@pytest.mark.parametrize("kind", NOISY_KINDS)
@pytest.mark.parametrize("t,a", [(0.5, 0.7), (0.8, 0.9)])
def test_point_mass_step_preserves_the_marginal(kind, t, a):
    """Var(x_next | x0) vs the path's t_next^2, from the step's own mean and std (least-squares c)."""
    for dt in (-0.02, -0.01):
        t_next = t + dt
        x0, eps, _, x, v = _point_mass(t, n=1000)
        out = sde_step_with_logprob(x, v, torch.tensor([t]), torch.tensor([t_next]), a, kind)
        resid = (out.mean - (1 - t_next) * x0).flatten().double()
        e = eps.flatten().double()
        c = float((resid * e).sum() / (e * e).sum())
        assert torch.allclose(resid, c * e, atol=1e-5)  # affine in eps, nothing else
        miss = c**2 + out.std.item() ** 2 - t_next**2
        if kind == "cps":  # exact by construction
            assert miss == pytest.approx(0.0, abs=1e-6)
        else:
            # first-order terms cancel: 2 t_next s2 dt / 2t - s2 dt = s2 dt (t_next - t) / t = s2 dt^2 / t, plus
            # (s2 dt / 2t)^2; s2 = sigma_t^2 (flow_grpo) or a^2 (dance_grpo)
            s2 = a**2 * t / (1 - t) if kind == "flow_grpo" else a**2
            assert miss == pytest.approx(dt**2 * (s2 / t + s2**2 / (4 * t**2)), rel=1e-3, abs=1e-7)


# --- the released code, re-implemented in plain torch -------------------------------------------------------


def _released_flow_grpo(x, v, sigma, sigma_prev, sigma_max, noise_level, z, sde_type):
    """yifan123/flow_grpo @ 54809b5, flow_grpo/diffusers_patch/sd3_sde_with_logprob.py, sde_step_with_logprob:
    the 'sde' branch (lines 49-68) and the 'cps' branch (lines 70-86). Returns (prev_sample, log_prob, mean,
    std_dev_t); sigma, sigma_prev (B, 1, 1, 1)."""
    dt = sigma_prev - sigma
    if sde_type == "sde":
        std_dev_t = torch.sqrt(sigma / (1 - torch.where(sigma == 1, sigma_max, sigma))) * noise_level
        mean = x * (1 + std_dev_t**2 / (2 * sigma) * dt) + v * (1 + std_dev_t**2 * (1 - sigma) / (2 * sigma)) * dt
        prev = mean + std_dev_t * torch.sqrt(-1 * dt) * z
        log_prob = (-((prev - mean) ** 2) / (2 * ((std_dev_t * torch.sqrt(-1 * dt)) ** 2))
                    - torch.log(std_dev_t * torch.sqrt(-1 * dt)) - torch.log(torch.sqrt(2 * torch.as_tensor(math.pi))))
    else:
        std_dev_t = sigma_prev * math.sin(noise_level * math.pi / 2)
        pred_original_sample = x - sigma * v
        noise_estimate = x + v * (1 - sigma)
        mean = pred_original_sample * (1 - sigma_prev) + noise_estimate * torch.sqrt(sigma_prev**2 - std_dev_t**2)
        prev = mean + std_dev_t * z
        log_prob = -((prev - mean) ** 2)  # "remove all constants"
    return prev, log_prob.mean(dim=(1, 2, 3)), mean, std_dev_t


def _released_dance_grpo(latents, model_output, eta, sigma, sigma_next, z):
    """XueZeyue/DanceGRPO @ 15cc71d, fastvideo/train_grpo_flux.py, flux_step (lines 131-168) with grpo and
    sde_solver True; sigma, sigma_next are floats (sigmas[index], sigmas[index + 1])."""
    dsigma = sigma_next - sigma
    prev_sample_mean = latents + dsigma * model_output
    pred_original_sample = latents - sigma * model_output
    std_dev_t = eta * math.sqrt(sigma - sigma_next)
    score_estimate = -(latents - pred_original_sample * (1 - sigma)) / sigma**2
    log_term = -0.5 * eta**2 * score_estimate
    prev_sample_mean = prev_sample_mean + log_term * dsigma
    prev = prev_sample_mean + z * std_dev_t
    log_prob = (-((prev - prev_sample_mean) ** 2) / (2 * std_dev_t**2) - math.log(std_dev_t)
                - torch.log(torch.sqrt(2 * torch.as_tensor(math.pi))))
    return prev, log_prob.mean(dim=(1, 2, 3)), prev_sample_mean, std_dev_t


def _fixed_inputs(b=3, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, 2, 4, 4, generator=g) for _ in range(3)]  # x, v, z


@pytest.mark.parametrize("sde_type,kind", [("sde", "flow_grpo"), ("cps", "cps")])
def test_flow_grpo_step_matches_the_released_code(sde_type, kind):
    x, v, z = _fixed_inputs()
    sigmas = sd3_sigmas(8, 3.0)
    for i in range(7):  # the last cps step has std 0 (deterministic, no log-prob to compare)
        s, s_next = sigmas[i].expand(3), sigmas[i + 1].expand(3)
        prev, lp, mean, std_dev_t = _released_flow_grpo(x, v, s.view(-1, 1, 1, 1), s_next.view(-1, 1, 1, 1),
                                                        sigmas[1].item(), 0.7, z, sde_type)
        out = sde_step_with_logprob(x, v, s, s_next, 0.7, kind, noise=z, sigma_max=sigmas[1].expand(3))
        assert torch.allclose(out.mean, mean, atol=1e-6), (kind, i)
        assert torch.allclose(out.x_next, prev, atol=1e-6), (kind, i)
        assert torch.allclose(out.noise_scale, std_dev_t.reshape(-1).expand(3)), (kind, i)
        step_std = std_dev_t * torch.sqrt(s - s_next).view(-1, 1, 1, 1) if sde_type == "sde" else std_dev_t
        assert torch.allclose(out.std, step_std.reshape(-1).expand(3)), (kind, i)
        if sde_type == "sde":
            assert torch.allclose(out.log_prob, lp, atol=1e-5), (kind, i)
        else:  # the released CPS log-prob drops 1 / (2 std^2) and the constants; ours is the full density
            full = lp / (2 * out.std**2) - torch.log(out.std) - LOG_SQRT_2PI
            assert torch.allclose(out.log_prob, full, atol=1e-5), (kind, i)


def test_dance_grpo_step_matches_the_released_code():
    x, v, z = _fixed_inputs()
    sigmas = sd3_sigmas(8, 3.0)
    for eta in (0.3, 1.0):
        for i in range(8):
            s, s_next = sigmas[i].item(), sigmas[i + 1].item()
            # the released formula in float64: in float32 its last step adds a score of order 1 / t^2 (t = 0.009)
            # times dt and loses ~1e-5 to cancellation; the workbench's coefficients (x_coef, v_coef) do not
            prev, lp, mean, std_dev_t = _released_dance_grpo(x.double(), v.double(), eta, s, s_next, z.double())
            out = sde_step_with_logprob(x, v, sigmas[i].expand(3), sigmas[i + 1].expand(3), eta, "dance_grpo",
                                        noise=z)
            assert torch.allclose(out.mean.double(), mean, atol=1e-6), (eta, i)
            assert torch.allclose(out.x_next.double(), prev, atol=1e-6), (eta, i)
            assert torch.allclose(out.std, torch.full((3,), std_dev_t)), (eta, i)
            assert torch.allclose(out.log_prob.double(), lp, atol=1e-6), (eta, i)
