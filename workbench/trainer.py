"""Short RL fine-tunes of a flow policy: `TrainConfig`, named presets and the `Trainer` loop.

One iteration (METHODS.md sections 1-3): sample G SDE trajectories for each of N prompts (Flow-GRPO),
score the final images, turn the (N, G) rewards into group-relative advantages, then re-score the
stored transitions with gradient (`sampler.transition`) and minimise the registered objective
(step GRPO, Chunk-GRPO / GCPO, GSPO, GPG, ...) with AdamW. Everything random derives from
(seed, iteration), so a run stopped and resumed equals a run straight through.

The trainer emits `TrainerEvent`s to a plain callback and writes the run store (`workbench.runs`);
the app runs it as a subprocess and reads the store. Under `torchrun` / `accelerate launch` every
process takes the groups r::world of an iteration, gradients are averaged across processes and
only rank 0 writes.
"""

from __future__ import annotations

import copy
import io
import os
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from workbench.advantages import ADVANTAGES, dynamic_sampling_mask
from workbench.chunking import parse_chunk_spec, sample_chunks, step_mask_from_chunks
from workbench.dynamics import relative_change
from workbench.errors import WorkbenchError
from workbench.objectives import (OBJECTIVES, ObjectiveSettings, PolicyInputs, gaussian_kl, mixgrpo_window,
                                  noise_aware_weights)
from workbench.policy import Conditioning, FlowPolicy
from workbench.registry import Registry
from workbench import runs
from workbench.sampler import ode_sample, sample_groups, transition
from workbench.trajectory import SamplingConfig, TrajectoryGroup

EVAL_SEED = 1234  # fixed noise for the held-out ODE evaluation, the same for every run and seed
# attention projections of diffusers' attention blocks (SD3 / FLUX MMDiT, UNet attn1 / attn2), matched by name suffix
LORA_TARGETS = ["to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out"]
EVENT_KINDS = ("iteration", "samples", "checkpoint", "finished", "stopped", "failed")


