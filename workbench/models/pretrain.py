"""Pretrain the embedded model from scratch with the rectified-flow loss.

    python -m workbench.models.pretrain                      # the shipped weights (see the README's model card)
    python -m workbench.models.pretrain --steps 50 --out /tmp/m --eval-prompts 16   # a smoke run
    python -m workbench.models.pretrain --evaluate-only       # re-measure the shipped weights

Rectified flow (SD3, arXiv 2403.03206): x_t = (1 - t) x_0 + t eps, the loss regresses v = eps - x_0.
The transformer predicts x_0 and v follows from it, and t ~ logit-normal(0.8, 0.8) favours high noise
(both from JiT, arXiv 2511.13720; see `EmbeddedModel.denoise`). Text encoder and MMDiT train jointly;
the prompt is dropped (replaced by "") 10 % of the time so classifier-free guidance works. Weights are
an exponential moving average. Reproducible from the seed for a given torch build and thread count.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from workbench.core.errors import WorkbenchError
from workbench.flow.sampler import ode_sample
from workbench.models.embedded import DEFAULT_WEIGHTS, EmbeddedConfig, EmbeddedPolicy, build_embedded, save_embedded
from workbench.toyworld.perception import check
from workbench.toyworld.world import Scene, render, split_scenes


@dataclass
class PretrainConfig:
    """Pretraining settings (our own recipe for the embedded model)."""

    steps: int = 3000  # optimizer steps
    batch_size: int = 128  # images per step
    lr: float = 1e-3  # AdamW peak learning rate; linear warm-up then cosine to 10 %
    warmup: int = 200  # warm-up steps
    t_mean: float = 0.8  # noise level t ~ sigmoid(N(t_mean, t_std^2)): JiT (arXiv 2511.13720) samples its
    t_std: float = 0.8  # clean fraction with (-0.8, 0.8), i.e. mostly high noise, where the shape is decided
    ema_decay: float = 0.998  # EMA of the weights that get saved
    variants: int = 8  # jittered renderings per training scene
    prompt_dropout: float = 0.1  # share of "" prompts, for classifier-free guidance
    partial_prompt: float = 0.15  # chance to leave out each of size, position, background
    seed: int = 0
    eval_prompts: int = 200  # held-out prompts for the final quality check
    eval_steps: int = 16  # Euler ODE steps for the quality check
    snapshot_every: int = 0  # also save the EMA weights to <out>/snapshot every N steps (0 = never)

    def __post_init__(self):
        for name in ("steps", "batch_size", "variants", "eval_steps"):
            if getattr(self, name) < 1:
                raise WorkbenchError(f"--{name.replace('_', '-')} must be a positive integer")
        if not 0 <= self.eval_prompts <= 200:
            raise WorkbenchError("--eval-prompts must be between 0 and 200 (the held-out set)")


def make_dataset(scenes: list[Scene], variants: int, rng: np.random.Generator) -> torch.Tensor:
    """Jittered renderings, (len(scenes) * variants, 3, 32, 32) in [-1, 1], scene-major order."""
    images = np.stack([render(s, rng) for s in scenes for _ in range(variants)])
    return torch.from_numpy(images) * 2 - 1


def sample_prompts(scenes: list[Scene], cfg: PretrainConfig, rng: np.random.Generator) -> list[str]:
    """Prompts for a batch: canonical, with optional attributes sometimes left out, sometimes ""."""
    prompts = []
    for s in scenes:
        if rng.random() < cfg.prompt_dropout:
            prompts.append("")
            continue
        drop = {k: None for k in ("size", "position", "background") if rng.random() < cfg.partial_prompt}
        prompts.append(Scene(**(vars(s) | drop)).prompt())
    return prompts


def lr_at(step: int, cfg: PretrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def pretrain(cfg: PretrainConfig, out: Path, log=print) -> dict:
    """Train, evaluate on held-out prompts, save; returns the training record."""
    rng = np.random.default_rng(cfg.seed)
    train_scenes, heldout = split_scenes()
    data = make_dataset(train_scenes, cfg.variants, rng)  # (N, 3, 32, 32)
    model = build_embedded(EmbeddedConfig(), seed=cfg.seed)
    params = list(model.text_encoder.parameters()) + list(model.transformer.parameters())
    ema = copy.deepcopy(model)
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.01)
    gen = torch.Generator().manual_seed(cfg.seed)
    losses, start = [], time.time()
    for step in range(cfg.steps):
        idx = torch.randint(len(data), (cfg.batch_size,), generator=gen)  # (B,)
        x0 = data[idx]  # (B, 3, H, W)
        prompts = sample_prompts([train_scenes[int(i) // cfg.variants] for i in idx], cfg, rng)
        t = torch.sigmoid(cfg.t_mean + cfg.t_std * torch.randn(cfg.batch_size, generator=gen))  # (B,) logit-normal
        eps = torch.randn(x0.shape, generator=gen)
        xt = (1 - t[:, None, None, None]) * x0 + t[:, None, None, None] * eps
        embeds, pooled = model.text_encoder(model.tokenizer(prompts))
        v = model.denoise(xt, t, embeds, pooled)
        loss = ((v - (eps - x0)) ** 2).mean()
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        _ema_update(ema, model, min(cfg.ema_decay, (1 + step) / (10 + step)))
        losses.append(loss.item())
        if step % 100 == 0 or step == cfg.steps - 1:
            log(f"step {step:5d}/{cfg.steps}  loss {np.mean(losses[-100:]):.4f}  {time.time() - start:6.0f} s")
        if cfg.snapshot_every and (step + 1) % cfg.snapshot_every == 0:
            save_embedded(ema, out / "snapshot")
    minutes = (time.time() - start) / 60
    policy = EmbeddedPolicy(ema)
    accuracy = evaluate(policy, heldout[: cfg.eval_prompts], cfg.eval_steps, cfg.seed)
    unguided = evaluate(policy, heldout[: cfg.eval_prompts], cfg.eval_steps, cfg.seed, guidance_scale=1.0)
    ema.config.training = {
        "config": asdict(cfg), "minutes": round(minutes, 1), "torch": torch.__version__,
        "threads": torch.get_num_threads(), "train_scenes": len(train_scenes),
        "loss_every_10": [round(float(np.mean(losses[i:i + 10])), 5) for i in range(0, len(losses), 10)],
        "heldout_accuracy": accuracy, "heldout_accuracy_unguided": unguided,
    }
    save_embedded(ema, out)
    return ema.config.training


def _ema_update(ema, model, decay: float) -> None:
    with torch.no_grad():
        for part in ("text_encoder", "transformer"):
            for e, p in zip(getattr(ema, part).parameters(), getattr(model, part).parameters()):
                e.lerp_(p, 1 - decay)


@torch.no_grad()
def evaluate(policy: EmbeddedPolicy, scenes: list[Scene], steps: int = 16, seed: int = 0,
             guidance_scale: float | None = None, batch_size: int = 50) -> dict:
    """Share of images showing each attribute of their prompt (Euler ODE, one image per prompt; CFG at
    `guidance_scale`, default the model's `default_guidance`)."""
    guidance_scale = policy.default_guidance if guidance_scale is None else guidance_scale
    hits: dict[str, list[bool]] = {}
    for i in range(0, len(scenes), batch_size):
        chunk = scenes[i:i + batch_size]
        images = ode_sample(policy, [s.prompt() for s in chunk], steps=steps, seed=seed + i,
                            guidance_scale=guidance_scale)
        for image, scene in zip(images, chunk):
            result = check(image, scene)
            for key, ok in result.items():
                hits.setdefault(key, []).append(ok)
            hits.setdefault("all", []).append(all(result.values()))
    return ({k: round(float(np.mean(v)), 4) for k, v in hits.items()}
            | {"prompts": len(scenes), "guidance_scale": guidance_scale})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workbench.models.pretrain", description=__doc__.split("\n\n")[0])
    defaults = PretrainConfig()
    for name, value in asdict(defaults).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    parser.add_argument("--out", type=Path, default=DEFAULT_WEIGHTS,
                        help="folder for config.json and model.safetensors")
    parser.add_argument("--evaluate-only", action="store_true", help="measure the weights in --out and print JSON")
    parser.add_argument("--guidance-scale", type=float, default=None,
                        help="CFG scale for --evaluate-only (default: the model's default_guidance)")
    args = parser.parse_args(argv)
    try:
        cfg = PretrainConfig(**{k: getattr(args, k) for k in asdict(defaults)})
        if args.evaluate_only:
            _, heldout = split_scenes()
            policy = EmbeddedPolicy.load(args.out)
            print(json.dumps(evaluate(policy, heldout[: cfg.eval_prompts], cfg.eval_steps, cfg.seed,
                                      args.guidance_scale)))
            return 0
        record = pretrain(cfg, args.out)
    except WorkbenchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps({"out": str(args.out), "minutes": record["minutes"],
                      "heldout_accuracy": record["heldout_accuracy"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
