"""`TrainConfig`, the settings of a fine-tuning run (named presets: `presets.py`).

Each field has a one-line docstring with its meaning, unit and source paper; `__post_init__` rejects
bad combinations with a message that says what to change, once, for the CLI, the app and the notebooks (the checks:
`config_checks.py`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import torch

from workbench.core.errors import WorkbenchError
from workbench.core.fields import check_types
from workbench.flow.schedule import mixgrpo_window
from workbench.flow.trajectory import SamplingConfig
from workbench.rl.advantages import ADVANTAGES, AdvantageSettings
from workbench.rl.chunking import schedule
from workbench.rl.objectives import OBJECTIVES, ObjectiveSettings
from workbench.train.config_checks import check_counts, check_options, check_prompts, check_ranges
from workbench.train.model_settings import is_real_model
from workbench.train.prompt_sets import read_prompt_file, real_prompts
from workbench.train.tasks import TASKS


@dataclass
class TrainConfig:
    """A fine-tuning run. Defaults: Chunk-GRPO on the embedded model, tuned to raise held-out adherence
    in 30 CPU iterations (see docs/tuning.md)."""

    objective: str = "chunk_grpo"
    """Policy objective from OBJECTIVES: step_grpo (Flow-GRPO), chunk_grpo (GCPO arXiv 2510.21583), gspo, gpg, ..."""
    chunks: str = "2,3,4,7"
    """Chunk sizes over the TRAINED steps, summing to their count (GCPO [2,3,4,7] of 16), or a chunker from CHUNKERS
    with its options ('temporal', 'uniform:size=4'; `chunking.schedule`); used by chunk_grpo."""
    reward: str | None = None
    """Reward names and weights, e.g. 'adherence:1,sharpness:0.5'; none given = the model's default: adherence for
    the embedded model's toy world, jpeg_compressibility for SD3 / FLUX (`rewards.default_reward`)."""
    clip_path: str | None = None
    """Local CLIP folder (CLIPModel and CLIPTokenizer `save_pretrained`) for the reward 'clip_score'."""
    pickscore_path: str | None = None
    """Local PickScore folder (a CLIP model, arXiv 2305.01569) for the reward 'pickscore'."""
    advantage: str = "grpo"
    """Advantage estimator from ADVANTAGES: grpo (Flow-GRPO), dr_grpo, gpg (arXiv 2504.02546), gfpo."""
    global_std: bool = False
    """grpo: divide by the std of all rewards of the iteration instead of each group's (Flow-GRPO SD3 configs)."""
    adv_eps: float = 1e-4
    """grpo / gfpo: std offset in A = (r - mean) / (std + eps) (Flow-GRPO 1e-4; GCPO's code 1e-8)."""
    adv_unbiased_std: bool = False
    """grpo: the sample std, / (G - 1) (GCPO's torch `std()`), instead of the population std (Flow-GRPO np.std)."""
    task: str | None = None
    """A named task (TASKS: crosses) that brings its training prompts, held-out prompts and success metric;
    None = the world's training scenes, evaluated on its held-out scenes."""
    prompts: list[str] | None = None
    """Training prompts; None = the task's or the world's training scenes (never the held-out ones); for SD3 /
    FLUX the shipped real prompt set (workbench/data/real_prompts.txt)."""
    prompt_file: str | None = None
    """Text file with one training prompt per line (blank lines and '#' comments skipped); excludes prompts."""
    eval_prompts: int = 16
    """Held-out scenes scored with the deterministic ODE for eval/reward_mean; 0 = no evaluation."""
    eval_cfg: bool = False
    """Also evaluate with the model's default classifier-free guidance (eval_cfg/*), beside the unguided ODE."""
    eval_every: int = 10
    """Evaluate every this many iterations (and before training, and at the last iteration)."""
    prompts_per_iteration: int = 4
    """N, prompts (groups) sampled per iteration."""
    group: int = 8
    """G, trajectories per prompt (GCPO 12, Flow-GRPO 24)."""
    steps: int = 16
    """T, transitions that carry a log-prob; sampling adds one last step that is not trained (train_last_step
    trains it too)."""
    noise_level: float = 0.7
    """SDE noise level a (Flow-GRPO 0.7; eta for dance_grpo, angle fraction for cps)."""
    sde: str = "flow_grpo"
    """SDE kind: flow_grpo (arXiv 2505.05470), dance_grpo, cps (arXiv 2509.05952). cps log-probs are the full
    Normal density; Flow-GRPO's CPS code drops the constants and the 1 / (2 std^2) factor, so clip ranges from
    its CPS configs (1e-5) do not carry over (docs/methods.md "SDE step")."""
    shift: float | None = None
    """Schedule shift; None = the model's default (3 for the embedded model, GCPO uses 3)."""
    schedule: str = "model"
    """Sigma grid: model (the model's own; SD3: diffusers', down to the shifted sigma_min) or linspace (GCPO:
    the shift applied to linspace(1, 0, T + 1))."""
    guidance_scale: float = 1.0
    """Classifier-free guidance during rollouts (Flow-GRPO SD3: 4.5; 1 = off, the default: it halves the cost)."""
    shared_noise: bool = True
    """One x_T per group (DanceGRPO, GCPO --init_same_noise)."""
    window: tuple[int, int] | None = None
    """SDE (and training) only on steps [start, end) of the T, ODE elsewhere (Flow-GRPO-Fast); none given = all
    T."""
    mixgrpo: bool = False
    """MixGRPO (arXiv 2507.21802): a 4-step SDE window that slides one step every 25 iterations."""
    train_last_step: bool = False
    """Sample T transitions and train all; False = T + 1 transitions, the last one untrained."""
    last_step_sde: bool = False
    """The untrained last of T + 1 transitions samples with the SDE like the others (Flow-GRPO: 10 SDE steps, 9
    trained; GCPO: 17 and 16); False = a deterministic Euler step (less noise left in the image)."""
    iterations: int = 30
    """Training iterations (rollout + update)."""
    lr: float = 3e-5
    """AdamW learning rate (GCPO 1e-5 full FT of FLUX; Flow-GRPO 3e-4 LoRA); tuned, see docs/tuning.md."""
    weight_decay: float = 1e-4
    """AdamW weight decay (Flow-GRPO 1e-4)."""
    inner_epochs: int = 1
    """Passes over each iteration's transitions (Flow-GRPO 1)."""
    minibatch: int | None = None
    """Transitions per optimizer step (whole trajectories: a multiple of the trained steps); None = one group;
    0 = every transition of the iteration in one step (GPG's one update per rollout)."""
    grad_accum: int = 1
    """Minibatches whose gradients are accumulated per optimizer step."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip (GCPO 0.01, Flow-GRPO 1.0)."""
    clip_low: float = 1e-3
    """PPO clip range eps below 1 (Flow-GRPO 1e-4, GCPO 5e-5); embedded-model ratios move ~2e-5, see docs/tuning.md."""
    clip_high: float | None = None
    """Clip range above 1; None = clip_low (DAPO clip-higher, GSPO 4e-4)."""
    kl_beta: float = 0.0
    """Weight of the closed-form KL to the initial model (Flow-GRPO 0.01-0.04; 0 in GCPO); see docs/tuning.md."""
    kl_form: str = "flow_grpo"
    """KL term's scale: flow_grpo (Flow-GRPO's released code, ||dmu||^2 / 2 sigma_t^2, what its betas are tuned
    for) or exact (the transition's exact Gaussian KL, ||dmu||^2 / 2 sigma_t^2 (-dt)); docs/methods.md."""
    noise_aware: bool = False
    """TempFlow-GRPO (arXiv 2508.04324) step weights proportional to the step std."""
    chunk_fraction: float | None = None
    """GCPO weighted chunk sampling: train int(fraction * K) chunks, drawn by L1_rel (paper 0.5); None = all."""
    chunk_weights: str = "l1_rel"
    """Weighted chunk sampling's probabilities: l1_rel (GCPO paper, its `--sample_weight`) or uniform (GCPO's
    released FLUX script, where `--sample_weight` is commented out)."""
    chunk_sampling: str = "trajectory"
    """Weighted chunk sampling per trajectory from its own L1_rel (GCPO's code) or once per iteration from the
    batch-mean curve ("iteration")."""
    dynamic_sampling: bool = False
    """DAPO (arXiv 2503.14476): replace groups with zero reward variance by sampling more rounds until the
    batch is full (at most max_sample_rounds); flat groups left in an unfilled batch do not train."""
    gpg_threshold: float = 0.5
    """GPG (arXiv 2504.02546; AMAP-ML/GPG code 0.5): with advantage 'gpg', sample more rounds while fewer than
    this fraction of the batch's groups have reward variance (at most max_sample_rounds)."""
    max_sample_rounds: int | None = None
    """Most rollout rounds per iteration when refilling; None = DAPO 10 (verl recipe max_num_gen_batches),
    GPG 20 (its code). Only with dynamic_sampling or advantage 'gpg'."""
    gfpo_metric: str | None = None
    """GFPO (arXiv 2508.09726): reward spec of the filter metric (higher kept); needs advantage='gfpo'."""
    gfpo_keep: int | None = None
    """GFPO: samples kept per group (paper 8 of 16); None = G // 2."""
    gae_gamma: float = 1.0
    """ppo: GAE discount (arXiv 1506.02438); 1 = undiscounted, every trajectory has the same T steps."""
    gae_lambda: float = 0.95
    """ppo: GAE lambda (PPO's 0.95); 1 = Monte-Carlo returns r_i - V(x_t), 0 = one-step TD errors."""
    critic_lr: float = 1e-3
    """ppo: Adam learning rate of the critic V_phi(x_t, t, prompt) (`rl/critic.py`)."""
    critic_epochs: int = 4
    """ppo: passes of the critic over each iteration's states, regressing on the GAE returns."""
    lookahead: str = "ode"
    """dense_grpo: look-ahead reward R_t per state, an estimator registered as one (`EstimatorInfo.lookahead`): ode
    (TP-GRPO, the ODE completion) or x0 (Stepwise-Flow-GRPO, the reward of the x0 prediction; no extra sampling)."""
    seed: int = 0
    """Seed of prompts, noise and minibatch order: everything derives from (seed, iteration)."""
    dtype: str = "auto"
    """float32 or bfloat16: SD3 / FLUX weights load in it and autocast computes in it; what trains (LoRA or all
    weights) stays float32 and is saved in float32, and log-probs are computed in float32. auto: bfloat16 for SD3 /
    FLUX, float32 for the embedded model (`dry_run.model_defaults`)."""
    device: str | None = None
    """cuda, mps or cpu; None = the best available."""
    threads: int | None = None
    """Torch CPU threads, fixed for the whole run and restored on resume: the count changes the order of a
    reduction's sums, so the same seed gives the same run only at the same count. None = torch's count when the run
    starts (this machine's cores, or OMP_NUM_THREADS), recorded as that number (`core.threads.run_threads`)."""
    model: str | None = None
    """Local model folder (SD3 / FLUX / embedded format); None = the shipped embedded model."""
    lora: str | None = None
    """A LoRA adapter folder (diffusers' pytorch_lora_weights.safetensors or PEFT's adapter_config.json +
    adapter_model.safetensors, as Flow-GRPO saves them) merged into the SD3 / FLUX model before training: the run
    fine-tunes model + adapter, which is also its KL reference; None = the model as it is."""
    lora_rank: int | str = "auto"
    """0 = full fine-tuning; > 0 = LoRA of this rank on the attention projections (Flow-GRPO r 32); auto: 32 for
    SD3 / FLUX, 0 (full fine-tuning) for the embedded model."""
    lora_alpha: float | None = None
    """LoRA alpha; None = 2 * rank (Flow-GRPO r 32 / alpha 64)."""
    report_to: str = "tensorboard"
    """Trackers that receive the run's metrics and sample grids: tensorboard, trackio, all or none (diffusers'
    --report-to); they write beside the run folder."""
    sample_every: int = 5
    """Save a grid of the rollout images every this many iterations (and at the first, the last and a stop)."""
    checkpoint_every: int = 10
    """Save weights + optimizer every this many iterations (always at the end and on stop)."""
    keep_checkpoints: int = 1
    """Checkpoints kept in the run folder, newest first: older iterations can be loaded and compared (the app's
    model picker, --model runs/<id>/checkpoints/iter_N); each holds the trained weights and the optimizer state."""
    # -- real models and memory (docs/methods.md "Memory estimate"; `workbench train --dry-run` prints the estimate)
    resolution: int | str | None = "auto"
    """Square image side in pixels for SD3 / FLUX (a multiple of VAE factor x patch, 16); auto: 512 (Flow-GRPO trains
    SD3.5-M at 512), or the model's own when that is smaller; None = the model's own (SD3.5 and FLUX.1: 1024). The
    embedded model makes 32 px only (auto)."""
    max_sequence_length: int | None = None
    """SD3 / FLUX: T5 tokens of each prompt; None = the model's default (SD3: 128, as Flow-GRPO trains it; FLUX:
    512, the pipeline's). Fewer tokens cost less memory and time; a longer prompt is cut there."""
    gradient_checkpointing: bool | None = None
    """Recompute the transformer's activations in the backward pass instead of keeping them (less memory, about
    one more forward of time); None = on for SD3 / FLUX, off for the embedded model."""
    micro_batch: int | str | None = "auto"
    """Transitions per forward/backward pass: a minibatch's gradient is accumulated over passes of this many
    transitions (the same gradient, one more forward without gradient; activation memory of micro_batch
    transitions, docs/methods.md "Micro-batches"); None = the whole minibatch in one pass; auto: SD3 / FLUX the
    largest that fits the device by the memory estimate, the embedded model the whole minibatch."""
    offload_text_encoders: bool | str = "auto"
    """SD3 / FLUX: keep the text encoders on the CPU and encode each prompt there once (embeddings cached, moved to
    the device when used): T5-XXL's 9.5 GB never occupy the device. auto: on only when the run fits the device with
    them off it and not on it (the memory estimate); off for the embedded model."""
    vae_tiling: bool = False
    """SD3 / FLUX: decode one image at a time (sliced), in tiles above the VAE's tile size (diffusers' tiling)."""
    fsdp: bool = False
    """Several processes (`accelerate launch`): shard the weights, gradients and AdamW state of a full fine-tune
    across them (FSDP2 through accelerate) instead of a full copy on each (DDP); for full fine-tunes that do not fit
    one GPU. Needs lora_rank 0 and CUDA GPUs."""

    def __post_init__(self):
        check_types(self)  # wrong types and non-finite numbers, from any source, name their field
        if isinstance(self.window, list):
            self.window = tuple(self.window)
        OBJECTIVES.get(self.objective)  # unknown names raise, listing the valid ones
        estimator = ADVANTAGES.get(self.advantage)
        check_counts(self)
        check_ranges(self)  # sizes before anything is built from them (a 10^12-step schedule)
        check_prompts(self)
        check_options(self)
        self.sampling_config(1)  # validates steps, window, noise level, sde
        flat = torch.zeros(1, self.group)  # a dummy group: the estimator itself refuses settings it does not use
        estimator(flat, self.advantage_settings(), flat)
        self.check_batches()

    def check_batches(self, world: int = 1) -> None:
        """Minibatches hold whole trajectories (chunk ratios need all steps); the groups split evenly over processes
        (each process trains its own trajectories of every minibatch, `train/update.py`)."""
        s = len(self.trained_steps(1))
        total = self.prompts_per_iteration * self.group * s  # transitions per iteration
        mb = self.minibatch_size
        if self.prompts_per_iteration % world:
            raise WorkbenchError(f"prompts_per_iteration ({self.prompts_per_iteration}) must be a multiple of "
                                 f"the number of processes ({world})")
        if mb % s or total % mb:
            raise WorkbenchError(f"minibatch ({mb} transitions) must be a multiple of the {s} trained steps "
                                 f"and divide the {total} transitions of an iteration")
        if (total // mb) % self.grad_accum:
            raise WorkbenchError(f"grad_accum ({self.grad_accum}) must divide the {total // mb} minibatches per "
                                 "iteration; change minibatch or grad_accum")

    @property
    def uses_chunks(self) -> bool:
        return OBJECTIVES.info(self.objective).needs_chunks or self.chunk_fraction is not None

    @property
    def refills(self) -> bool:
        """Whether iterations sample more rounds to replace zero-variance groups (DAPO, GPG)."""
        return self.dynamic_sampling or self.advantage == "gpg"

    @property
    def sample_rounds(self) -> int:
        """Most rollout rounds per iteration: 1 without refill; else max_sample_rounds, DAPO 10, GPG 20."""
        if not self.refills:
            return 1
        return self.max_sample_rounds or (10 if self.dynamic_sampling else 20)

    def refill_need(self, n: int) -> int:
        """Groups with reward variance a batch of n needs: all n (DAPO) or ceil(gpg_threshold * n), at least 1."""
        if self.dynamic_sampling or not self.refills:
            return n
        return max(1, math.ceil(self.gpg_threshold * n - 1e-9))

    @property
    def sampling_steps(self) -> int:
        return self.steps + (0 if self.train_last_step else 1)

    @property
    def minibatch_size(self) -> int:
        """Transitions per optimizer step; the default is one group: G x trained steps; 0 = all N x G x S."""
        if self.minibatch == 0:
            return self.prompts_per_iteration * self.group * len(self.trained_steps(1))
        return self.minibatch or self.group * len(self.trained_steps(1))

    def sde_window(self, iteration: int) -> tuple[int, int]:
        """[start, end) of the SDE (= trained) steps at this iteration (1-based)."""
        if self.mixgrpo:
            start, size = mixgrpo_window(iteration - 1, self.steps)
            return start, start + size
        return self.window or (0, self.sampling_steps if self.last_step_sde else self.steps)

    def trained_steps(self, iteration: int) -> list[int]:
        """Step indices trained at this iteration: the SDE window without zero-std steps (cps's last)."""
        start, end = self.sde_window(iteration)
        end = min(end, self.steps)  # last_step_sde: the extra SDE step is sampled, not trained
        steps = [t for t in range(start, end) if not (self.sde == "cps" and t == self.sampling_steps - 1)]
        if not steps:
            raise WorkbenchError("no step carries noise to train; widen the window or use more steps")
        return steps

    def sampling_config(self, iteration: int, seed: int = 0) -> SamplingConfig:
        return SamplingConfig(group=self.group, steps=self.sampling_steps, noise_level=self.noise_level,
                              sde=self.sde, shift=self.shift, window=self.sde_window(iteration),
                              guidance_scale=self.guidance_scale, shared_noise=self.shared_noise, seed=seed,
                              schedule=self.schedule)

    def advantage_settings(self) -> AdvantageSettings:
        """The advantage estimator's settings (an estimator refuses settings it does not use)."""
        return AdvantageSettings(eps=self.adv_eps, global_std=self.global_std, unbiased_std=self.adv_unbiased_std,
                                 gpg_threshold=self.gpg_threshold, gfpo_keep=self.gfpo_keep)

    def credit_chunks(self) -> list[int]:
        """Chunk sizes over all sampled steps, for measuring a rollout's credit: the SDE window's chunks, with the
        steps before and after the window as one untrained chunk each (crosses: [1,2,2,3] + [9] over 17 steps)."""
        start, end = self.sde_window(1)
        inner = schedule(self.chunks, end - start)
        return [s for s in (start, *inner, self.sampling_steps - end) if s > 0]

    def objective_settings(self) -> ObjectiveSettings:
        needs = OBJECTIVES.info(self.objective).needs_chunks
        chunks = schedule(self.chunks, len(self.trained_steps(1))) if needs else None
        return ObjectiveSettings(clip_low=self.clip_low, clip_high=self.clip_high, chunks=chunks,
                                 kl_beta=self.kl_beta)

    def prompt_pool(self) -> list[str]:
        if self.prompts is not None:
            return [p.strip() for p in self.prompts if p.strip()]
        if self.prompt_file is not None:
            return read_prompt_file(self.prompt_file)
        if self.task is not None:
            return TASKS.get(self.task)().train_prompts
        if is_real_model(self.model):
            return real_prompts()[0]
        from workbench.toyworld.world import split_scenes
        return [s.prompt() for s in split_scenes()[0]]

    def held_out_prompts(self) -> list[str]:
        """The first eval_prompts held-out prompts: the task's, or the world's held-out scenes."""
        if self.task is not None:
            return TASKS.get(self.task)().eval_prompts[:self.eval_prompts]
        if is_real_model(self.model):
            return real_prompts()[1][:self.eval_prompts]
        from workbench.toyworld.world import split_scenes
        return [s.prompt() for s in split_scenes()[1][:self.eval_prompts]]

    @property
    def checkpointing(self) -> bool:
        """Whether gradient checkpointing is on: the field, else on for SD3 / FLUX."""
        if self.gradient_checkpointing is not None:
            return self.gradient_checkpointing
        return is_real_model(self.model)

    def reward_spec(self, toy_world: bool) -> str:
        """The reward spec the run uses: `reward`, else the model's default (toy_world: the embedded model's)."""
        from workbench.rewards import default_reward

        return self.reward if self.reward is not None else default_reward(toy_world)

    def reward_folders(self) -> dict[str, str | None]:
        """The model folders of model-based rewards, keyed by the setting that names them (e.g. clip_path)."""
        from workbench.rewards import folder_args

        return {arg: getattr(self, arg) for arg in folder_args().values()}

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> TrainConfig:
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise WorkbenchError(f"unknown training settings {unknown}; valid: {', '.join(sorted(names))}")
        return cls(**data)