@dataclass
class TrainConfig:
    """A fine-tuning run. Defaults: Chunk-GRPO on the embedded model, tuned to raise held-out adherence
    in 30 CPU iterations (see `embedded_demo`)."""

    objective: str = "chunk_grpo"
    """Policy objective from OBJECTIVES: step_grpo (Flow-GRPO), chunk_grpo (GCPO arXiv 2510.21583), gspo, gpg, ..."""
    chunks: str = "2,3,4,7"
    """Chunk sizes over the TRAINED steps, summing to their count (GCPO [2,3,4,7] of 16); used by chunk_grpo."""
    reward: str = "adherence"
    """Reward spec for `build_reward`, e.g. 'adherence:1,sharpness:0.5'."""
    advantage: str = "grpo"
    """Advantage estimator from ADVANTAGES: grpo (Flow-GRPO), dr_grpo, gpg (arXiv 2504.02546), gfpo."""
    prompts: list[str] | None = None
    """Training prompts; None = the prompts of the world's training scenes (never the held-out ones)."""
    prompt_file: str | None = None
    """Text file with one training prompt per line (blank lines and '#' comments skipped); excludes prompts."""
    eval_prompts: int = 16
    """Held-out scenes scored with the deterministic ODE for eval/reward_mean; 0 = no evaluation."""
    eval_every: int = 10
    """Evaluate every this many iterations (and before training, and at the last iteration)."""
    prompts_per_iteration: int = 2
    """N, prompts (groups) sampled per iteration."""
    group: int = 8
    """G, trajectories per prompt (GCPO 12, Flow-GRPO 24)."""
    steps: int = 16
    """T, transitions that carry a log-prob; sampling adds one untrained last step unless train_last_step."""
    noise_level: float = 0.7
    """SDE noise level a (Flow-GRPO 0.7; eta for dance_grpo, angle fraction for cps)."""
    sde: str = "flow_grpo"
    """SDE kind: flow_grpo (arXiv 2505.05470), dance_grpo, cps (arXiv 2509.05952)."""
    shift: float | None = None
    """Schedule shift; None = the model's default (3 for the embedded model, GCPO uses 3)."""
    guidance_scale: float = 1.0
    """Classifier-free guidance during rollouts (Flow-GRPO SD3: 4.5; 1 = off, the embedded model has no CFG)."""
    shared_noise: bool = True
    """One x_T per group (DanceGRPO, GCPO --init_same_noise)."""
    window: tuple[int, int] | None = None
    """SDE (and training) only on steps [start, end) of the T, ODE elsewhere (Flow-GRPO-Fast); None = all T."""
    mixgrpo: bool = False
    """MixGRPO (arXiv 2507.21802): a 4-step SDE window that slides one step every 25 iterations."""
    train_last_step: bool = False
    """Sample T transitions and train all; False = T + 1 transitions, the last deterministic and untrained (GCPO)."""
    iterations: int = 30
    """Training iterations (rollout + update)."""
    lr: float = 3e-5
    """AdamW learning rate (GCPO 1e-5 full FT of FLUX; Flow-GRPO 3e-4 LoRA); tuned, see `embedded_demo`."""
    weight_decay: float = 1e-4
    """AdamW weight decay (Flow-GRPO 1e-4)."""
    inner_epochs: int = 1
    """Passes over each iteration's transitions (Flow-GRPO 1)."""
    minibatch: int | None = None
    """Transitions per optimizer step (whole trajectories: a multiple of the trained steps); None = one group."""
    grad_accum: int = 1
    """Minibatches whose gradients are accumulated per optimizer step."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip (GCPO 0.01, Flow-GRPO 1.0)."""
    clip_low: float = 1e-3
    """PPO clip range eps below 1 (Flow-GRPO 1e-4, GCPO 5e-5); embedded-model ratios move ~2e-5, see `embedded_demo`."""
    clip_high: float | None = None
    """Clip range above 1; None = clip_low (DAPO clip-higher, GSPO 4e-4)."""
    kl_beta: float = 0.04
    """Weight of the closed-form KL to the initial model (Flow-GRPO 0.01-0.04; 0 in GCPO); see `embedded_demo`."""
    noise_aware: bool = False
    """TempFlow-GRPO (arXiv 2508.04324) step weights proportional to the step std."""
    chunk_fraction: float | None = None
    """GCPO weighted chunk sampling: train this fraction of chunks, drawn by L1_rel (paper 0.5); None = all."""
    dynamic_sampling: bool = False
    """DAPO (arXiv 2503.14476): do not train groups with zero reward variance (no refill)."""
    gfpo_metric: str | None = None
    """GFPO (arXiv 2508.09726): reward spec of the filter metric (higher kept); needs advantage='gfpo'."""
    gfpo_keep: int | None = None
    """GFPO: samples kept per group (paper 8 of 16); None = G // 2."""
    seed: int = 0
    """Seed of prompts, noise and minibatch order: everything derives from (seed, iteration)."""
    dtype: str = "float32"
    """Compute dtype: float32 or bfloat16 (autocast; trained weights stay float32)."""
    device: str | None = None
    """cuda, mps or cpu; None = the best available."""
    model: str | None = None
    """Local model folder (SD3 / FLUX / embedded format); None = the shipped embedded model."""
    lora_rank: int = 0
    """0 = full fine-tuning; > 0 = LoRA of this rank on the attention projections (Flow-GRPO r 32)."""
    lora_alpha: float | None = None
    """LoRA alpha; None = 2 * rank (Flow-GRPO r 32 / alpha 64)."""
    sample_every: int = 5
    """Save a grid of the rollout images every this many iterations."""
    checkpoint_every: int = 10
    """Save weights + optimizer every this many iterations (always at the end and on stop)."""

    def __post_init__(self):
        if isinstance(self.window, list):
            self.window = tuple(self.window)
        OBJECTIVES.get(self.objective)  # unknown names raise, listing the valid ones
        ADVANTAGES.get(self.advantage)
        self._check_counts()
        self._check_prompts()
        self._check_options()
        self.sampling_config(1)  # validates steps, window, noise level, sde
        self.check_batches()

    def _check_counts(self) -> None:
        for name in ("eval_every", "prompts_per_iteration", "steps", "iterations", "inner_epochs", "grad_accum",
                     "sample_every", "checkpoint_every"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise WorkbenchError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if self.group < 2:
            raise WorkbenchError(f"group must be >= 2 (advantages compare samples of one prompt), got {self.group}")
        if not 0 <= self.eval_prompts <= 200:
            raise WorkbenchError(f"eval_prompts must be in 0..200 (the held-out scenes), got {self.eval_prompts}")
        if self.lora_rank < 0:
            raise WorkbenchError(f"lora_rank must be >= 0 (0 = full fine-tuning), got {self.lora_rank}")

    def _check_prompts(self) -> None:
        if self.prompts is not None and self.prompt_file is not None:
            raise WorkbenchError("give prompts or prompt_file, not both")
        if self.prompts is not None and not [p for p in self.prompts if p.strip()]:
            raise WorkbenchError("prompts is empty; give at least one prompt or leave it None for the world's")
        if self.prompt_file is not None and not Path(self.prompt_file).is_file():
            raise WorkbenchError(f"prompt file {self.prompt_file} does not exist; give a text file, one prompt a line")

    def _check_options(self) -> None:
        from workbench.rewards import parse_reward_spec

        parse_reward_spec(self.reward)
        if self.window is not None and self.mixgrpo:
            raise WorkbenchError("mixgrpo slides its own window; drop window or mixgrpo")
        if self.mixgrpo and self.steps < 4:
            raise WorkbenchError(f"mixgrpo needs steps >= 4 (a 4-step window), got {self.steps}")
        if self.window is not None and not 0 <= self.window[0] < self.window[1] <= self.steps:
            raise WorkbenchError(f"SDE window {self.window} must satisfy 0 <= start < end <= steps ({self.steps})")
        if self.noise_level <= 0:
            raise WorkbenchError("noise_level must be > 0 for training: the ODE (0) has no log-probs to train")
        if self.lr <= 0 or self.max_grad_norm <= 0 or self.weight_decay < 0:
            raise WorkbenchError("lr and max_grad_norm must be > 0 and weight_decay >= 0")
        self.objective_settings()  # validates clip_low, clip_high, kl_beta
        if self.dtype not in ("float32", "bfloat16"):
            raise WorkbenchError(f"dtype must be float32 or bfloat16, got '{self.dtype}'")
        if self.chunk_fraction is not None and not 0 < self.chunk_fraction <= 1:
            raise WorkbenchError(f"chunk_fraction must be in (0, 1] or None, got {self.chunk_fraction}")
        if (self.advantage == "gfpo") != (self.gfpo_metric is not None):
            raise WorkbenchError("advantage 'gfpo' and gfpo_metric go together: set both (e.g. gfpo_metric="
                                 "'sharpness') or neither")
        if self.gfpo_metric is not None:
            parse_reward_spec(self.gfpo_metric)
        if self.gfpo_keep is not None and not 1 <= self.gfpo_keep <= self.group:
            raise WorkbenchError(f"gfpo_keep must be in 1..group ({self.group}), got {self.gfpo_keep}")
        if self.uses_chunks:
            parse_chunk_spec(self.chunks, len(self.trained_steps(1)))

    def check_batches(self, world: int = 1) -> None:
        """Minibatches hold whole trajectories (chunk ratios need all steps) and split evenly over processes."""
        s = len(self.trained_steps(1))
        total = self.prompts_per_iteration * self.group * s  # transitions per iteration
        mb = self.minibatch_size
        if self.prompts_per_iteration % world:
            raise WorkbenchError(f"prompts_per_iteration ({self.prompts_per_iteration}) must be a multiple of "
                                 f"the number of processes ({world})")
        if mb % (s * world) or total % mb:
            raise WorkbenchError(f"minibatch ({mb} transitions) must be a multiple of {s} trained steps x {world} "
                                 f"process(es) and divide the {total} transitions of an iteration")
        if (total // mb) % self.grad_accum:
            raise WorkbenchError(f"grad_accum ({self.grad_accum}) must divide the {total // mb} minibatches per "
                                 "iteration; change minibatch or grad_accum")

    @property
    def uses_chunks(self) -> bool:
        return self.objective == "chunk_grpo" or self.chunk_fraction is not None

    @property
    def sampling_steps(self) -> int:
        return self.steps + (0 if self.train_last_step else 1)

    @property
    def minibatch_size(self) -> int:
        """Transitions per optimizer step; the default is one group: G x trained steps."""
        return self.minibatch or self.group * len(self.trained_steps(1))

    def sde_window(self, iteration: int) -> tuple[int, int]:
        """[start, end) of the SDE (= trained) steps at this iteration (1-based)."""
        if self.mixgrpo:
            start, size = mixgrpo_window(iteration - 1, self.steps)
            return start, start + size
        return self.window or (0, self.steps)

    def trained_steps(self, iteration: int) -> list[int]:
        """Step indices trained at this iteration: the SDE window without zero-std steps (cps's last)."""
        start, end = self.sde_window(iteration)
        steps = [t for t in range(start, end) if not (self.sde == "cps" and t == self.sampling_steps - 1)]
        if not steps:
            raise WorkbenchError("no step carries noise to train; widen the window or use more steps")
        return steps

    def sampling_config(self, iteration: int, seed: int = 0) -> SamplingConfig:
        return SamplingConfig(group=self.group, steps=self.sampling_steps, noise_level=self.noise_level,
                              sde=self.sde, shift=self.shift, window=self.sde_window(iteration),
                              guidance_scale=self.guidance_scale, shared_noise=self.shared_noise, seed=seed)

    def objective_settings(self) -> ObjectiveSettings:
        chunks = parse_chunk_spec(self.chunks, len(self.trained_steps(1))) if self.objective == "chunk_grpo" else None
        return ObjectiveSettings(clip_low=self.clip_low, clip_high=self.clip_high, chunks=chunks,
                                 kl_beta=self.kl_beta)

    def prompt_pool(self) -> list[str]:
        if self.prompts is not None:
            return [p.strip() for p in self.prompts if p.strip()]
        if self.prompt_file is not None:
            lines = [line.strip() for line in Path(self.prompt_file).read_text().splitlines()]
            pool = [line for line in lines if line and not line.startswith("#")]
            if not pool:
                raise WorkbenchError(f"prompt file {self.prompt_file} has no prompts")
            return pool
        from workbench.world import split_scenes
        return [s.prompt() for s in split_scenes()[0]]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> TrainConfig:
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise WorkbenchError(f"unknown training settings {unknown}; valid: {', '.join(sorted(names))}")
        return cls(**data)


# ------------------------------------------------------------------------------------ presets
PRESETS = Registry("preset")


def preset(name: str, **overrides) -> TrainConfig:
    """The named preset with `overrides` applied (validated again)."""
    return replace(PRESETS.get(name)(), **overrides)


@PRESETS.register("embedded_demo")
def embedded_demo() -> TrainConfig:
    """The defaults: Chunk-GRPO [2,3,4,7] on the embedded model, 30 iterations of 2 x 8 samples (CPU minutes).

    How lr, kl_beta and clip_low were chosen (shipped weights, 48 held-out prompts, base 0.737):
    full fine-tuning with Adam on 16 samples per iteration is noise-dominated. Without a KL term held-out
    adherence fell (lr 3e-5: 0.63; with one optimizer step per iteration 0.68, and 0.64 when the
    advantages were shuffled, so the drift is mostly noise; lr 1e-4 fell further) and lr 1e-5 barely
    moved (0.743). lr 3e-5 with Flow-GRPO's KL beta 0.04 rose in 3 of 3 seeds
    (0.750, 0.746, 0.752). Re-scored log-prob ratios (means over 3072 pixels) move only ~2e-5 per
    update at this lr, so Flow-GRPO's clip 1e-4 is not tiny here: it is never reached, and clip 1e-3 is
    inactive as well (clip 2e-5 clipped ~5 % of units and scored lower: 0.729, 0.711, 0.756). With the
    clip inactive, step, chunk and sequence ratios give the same gradient; compare objectives with a
    clip near 2e-5 (scripts/experiment_objectives.py does).
    """
    return TrainConfig()


@PRESETS.register("gcpo")
def gcpo() -> TrainConfig:
    """GCPO / Chunk-GRPO (arXiv 2510.21583) as run on FLUX: full fine-tuning, tiny steps."""
    return TrainConfig(group=12,  # paper: group 12
                       lr=1e-5,  # paper: 1e-5
                       max_grad_norm=0.01,  # paper: stability setting
                       clip_low=5e-5,  # paper: eps 5e-5
                       kl_beta=0.0,  # paper: no KL term
                       iterations=150)  # paper: 150 iterations


@PRESETS.register("gcpo_weighted")
def gcpo_weighted() -> TrainConfig:
    """GCPO with weighted chunk sampling (half the chunks per iteration, drawn by L1_rel)."""
    return replace(gcpo(), chunk_fraction=0.5)  # paper: fraction 0.5


@PRESETS.register("flow_grpo")
def flow_grpo() -> TrainConfig:
    """Flow-GRPO (arXiv 2505.05470) SD3 recipe: step ratios, LoRA, KL to the base model."""
    return TrainConfig(objective="step_grpo",
                       group=24,  # paper: group 24
                       steps=10, train_last_step=True,  # paper: 10 training steps, every one trained
                       lr=3e-4, lora_rank=32,  # paper: LoRA r 32 / alpha 64, lr 3e-4
                       clip_low=1e-4,  # paper: clip 1e-4
                       kl_beta=0.04)  # paper: beta 0.04 for GenEval


@PRESETS.register("dance_grpo")
def dance_grpo() -> TrainConfig:
    """DanceGRPO: step ratios with the constant-diffusion SDE."""
    return TrainConfig(objective="step_grpo", sde="dance_grpo",
                       noise_level=0.3,  # DanceGRPO eta 0.3
                       clip_low=1e-4)  # DanceGRPO clip 1e-4


@PRESETS.register("mixgrpo")
def mixgrpo() -> TrainConfig:
    """MixGRPO (arXiv 2507.21802): SDE and training on a 4-step window sliding to lower noise every 25 iterations."""
    return TrainConfig(objective="step_grpo", mixgrpo=True,
                       chunks="4")  # 4 trained steps: one chunk should chunk_grpo be chosen


@PRESETS.register("gspo")
def gspo() -> TrainConfig:
    """GSPO (arXiv 2507.18071): one sequence ratio per trajectory."""
    return TrainConfig(objective="gspo",
                       clip_low=3e-4, clip_high=4e-4)  # paper: 3e-4 / 4e-4


@PRESETS.register("gpg")
def gpg() -> TrainConfig:
    """GPG (arXiv 2504.02546): no ratio, alpha-scaled advantages, one update per rollout."""
    base = TrainConfig(objective="gpg", advantage="gpg")
    return replace(base, minibatch=base.prompts_per_iteration * base.group * base.steps)  # all transitions


@PRESETS.register("dapo")
def dapo() -> TrainConfig:
    """DAPO (arXiv 2503.14476): token-level step loss, clip-higher, dynamic sampling."""
    base = TrainConfig(objective="dapo", dynamic_sampling=True)
    return replace(base, clip_high=base.clip_low * 0.28 / 0.2)  # DAPO's 0.2 / 0.28 asymmetry


# ------------------------------------------------------------------------------------ events, summary
@dataclass
class TrainerEvent:
    """Something the trainer did; `data` is JSON-friendly (metrics, file paths, the summary)."""

    kind: str  # one of EVENT_KINDS
    iteration: int
    data: dict = field(default_factory=dict)


@dataclass
class RunSummary:
    run_dir: str
    state: str  # finished, stopped or failed
    iterations: int  # completed iterations
    first_reward_mean: float | None
    last_reward_mean: float | None
    first_eval_reward: float | None  # before training (iteration 0)
    last_eval_reward: float | None
    seconds: float

    def to_dict(self) -> dict:
        return runs.clean_json(asdict(self))


def iteration_seeds(seed: int, iteration: int, pool: int, count: int) -> tuple[list[int], list[int]]:
    """(prompt indices, group seeds) of one iteration, derived only from (seed, iteration)."""
    rng = np.random.default_rng([seed, iteration])
    idx = rng.choice(pool, size=count, replace=pool < count).tolist()
    return idx, rng.integers(0, 2**31 - 1, size=count).tolist()


# ------------------------------------------------------------------------------------ distributed
@dataclass
class DistInfo:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_distributed() -> DistInfo:
    """Join the process group `torchrun` / `accelerate launch` describe in the environment (gloo on CPU)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return DistInfo()
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return DistInfo(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def gather(obj, info: DistInfo) -> list:
    """Every process's `obj`, in rank order (a one-element list in a single process)."""
    if info.world == 1:
        return [obj]
    import torch.distributed as dist

    out = [None] * info.world
    dist.all_gather_object(out, obj)
    return out


def sync_gradients(params: list[torch.Tensor], weight: float, info: DistInfo) -> bool:
    """Average gradients over processes, weighted by each one's trained trajectories; False if none trained."""
    import torch.distributed as dist

    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) * weight for p in params]
                     + [torch.tensor([weight], device=params[0].device, dtype=params[0].dtype)])
    dist.all_reduce(flat)
    total = float(flat[-1])
    if total <= 0:
        return False
    offset = 0
    for p in params:
        p.grad = (flat[offset:offset + p.numel()] / total).view_as(p).clone()
        offset += p.numel()
    return True


