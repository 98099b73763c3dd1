"""Short RL fine-tunes of a flow policy: the `Trainer` loop (settings: `config.py`, presets: `presets.py`).

One iteration (docs/methods.md, "SDE step" to "KL to the reference"): sample G SDE trajectories for each
of N prompts (Flow-GRPO) and score the final images (`rollout.py`; DAPO and GPG sample more rounds to
replace zero-variance groups), turn the (N, G) rewards into group-relative advantages, then re-score the
stored transitions with gradient (`sampler.transition`) and minimise the registered objective (step GRPO,
Chunk-GRPO / GCPO, GSPO, GPG, ...) with AdamW. Everything random derives from (seed, iteration), so a run
stopped and resumed equals a run straight through.

Before anything loads, the run's plan (`dry_run.plan_run`) resolves the settings the model and the device decide
('auto': LoRA r 32, bfloat16, 512 px, checkpointing, the micro-batch, text-encoder offload for SD3 / FLUX) and
refuses a run whose memory estimate cannot fit, naming the smallest change that would.

The trainer emits `TrainerEvent`s to a plain callback and writes the run store (`workbench.train.store`);
the app runs it as a subprocess and reads the store. Under `accelerate launch` / `torchrun` every
process samples the groups r::world of an iteration, the transformer is wrapped by accelerate (DDP, or FSDP),
every minibatch is the one-process minibatch shared by the processes (`update.py`), evaluation is split
between them, and only rank 0 writes. What trains (all weights or LoRA) is set up in `trainable.py`."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch

from workbench.core.budget import check_fits, rollout_bytes
from workbench.core.errors import NonFiniteError, WorkbenchError
from workbench.core.files import clean_json
from workbench.core.imaging import grid
from workbench.core.threads import run_threads
from workbench.flow.dynamics import relative_change
from workbench.flow.policy import FlowPolicy
from workbench.flow.trajectory import SamplingConfig, TrajectoryGroup
from workbench.models.lora import lora_file
from workbench.rl.advantages import ADVANTAGES
from workbench.rl.chunking import sample_chunks, schedule, step_mask_from_chunks
from workbench.rl.objectives import OBJECTIVES, noise_aware_weights
from workbench.train.config import TrainConfig
from workbench.train.distributed import Prepared, init_distributed
from workbench.train.dry_run import plan_run
from workbench.train.evaluation import evaluate
from workbench.train.events import RunSummary, TrainerEvent
from workbench.train.lock import lock_run_folder
from workbench.train.model_settings import model_defaults
from workbench.train.rollout import RolloutSampler
from workbench.train.step_credit import make_step_credit
from workbench.train.store import CONFIG, Checkpoint, RunStore
from workbench.train.tasks import TASKS
from workbench.train.trackers import make_trackers
from workbench.train.trainable import (
    add_lora,
    apply_memory_switches,
    copy_weights,
    enable_checkpointing,
    load_base_policy,
    reference_policy,
    trainable_weights,
)
from workbench.train.update import Stored, Updater, diverged, seed_of


# ------------------------------------------------------------------------------------ the loop
class Trainer:
    """Fine-tunes `policy` (default: config.model) with `config` and emits `TrainerEvent`s.

    Subscribers receive every event (on the main process): the `RunStore` of `run_dir` (given as a path or
    a store; None = no folder, e.g. for benchmarks), the trackers the config reports to, `subscribers`, and
    the callback given to `run`. The trainer itself writes no file.

        trainer = Trainer(TrainConfig(iterations=5), RunStore.create())
        summary = trainer.run(callback=lambda event: print(event.kind, event.iteration))
    """

    def __init__(self, config: TrainConfig, run_dir: str | Path | RunStore | None = None,
                 policy: FlowPolicy | None = None, resume: bool = False, subscribers=()):
        self.config = config = replace(config, threads=run_threads(config.threads))  # fixed and recorded
        self.store = run_dir if isinstance(run_dir, RunStore) or run_dir is None else RunStore(run_dir)
        self.dist = init_distributed(config.fsdp)
        config.check_batches(self.dist.world)
        self.stored_config = model_defaults(config)  # what the run folder keeps: the device's choices stay 'auto'
        self.plan = self._plan(config)
        self.config = config = self.plan.config  # every setting resolved
        self._lock = lock_run_folder(self.store, not resume) if self.dist.main and self.store is not None else None
        try:
            self._setup(config, policy, resume, subscribers)
        except BaseException:
            self.release()
            raise

    def _plan(self, config: TrainConfig):
        """The run's plan on this process's device (the least free memory of all processes), refused when it
        cannot fit; FSDP's conditions checked."""
        from workbench.core.budget import free_bytes
        from workbench.models.adapters import default_device

        if config.fsdp and (self.dist.world == 1 or not torch.cuda.is_available()):
            raise WorkbenchError("fsdp shards a full fine-tune across GPU processes (accelerate's FSDP runs on CUDA "
                                 "only): launch with `accelerate launch --num_processes N` on N GPUs, or drop fsdp")
        device = config.device or default_device()
        if device == "cuda" and self.dist.world > 1:
            device = f"cuda:{self.dist.local_rank}"
        free = [f for f in self.dist.gather(free_bytes(device)) if f is not None]
        plan = plan_run(config, device, self.dist.world, min(free) if free else None)
        plan.check()
        return plan

    def _setup(self, config: TrainConfig, policy: FlowPolicy | None, resume: bool, subscribers) -> None:
        checkpoint = self._checkpoint_to_resume() if resume else None
        self.policy = policy or load_base_policy(config, self.dist)
        self._check_memory()
        self.reference = reference_policy(self.policy, False) if config.kl_beta > 0 and not config.lora_rank else None
        if config.lora_rank:  # every process draws the same initial adapters (DDP also broadcasts rank 0's)
            add_lora(self.policy.transformer, config.lora_rank, config.lora_alpha, seed=seed_of(config.seed, 11))
            self.reference = reference_policy(self.policy, True) if config.kl_beta > 0 else None
        else:  # full fine-tuning trains float32 weights; bfloat16 is autocast's compute dtype (config.dtype)
            self.policy.transformer.float().requires_grad_(True)
        if config.checkpointing:
            enable_checkpointing(self.policy.transformer)
        apply_memory_switches(self.policy, config)
        if checkpoint is not None:  # the full weights, before FSDP shards them
            self._restore_weights(checkpoint)
        self.model = self.dist.prepare(self.policy.transformer)  # DDP / FSDP around the transformer
        self.train_policy = (self.policy if self.model is self.policy.transformer
                             else self.policy.with_transformer(Prepared(self.model, self.policy.transformer)))
        if config.fsdp and self.reference is not None:  # the KL's frozen copy sharded as well
            self.reference = self.reference.with_transformer(self.dist.prepare(self.reference.transformer))
        self.params = trainable_weights(self.policy.transformer)
        self.optimizer = torch.optim.AdamW(list(self.params.values()), lr=config.lr,
                                           weight_decay=config.weight_decay)
        self._setup_data()
        self.iteration, self.history, self.last_groups, self.resumed_from = 0, [], [], None
        self._stop, self._saved, self._callback = False, -1, None
        self.updater = Updater(self)
        if checkpoint is not None:
            self._restore(checkpoint)
        self.subscribers = [*([self.store] if self.store else []), *make_trackers(config, self.store),
                            *subscribers] if self.dist.main else []

    @classmethod
    def resume(cls, run_dir: str | Path | RunStore, policy: FlowPolicy | None = None, iterations: int | None = None,
               subscribers=()) -> Trainer:
        """Continue the run in run_dir from its newest complete checkpoint (optionally to a new iteration count)."""
        store = run_dir if isinstance(run_dir, RunStore) else RunStore.open(run_dir)
        try:
            config = TrainConfig.from_dict(store.config())
        except (TypeError, WorkbenchError) as err:
            raise WorkbenchError(f"cannot resume {store.path}: its {CONFIG} is not a valid training config "
                                 f"({str(err).splitlines()[0][:200]})") from None
        return cls(replace(config, iterations=iterations or config.iterations), store, policy, resume=True,
                   subscribers=subscribers)

    def release(self) -> None:
        """Give up the run folder's lock (the run ended, or the trainer is dropped without running)."""
        if self._lock is not None:
            self._lock.release()

    def _checkpoint_to_resume(self) -> Checkpoint:
        """The newest complete checkpoint of the store; a run without one cannot resume (never starts over)."""
        checkpoint, why = self.store.newest_checkpoint() if self.store is not None else (None, "")
        if checkpoint is None:
            why = why.replace(f"{getattr(self.store, 'path', '')}/", "")  # the run's path is said once
            found = ", ".join(p.name for p in self.store.checkpoints()) if self.store else ""
            raise WorkbenchError(f"{getattr(self.store, 'path', 'the run')} has no complete checkpoint to resume from"
                                 f"{f' ({found} are incomplete: {why})' if found else ''}; start a fresh run with a "
                                 "new --out (its metrics stay where they are)")
        return checkpoint

    def _check_memory(self) -> None:
        """Refuse an iteration whose stored rollouts cannot fit on the device (`core.budget`), before any work:
        each process keeps its groups' states, predictions and means as lists, stacked, and on the device."""
        cfg = self.config
        local = -(-cfg.prompts_per_iteration // self.dist.world)  # groups per process
        needed = rollout_bytes(cfg.group, cfg.sampling_steps, self.policy.latent_shape, prompts=local, copies=3)
        check_fits(needed, self.policy.device, f"an iteration of {local} group(s) of G={cfg.group} x T={cfg.steps}",
                   "lower group, steps or prompts_per_iteration")

    def request_stop(self) -> None:
        """Stop after the current iteration with a checkpoint and state 'stopped'."""
        self._stop = True

    def _setup_data(self) -> None:
        from workbench.rewards import build_reward

        cfg = self.config
        folders = cfg.reward_folders()
        self.reward_fn = build_reward(cfg.reward_spec(self.policy.toy_world), **folders)
        self.metric_fn = build_reward(cfg.gfpo_metric, **folders) if cfg.gfpo_metric else None
        self.settings = cfg.objective_settings()
        self.objective = OBJECTIVES.get(cfg.objective)
        self.estimator, self.advantage_settings = ADVANTAGES.get(cfg.advantage), cfg.advantage_settings()
        self.pool = cfg.prompt_pool()
        for prompt in self.pool:
            self.policy.check_prompt(prompt)
        self.eval_prompts = cfg.held_out_prompts()
        for fn in (self.reward_fn, self.metric_fn):  # before any sampling: a reward that cannot score these images
            if fn is not None:
                fn.check_images(self.policy.image_size, self.pool + self.eval_prompts, self.policy.toy_world)
        self.task = TASKS.get(cfg.task)() if cfg.task else None
        self.step_credit = make_step_credit(cfg, self.policy, self.reward_fn, self.dist.world)  # ppo, dense_grpo
        self.sampler = RolloutSampler(self.policy, cfg, self.pool, self.reward_fn, self.metric_fn, self.dist,
                                      self.autocast)

    def _restore_weights(self, checkpoint: Checkpoint) -> None:
        try:
            copy_weights(self.policy.transformer, checkpoint.weights)
        except WorkbenchError as err:  # the run's folder said once, with the first name that does not fit
            raise WorkbenchError(f"checkpoint {checkpoint.folder} does not fit this model ({err})") from None

    def _restore(self, checkpoint: Checkpoint) -> None:
        """Optimizer state, critic and the metrics history up to the checkpoint's iteration (weights: above)."""
        try:
            self.dist.load_optimizer_state(self.model, self.params, self.optimizer, checkpoint.optimizer_state)
        except (ValueError, KeyError, RuntimeError, TypeError, IndexError, AttributeError) as err:
            raise WorkbenchError(f"checkpoint {checkpoint.folder} does not fit this model and optimizer "
                                 f"({str(err).splitlines()[0][:160]})") from None
        if self.step_credit is not None:
            self.step_credit.load_state_dict(checkpoint.critic)
        self.iteration = self._saved = self.resumed_from = checkpoint.iteration
        if self.dist.main:
            self.history = [r for r in self.store.metrics() if r["iteration"] <= checkpoint.iteration]

    def autocast(self):
        return torch.autocast(self.policy.device.type, dtype=torch.bfloat16, enabled=self.config.dtype == "bfloat16")

    # -------------------------------------------------------------------------------- run
    def run(self, callback: Callable[[TrainerEvent], None] | None = None) -> RunSummary:
        """Train until config.iterations or a stop request; returns the summary (re-raises on failure)."""
        cfg, start, state = self.config, time.time(), "finished"
        self._callback = callback
        try:
            self._emit("started", self.iteration, {"config": self.stored_config.to_dict(),
                                                   "resumed_from": self.resumed_from, "plan": self.plan.text()})
            if cfg.eval_prompts and not any(r.get("iteration") == 0 for r in self.history):
                self._log(0, self._evaluate(0))
            while self.iteration < cfg.iterations:
                it, t0 = self.iteration + 1, time.perf_counter()
                # 1-2. rollout and rewards: G SDE trajectories for this process's prompts (groups r::world),
                #      scored and gathered, (N, G); DAPO and GPG sample more rounds to replace flat groups
                scfg = cfg.sampling_config(it)
                batch = self._collect(it, scfg)
                t1 = time.perf_counter()
                # 3. group-relative advantages (N, G); with dynamic sampling flat groups do not train
                adv = self.estimator(batch.rewards, self.advantage_settings, batch.metric)
                keep = ~batch.flat if cfg.dynamic_sampling else torch.ones(len(batch.flat), dtype=torch.bool)  # (N,)
                mine = slice(self.dist.rank, None, self.dist.world)
                t2 = time.perf_counter()
                # 4. inner updates over minibatches of the stored transitions
                stored, per_step = self._store(it, batch.groups, scfg, adv.values[mine], keep[mine]), {}
                if self.step_credit is not None:  # per-step advantages (L * G, S): ppo's critic, dense look-ahead
                    stored.advantages, per_step = self.step_credit(it, batch.groups, batch.rewards[mine], stored.steps)
                update = self.updater.run(it, stored) | per_step
                t3 = time.perf_counter()
                # 5. metrics (reward/* over every sampled group, adv/* over the batch), events, checkpoint
                metrics = batch.metrics() | adv.stats() | update | {
                    "rollout/kept_groups": float(keep.sum()), "sde/window_start": float(cfg.sde_window(it)[0]),
                    "time/reward_s": batch.seconds[1] + t2 - t1, "time/update_s": t3 - t2,
                    "time/iteration_s": time.perf_counter() - t0}
                self.iteration, self.last_groups = it, batch.groups
                if cfg.eval_prompts and (it % cfg.eval_every == 0 or it == cfg.iterations):
                    metrics |= self._evaluate(it)
                self._log(it, metrics)
                stop = self._stop_requested()
                if it == 1 or it % cfg.sample_every == 0 or it == cfg.iterations or stop:  # the app shows the newest
                    self._save_samples(it, batch.groups)
                if it % cfg.checkpoint_every == 0 or it == cfg.iterations or stop:
                    self._checkpoint()
                if stop:
                    state = "stopped"
                    break
        except BaseException as err:
            self._fail(err)
            self.release()
            raise
        summary = self._finish(state, start)
        self.release()
        return summary

    # -------------------------------------------------------------------------------- stages
    def _store(self, it: int, groups: list[TrajectoryGroup], scfg: SamplingConfig, adv: torch.Tensor,
               keep: torch.Tensor) -> Stored:
        """This process's transitions of the iteration, on the device, with their masks and constants."""
        dev, g = self.policy.device, self.config.group
        steps = torch.tensor(self.config.trained_steps(it), device=dev)  # (S,)
        stds = groups[0].stds[0, steps.cpu()]  # (S,) the same for every trajectory
        return Stored(
            states=torch.cat([grp.states for grp in groups]).to(dev),  # (L, T + 1, C, H, W)
            old_log_prob=torch.cat([grp.log_probs for grp in groups]).to(dev)[:, steps],  # (L, S)
            advantages=adv.reshape(-1).to(dev), rows=keep.repeat_interleave(g).to(dev),  # (L,)
            cond=self.policy.encode([grp.prompt for grp in groups], cfg=scfg.guidance_scale != 1.0).repeat(g),
            step_mask=self._chunk_mask(it, groups, steps.cpu()).to(dev),
            step_weights=noise_aware_weights(stds).to(dev) if self.config.noise_aware else None,
            steps=steps, sigmas=groups[0].sigmas.to(dev), config=scfg)

    def _chunk_mask(self, it: int, groups: list[TrajectoryGroup], steps: torch.Tensor) -> torch.Tensor:
        """(L, S) bool: every step, or GCPO's weighted sample of chunks (docs/methods.md "Weighted chunk sampling").

        Per trajectory (GCPO's code): each draws from its own L1_rel curve with a generator seeded by
        (seed, iteration, global trajectory index), so the draws do not depend on the number of processes.
        Per iteration: one draw from the mean curve of every trajectory of the iteration, for all.
        """
        cfg, g = self.config, self.config.group
        if cfg.chunk_fraction is None:
            return torch.ones(len(groups) * g, len(steps), dtype=torch.bool)
        l1 = torch.cat([relative_change(grp.states) for grp in groups])[:, steps]  # (L, S)
        if cfg.chunk_weights == "uniform":  # GCPO's released script: every chunk equally likely
            l1 = torch.ones_like(l1)
        sizes = schedule(cfg.chunks, len(steps))
        if cfg.chunk_sampling == "iteration":
            parts = self.dist.gather((l1.sum(0), l1.shape[0]))
            curve = sum(p[0] for p in parts) / sum(p[1] for p in parts)  # (S,)
            gen = torch.Generator().manual_seed(seed_of(cfg.seed, it, 1))
            return step_mask_from_chunks(sizes, sample_chunks(sizes, curve, cfg.chunk_fraction, gen)).expand_as(l1)
        rows = []
        for row, curve in enumerate(l1):  # local trajectory row = local group i * G + j
            i, j = divmod(row, g)
            index = (i * self.dist.world + self.dist.rank) * g + j  # its index in the iteration's global order
            gen = torch.Generator().manual_seed(seed_of(cfg.seed, it, 1, index))
            rows.append(step_mask_from_chunks(sizes, sample_chunks(sizes, curve, cfg.chunk_fraction, gen)))
        return torch.stack(rows)  # (L, S)

    def _collect(self, it: int, scfg: SamplingConfig):
        """The rollout of iteration `it`; NaN images after this run's updates are the learning rate's doing."""
        try:
            return self.sampler.collect(it, scfg)
        except NonFiniteError as err:
            if it <= (self.resumed_from or 0) + 1:
                raise
            raise diverged(it, self.config.lr, "made the policy sample NaN or inf images") from err

    # -------------------------------------------------------------------------------- evaluation, store, events
    def _evaluate(self, it: int) -> dict[str, float]:
        """Held-out metrics (`evaluation.evaluate`, the prompts split between the processes); emits the
        before/after grid as 'eval_samples'."""
        if not self.eval_prompts:
            return {}
        cfg = self.config
        scales = {"eval": cfg.guidance_scale} | ({"eval_cfg": self.policy.default_guidance} if cfg.eval_cfg else {})
        with self.autocast():
            result = evaluate(self.policy, self.eval_prompts, self.reward_fn, self.task, scales, cfg.sampling_steps,
                              cfg.shift, self.dist)
        self._emit("eval_samples", it, {"prompts": result.grid_prompts, "guidance": list(scales.values()),
                                        "grid": result.grid})
        return result.metrics

    def _log(self, it: int, metrics: dict[str, float]) -> None:
        """The one logging function: the history and the 'iteration' event (the store appends metrics.jsonl)."""
        record = clean_json({"iteration": it, **metrics})
        self.history.append(record)
        self._emit("iteration", it, record)

    def _emit(self, kind: str, iteration: int, data: dict) -> None:
        if not self.dist.main:
            return
        event = TrainerEvent(kind, iteration, data)
        for subscriber in self.subscribers + ([self._callback] if self._callback else []):
            subscriber(event)

    def _save_samples(self, it: int, groups: list[TrajectoryGroup]) -> None:
        if self.dist.main:
            image = grid(torch.cat([g.images for g in groups]), ncol=self.config.group)
            self._emit("samples", it, {"prompts": [g.prompt for g in groups], "grid": image})

    def _stop_requested(self) -> bool:
        flag = self._stop or (self.dist.main and self.store is not None and self.store.stop_requested())
        return bool(self.dist.broadcast(flag))

    def _checkpoint(self) -> None:
        """The trained weights and optimizer state as one process holds them (gathered from FSDP's shards: every
        process calls this), written by rank 0; any number of processes resumes from them."""
        if self._saved != self.iteration:
            self._saved = self.iteration
            weights, optimizer = self.dist.full_state(self.model, self.params, self.optimizer)
            lora = lora_file(self.policy) if self.config.lora_rank and self.dist.main else None  # models/lora.py
            self._emit("checkpoint", self.iteration, {"weights": weights, "optimizer": optimizer,
                                                      "critic": self.step_credit and self.step_credit.state_dict(),
                                                      "keep": self.config.keep_checkpoints, "lora": lora})

    def _summary(self, state: str, start: float) -> RunSummary:
        def values(key: str) -> list[float]:
            return [r[key] for r in self.history if r.get(key) is not None]

        rewards, evals = values("reward/mean"), values("eval/reward_mean")
        first_eval = next((r.get("eval/reward_mean") for r in self.history if r.get("iteration") == 0), None)
        path = str(self.store.path) if self.store is not None else None
        return RunSummary(path, state, self.iteration, rewards[0] if rewards else None,
                          rewards[-1] if rewards else None, first_eval, evals[-1] if evals else None,
                          time.time() - start)

    def _finish(self, state: str, start: float) -> RunSummary:
        summary = self._summary(state, start)
        self._emit(state, self.iteration, summary.to_dict())
        return summary

    def _fail(self, err: BaseException) -> None:
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        self._emit("failed", self.iteration, {"error": message, "type": type(err).__name__})
