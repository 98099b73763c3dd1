"""Short RL fine-tunes of a flow policy: the `Trainer` loop (settings and presets: `train_config.py`).

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
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from workbench.advantages import ADVANTAGES, dynamic_sampling_mask
from workbench.chunking import parse_chunk_spec, sample_chunks, step_mask_from_chunks
from workbench.dynamics import relative_change
from workbench.errors import WorkbenchError
from workbench.objectives import OBJECTIVES, PolicyInputs, gaussian_kl, noise_aware_weights
from workbench.policy import Conditioning, FlowPolicy
from workbench import runs
from workbench.sampler import ode_sample, sample_groups, transition
from workbench.train_config import PRESETS, TrainConfig, preset  # noqa: F401 (PRESETS, preset re-exported)
from workbench.trajectory import SamplingConfig, TrajectoryGroup

EVAL_SEED = 1234  # fixed noise for the held-out ODE evaluation, the same for every run and seed
# attention projections of diffusers' attention blocks (SD3 / FLUX MMDiT, UNet attn1 / attn2), matched by name suffix
LORA_TARGETS = ["to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out"]
EVENT_KINDS = ("iteration", "samples", "checkpoint", "finished", "stopped", "failed")

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