# ------------------------------------------------------------------------------------ models
def load_base_policy(config: TrainConfig, info: DistInfo) -> FlowPolicy:
    """The policy named by config.model on config.device (per-process GPU under torchrun)."""
    from workbench.adapters import default_device, load_policy

    device = config.device or default_device()
    if device == "cuda" and info.world > 1:
        device = f"cuda:{info.local_rank}"
        torch.cuda.set_device(info.local_rank)
    pipeline = config.model is not None and (Path(config.model) / "model_index.json").is_file()
    return load_policy(config.model, device=device, dtype=config.dtype if pipeline else "float32")


def add_lora(transformer: torch.nn.Module, rank: int, alpha: float | None) -> None:
    """LoRA adapters on the attention projections (peft via diffusers' `add_adapter`); only they train."""
    from peft import LoraConfig

    transformer.requires_grad_(False)
    try:
        transformer.add_adapter(LoraConfig(r=rank, lora_alpha=alpha or 2 * rank, init_lora_weights="gaussian",
                                           target_modules=LORA_TARGETS))
    except ValueError as err:  # peft: no module matches the targets
        raise WorkbenchError(f"cannot add LoRA adapters to this model ({str(err).splitlines()[0]}); "
                             "use lora_rank 0 for full fine-tuning") from None
    for name, p in transformer.named_parameters():
        if "lora_" in name:
            p.data = p.data.float()
            p.requires_grad_(True)


def trainable_weights(transformer: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p for n, p in transformer.named_parameters() if p.requires_grad}


def load_trained_policy(run_dir: str | Path, device: str | None = None) -> FlowPolicy:
    """The policy of a run with its latest checkpoint applied (for sampling from a fine-tuned model)."""
    run_dir = runs.check_run_dir(run_dir)
    config = TrainConfig.from_dict(runs.read_json(run_dir / runs.CONFIG))
    policy = load_base_policy(replace(config, device=device or config.device), DistInfo())
    if config.lora_rank:
        add_lora(policy.transformer, config.lora_rank, config.lora_alpha)
    else:
        policy.transformer.requires_grad_(True)
    folder = runs.latest_checkpoint(run_dir)
    if folder is not None:
        _, weights, _ = runs.load_checkpoint(folder)
        _copy_weights(policy.transformer, weights)
    return policy


def _copy_weights(transformer: torch.nn.Module, weights: dict[str, torch.Tensor]) -> None:
    params = trainable_weights(transformer)
    if set(params) != set(weights):
        raise WorkbenchError("the checkpoint's weights do not match the model's trainable parameters; "
                             "was it made with another model or lora_rank?")
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(weights[name].to(p))


# ------------------------------------------------------------------------------------ the loop
def reward_metrics(rewards: torch.Tensor, components: dict[str, torch.Tensor]) -> dict[str, float]:
    """reward/mean, reward/std, reward/min, reward/max over all N x G samples, reward/<name>/mean per component."""
    out = {"reward/mean": rewards.mean().item(), "reward/std": rewards.std(unbiased=False).item(),
           "reward/min": rewards.min().item(), "reward/max": rewards.max().item()}
    return out | {f"reward/{name}/mean": v.mean().item() for name, v in components.items()}


def _mean_stats(parts: list[dict]) -> dict[str, float]:
    """Mean of each key over the dicts that have a finite value for it (NaN-aware)."""
    keys = sorted({k for p in parts for k in p})
    out = {}
    for k in keys:
        vals = [p[k] for p in parts if k in p and p[k] is not None and np.isfinite(p[k])]
        out[k] = float(np.mean(vals)) if vals else float("nan")
    return out


def _seed(*parts: int) -> int:
    return int(np.random.SeedSequence(list(parts)).generate_state(1)[0])


@dataclass
class _Stored:
    """One iteration's stored transitions on this process: L = local groups x G trajectories, S trained steps."""

    states: torch.Tensor  # (L, T + 1, C, H, W)
    old_log_prob: torch.Tensor  # (L, S) log-probs at sampling time
    advantages: torch.Tensor  # (L,)
    rows: torch.Tensor  # (L,) bool, trajectories that train (dynamic sampling drops flat groups)
    cond: Conditioning  # L rows
    step_mask: torch.Tensor  # (S,) bool, chunk sampling
    step_weights: torch.Tensor | None  # (S,) noise-aware weights
    steps: torch.Tensor  # (S,) trained step indices
    sigmas: torch.Tensor  # (T + 1,)
    config: SamplingConfig


class Trainer:
    """Fine-tunes `policy` (default: config.model) with `config`, writing the run store in `run_dir`.

        trainer = Trainer(TrainConfig(iterations=5), runs.new_run_dir())
        summary = trainer.run(callback=lambda event: print(event.kind, event.iteration))
    """

    def __init__(self, config: TrainConfig, run_dir: str | Path, policy: FlowPolicy | None = None,
                 resume: bool = False):
        self.config, self.run_dir = config, Path(run_dir)
        self.dist = init_distributed()
        config.check_batches(self.dist.world)
        if not resume and self.dist.main and (self.run_dir / runs.CONFIG).exists():
            raise WorkbenchError(f"{self.run_dir} already holds a run; resume it (--resume) or choose a new --out")
        self.policy = policy or load_base_policy(config, self.dist)
        self.reference = self._frozen_copy() if config.kl_beta > 0 else None
        if config.lora_rank:
            add_lora(self.policy.transformer, config.lora_rank, config.lora_alpha)
        else:
            self.policy.transformer.requires_grad_(True)
        self.params = trainable_weights(self.policy.transformer)
        self.optimizer = torch.optim.AdamW(list(self.params.values()), lr=config.lr,
                                           weight_decay=config.weight_decay)
        self._setup_data()
        self.iteration, self.history, self.last_groups = 0, [], []
        self._stop, self._saved, self._callback = False, -1, None
        if resume:
            self._restore()
        elif self.dist.main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            runs.write_json(self.run_dir / runs.CONFIG, config.to_dict())
        if self.dist.main:
            runs.clear_stop(self.run_dir)

    @classmethod
    def resume(cls, run_dir: str | Path, policy: FlowPolicy | None = None, iterations: int | None = None) -> Trainer:
        """Continue the run in run_dir from its latest checkpoint (optionally to a new iteration count)."""
        run_dir = runs.check_run_dir(run_dir)
        config = TrainConfig.from_dict(runs.read_json(run_dir / runs.CONFIG))
        return cls(replace(config, iterations=iterations or config.iterations), run_dir, policy, resume=True)

    def request_stop(self) -> None:
        """Stop after the current iteration with a checkpoint and state 'stopped'."""
        self._stop = True

    def _frozen_copy(self) -> FlowPolicy:
        """The KL reference: a shallow copy of the policy denoising with a frozen copy of the initial transformer."""
        frozen = copy.deepcopy(self.policy.transformer).requires_grad_(False).eval()
        ref = copy.copy(self.policy)
        ref.transformer = frozen
        model = getattr(ref, "model", None)
        if getattr(model, "transformer", None) is self.policy.transformer:  # EmbeddedPolicy denoises via its model
            ref.model = copy.copy(model)
            ref.model.transformer = frozen
        return ref

    def _setup_data(self) -> None:
        from workbench.rewards import build_reward
        from workbench.world import split_scenes

        cfg = self.config
        self.reward_fn = build_reward(cfg.reward)
        self.metric_fn = build_reward(cfg.gfpo_metric) if cfg.gfpo_metric else None
        self.settings = cfg.objective_settings()
        self.objective = OBJECTIVES.get(cfg.objective)
        self.pool = cfg.prompt_pool()
        for prompt in self.pool:
            self.policy.check_prompt(prompt)
        self.eval_prompts = [s.prompt() for s in split_scenes()[1][:cfg.eval_prompts]]

    def _restore(self) -> None:
        folder = runs.latest_checkpoint(self.run_dir)
        if folder is not None:
            self.iteration, weights, optimizer_state = runs.load_checkpoint(folder)
            _copy_weights(self.policy.transformer, weights)
            self.optimizer.load_state_dict(optimizer_state)
            self._saved = self.iteration
        if self.dist.main:  # only rank 0 reads and writes the store
            runs.truncate_metrics(self.run_dir, self.iteration)
            runs.write_json(self.run_dir / runs.CONFIG, self.config.to_dict())
            self.history = runs.read_metrics(self.run_dir)

    def _autocast(self):
        return torch.autocast(self.policy.device.type, dtype=torch.bfloat16, enabled=self.config.dtype == "bfloat16")

    # -------------------------------------------------------------------------------- run
    def run(self, callback: Callable[[TrainerEvent], None] | None = None) -> RunSummary:
        """Train until config.iterations or a stop request; returns the summary (re-raises on failure)."""
        cfg, start, state = self.config, time.time(), "finished"
        self._callback = callback
        try:
            self._status("running")
            if cfg.eval_prompts and not any(r.get("iteration") == 0 for r in self.history):
                self._log(0, self._evaluate())
            while self.iteration < cfg.iterations:
                it, t0 = self.iteration + 1, time.perf_counter()
                # 1. rollout: G SDE trajectories for this process's prompts (groups r::world)
                scfg = cfg.sampling_config(it)
                groups = self._rollout(it, scfg)
                t1 = time.perf_counter()
                # 2. rewards of every group, gathered from all processes: (N, G)
                rewards, components, metric = self._rewards(groups)
                # 3. group-relative advantages (N, G); only groups with std > 0 train
                adv = self._advantages(rewards, metric)
                keep = (dynamic_sampling_mask(rewards) if cfg.dynamic_sampling
                        else torch.ones(len(rewards), dtype=torch.bool))  # (N,) groups that train
                mine = slice(self.dist.rank, None, self.dist.world)
                t2 = time.perf_counter()
                # 4. inner updates over minibatches of the stored transitions
                stored = self._store(it, groups, scfg, adv.values[mine], keep[mine])
                update = self._update(it, stored)
                t3 = time.perf_counter()
                # 5. metrics, events, checkpoint
                metrics = reward_metrics(rewards, components) | adv.stats() | update | {  # adv/* incl. zero_std_frac
                    "rollout/groups": float(len(rewards)), "rollout/trajectories": float(rewards.numel()),
                    "rollout/kept_groups": float(keep.sum()), "sde/window_start": float(cfg.sde_window(it)[0]),
                    "time/rollout_s": t1 - t0, "time/reward_s": t2 - t1, "time/update_s": t3 - t2,
                    "time/iteration_s": time.perf_counter() - t0}
                self.iteration, self.last_groups = it, groups
                if cfg.eval_prompts and (it % cfg.eval_every == 0 or it == cfg.iterations):
                    metrics |= self._evaluate()
                self._log(it, metrics)
                if it % cfg.sample_every == 0:
                    self._save_samples(it, groups)
                stop = self._stop_requested()
                if it % cfg.checkpoint_every == 0 or it == cfg.iterations or stop:
                    self._checkpoint()
                if stop:
                    state = "stopped"
                    break
        except BaseException as err:
            self._fail(err)
            raise
        return self._finish(state, start)

    # -------------------------------------------------------------------------------- stages
    def _rollout(self, it: int, scfg: SamplingConfig) -> list[TrajectoryGroup]:
        cfg = self.config
        idx, seeds = iteration_seeds(cfg.seed, it, len(self.pool), cfg.prompts_per_iteration)
        mine = range(self.dist.rank, cfg.prompts_per_iteration, self.dist.world)
        with self._autocast():
            return sample_groups(self.policy, [self.pool[idx[k]] for k in mine], scfg, [seeds[k] for k in mine])

    def _rewards(self, groups: list[TrajectoryGroup]):
        """Rewards (N, G), components name -> (N, G) and the GFPO metric (N, G) or None, in global group order."""
        g = self.config.group
        images = torch.cat([grp.images for grp in groups])  # (n * G, 3, H, W)
        prompts = [grp.prompt for grp in groups for _ in range(g)]
        comps = {k: v.view(-1, g) for k, v in self.reward_fn.components(images, prompts).items()}  # (n, G)
        metric = self.metric_fn(images, prompts).view(-1, g) if self.metric_fn else None
        parts = gather((comps, metric), self.dist)
        world, n = self.dist.world, self.config.prompts_per_iteration

        def assemble(per_rank: list[torch.Tensor]) -> torch.Tensor:  # group k: row k // world of rank k % world
            return torch.stack([per_rank[k % world][k // world] for k in range(n)])  # (N, G)

        components = {k: assemble([p[0][k] for p in parts]) for k in comps}
        metric = assemble([p[1] for p in parts]) if metric is not None else None
        return self.reward_fn.combine(components), components, metric

    def _advantages(self, rewards: torch.Tensor, metric: torch.Tensor | None):
        fn = ADVANTAGES.get(self.config.advantage)
        if self.config.advantage == "gfpo":
            return fn(rewards, metric=metric, keep=self.config.gfpo_keep)
        return fn(rewards)

    def _store(self, it: int, groups: list[TrajectoryGroup], scfg: SamplingConfig, adv: torch.Tensor,
               keep: torch.Tensor) -> _Stored:
        """This process's transitions of the iteration, on the device, with their masks and constants."""
        dev, g = self.policy.device, self.config.group
        steps = torch.tensor(self.config.trained_steps(it), device=dev)  # (S,)
        stds = groups[0].stds[0, steps.cpu()]  # (S,) the same for every trajectory
        return _Stored(
            states=torch.cat([grp.states for grp in groups]).to(dev),  # (L, T + 1, C, H, W)
            old_log_prob=torch.cat([grp.log_probs for grp in groups]).to(dev)[:, steps],  # (L, S)
            advantages=adv.reshape(-1).to(dev), rows=keep.repeat_interleave(g).to(dev),  # (L,)
            cond=self.policy.encode([grp.prompt for grp in groups], cfg=scfg.guidance_scale != 1.0).repeat(g),
            step_mask=self._chunk_mask(it, groups, steps.cpu()).to(dev),
            step_weights=noise_aware_weights(stds).to(dev) if self.config.noise_aware else None,
            steps=steps, sigmas=groups[0].sigmas.to(dev), config=scfg)

    def _chunk_mask(self, it: int, groups: list[TrajectoryGroup], steps: torch.Tensor) -> torch.Tensor:
        """(S,) bool: all steps, or GCPO's weighted sample of chunks drawn by the mean L1_rel over all groups."""
        cfg = self.config
        if cfg.chunk_fraction is None:
            return torch.ones(len(steps), dtype=torch.bool)
        sizes = parse_chunk_spec(cfg.chunks, len(steps))
        l1 = torch.cat([relative_change(grp.states) for grp in groups])[:, steps]  # (L, S)
        parts = gather((l1.sum(0), l1.shape[0]), self.dist)
        curve = sum(p[0] for p in parts) / sum(p[1] for p in parts)  # (S,)
        gen = torch.Generator().manual_seed(_seed(cfg.seed, it, 1))
        return step_mask_from_chunks(sizes, sample_chunks(sizes, curve, cfg.chunk_fraction, gen))

    def _update(self, it: int, stored: _Stored) -> dict[str, float]:
        """Inner epochs over shuffled minibatches of whole trajectories; returns the averaged diagnostics."""
        cfg, n_rows = self.config, stored.states.shape[0]
        per_mb = cfg.minibatch_size // (len(stored.steps) * self.dist.world)  # trajectories per process
        stats, norms, trained, transitions = [], [], 0.0, 0.0
        self.policy.transformer.train()
        for epoch in range(cfg.inner_epochs):
            gen = torch.Generator().manual_seed(_seed(cfg.seed, it, epoch, self.dist.rank))
            for b, idx in enumerate(torch.randperm(n_rows, generator=gen).split(per_mb)):
                out = self._loss(stored, idx.to(stored.states.device))
                if out is not None:
                    (out.loss / cfg.grad_accum).backward()
                    stats.append(out.stats() | self._chunk_stats(out))
                    trained += float(stored.rows[idx].sum())
                    transitions += float(stored.step_mask.sum()) * float(stored.rows[idx].sum())
                if (b + 1) % cfg.grad_accum == 0:
                    norm = self._optimizer_step(trained)
                    norms += [] if norm is None else [norm]
                    trained = 0.0
        self.policy.transformer.eval()
        parts = gather((stats, norms, transitions), self.dist)
        out = _mean_stats([s for p in parts for s in p[0]])
        out["policy/grad_norm"] = float(np.mean(norms)) if norms else float("nan")
        out["train/optimizer_steps"] = float(len(norms))
        out["train/transitions"] = float(sum(p[2] for p in parts))
        return out

    @staticmethod
    def _chunk_stats(out) -> dict[str, float]:
        return ({f"chunk/ratio_mean_{j}": v for j, v in enumerate(out.chunk_ratio_mean)}
                | {f"chunk/ratio_std_{j}": v for j, v in enumerate(out.chunk_ratio_std)})

    def _loss(self, stored: _Stored, idx: torch.Tensor):
        """Objective on the trajectories idx: re-score their trained transitions with gradient."""
        m, s = len(idx), len(stored.steps)
        mask = stored.step_mask[None, :] & stored.rows[idx, None]  # (M, S)
        if not bool(mask.any()):
            return None
        x = stored.states[idx][:, stored.steps].flatten(0, 1)  # (M * S, C, H, W), row m * S + s
        x_next = stored.states[idx][:, stored.steps + 1].flatten(0, 1)  # (M * S, C, H, W)
        step = stored.steps.repeat(m)  # (M * S,)
        cond = stored.cond.index(idx).repeat(s)  # (M * S) rows, row m * S + s is trajectory m
        with self._autocast():
            out = transition(self.policy, x, stored.sigmas, step, cond, stored.config, x_next=x_next)
            kl = None
            if self.reference is not None:
                with torch.no_grad():
                    ref = transition(self.reference, x, stored.sigmas, step, cond, stored.config, x_next=x_next)
                kl = gaussian_kl(out.mean, ref.mean, out.std).view(m, s)  # (M, S)
        inputs = PolicyInputs(out.log_prob.view(m, s), stored.old_log_prob[idx], stored.advantages[idx],
                              step_mask=mask, step_weights=stored.step_weights, kl=kl)
        return self.objective(inputs, self.settings)

    def _optimizer_step(self, trained: float) -> float | None:
        """Average gradients over processes, clip, AdamW step; None when no trajectory trained anywhere."""
        params = list(self.params.values())
        if self.dist.world > 1:
            if not sync_gradients(params, trained, self.dist):
                self.optimizer.zero_grad(set_to_none=True)
                return None
        elif trained == 0:
            return None
        norm = torch.nn.utils.clip_grad_norm_(params, self.config.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm)

    # -------------------------------------------------------------------------------- evaluation, store, events
    def _evaluate(self) -> dict[str, float]:
        """eval/reward_mean (and per component) of the held-out prompts with the deterministic ODE (rank 0)."""
        if not self.dist.main or not self.eval_prompts:
            return {}
        t0, cfg = time.perf_counter(), self.config
        with self._autocast():
            images = ode_sample(self.policy, self.eval_prompts, steps=cfg.sampling_steps, seed=EVAL_SEED,
                                shift=cfg.shift, guidance_scale=cfg.guidance_scale)
        comps = self.reward_fn.components(images, self.eval_prompts)
        return ({"eval/reward_mean": self.reward_fn.combine(comps).mean().item()}
                | {f"eval/{k}/mean": v.mean().item() for k, v in comps.items()}
                | {"time/eval_s": time.perf_counter() - t0})

    def _log(self, it: int, metrics: dict[str, float]) -> None:
        """The one logging function: history, metrics.jsonl, status and the 'iteration' event."""
        record = runs.clean_json({"iteration": it, **metrics})
        self.history.append(record)
        if self.dist.main:
            runs.append_metrics(self.run_dir, record)
            self._status("running")
            self._emit("iteration", it, record)

    def _emit(self, kind: str, iteration: int, data: dict) -> None:
        if self.dist.main and self._callback is not None:
            self._callback(TrainerEvent(kind, iteration, data))

    def _status(self, state: str, error: str | None = None) -> None:
        if self.dist.main:
            runs.write_status(self.run_dir, state, self.iteration, error)

    def _save_samples(self, it: int, groups: list[TrajectoryGroup]) -> None:
        from workbench.imaging import grid

        if not self.dist.main:
            return
        buf = io.BytesIO()
        grid(torch.cat([g.images for g in groups]), ncol=self.config.group).save(buf, format="PNG")
        path = runs.atomic_write(self.run_dir / "samples" / f"iter_{it:04d}.png", buf.getvalue())
        self._emit("samples", it, {"path": str(path), "prompts": [g.prompt for g in groups]})

    def _stop_requested(self) -> bool:
        flag = self._stop or (self.dist.main and runs.stop_requested(self.run_dir))
        if self.dist.world > 1:
            import torch.distributed as dist

            t = torch.tensor([float(flag)], device=self.policy.device if dist.get_backend() == "nccl" else "cpu")
            dist.broadcast(t, 0)
            flag = bool(t.item())
        return flag

    def _checkpoint(self) -> None:
        if self.dist.main and self._saved != self.iteration:
            path = runs.save_checkpoint(self.run_dir, self.iteration, self.params, self.optimizer.state_dict())
            self._saved = self.iteration
            self._emit("checkpoint", self.iteration, {"path": str(path)})

    def _summary(self, state: str, start: float) -> RunSummary:
        def values(key: str) -> list[float]:
            return [r[key] for r in self.history if r.get(key) is not None]

        rewards, evals = values("reward/mean"), values("eval/reward_mean")
        first_eval = next((r.get("eval/reward_mean") for r in self.history if r.get("iteration") == 0), None)
        return RunSummary(str(self.run_dir), state, self.iteration, rewards[0] if rewards else None,
                          rewards[-1] if rewards else None, first_eval, evals[-1] if evals else None,
                          time.time() - start)

    def _finish(self, state: str, start: float) -> RunSummary:
        if self.dist.main:
            runs.clear_stop(self.run_dir)
        self._status(state)
        summary = self._summary(state, start)
        self._emit(state, self.iteration, summary.to_dict())
        return summary

    def _fail(self, err: BaseException) -> None:
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        self._status("failed", f"{type(err).__name__}: {message}")
        self._emit("failed", self.iteration, {"error": message, "type": type(err).__name__})
