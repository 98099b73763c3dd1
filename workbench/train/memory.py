"""The memory a fine-tune needs, estimated before it starts (docs/methods.md "Memory estimate of a fine-tune").

A pure function of sizes: `estimate_memory(ModelSizes, RunSizes)` -> `MemoryEstimate`, the bytes of each part
that is on the device at the peak of an iteration. `model_sizes` reads them from a model's configs (on the meta
device: no weights load), so `workbench train --dry-run`, the app's Fine-tune tab and the README table
(`scripts/memory_table.py`) say whether a run fits before it loads anything. The activation constants are
calibrated on CPU (`scripts/calibrate_memory.py`; the test checks 25 %) and are estimates on a GPU until measured
there (`scripts/gpu_smoke.py`).

    estimate_memory(ARCH_SIZES("sd3.5-medium", 512), RunSizes(group=24, steps=10, lora_rank=32, ...)).total
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from workbench.core.budget import check_counts, human_bytes

# activations kept for backward, in units of one residual-stream tensor (transitions x tokens x width x bytes);
# calibrated on CPU in float32 (scripts/calibrate_memory.py, docs/methods.md "Memory estimate")
ACT_PER_BLOCK = 27.0  # per transformer block without checkpointing (measured 24-37 on the embedded model and SD3s)
CHECKPOINT_PER_BLOCK = 7.3  # per block with checkpointing (the blocks' saved inputs and backward buffers)
CHECKPOINT_FIXED = 24.0  # with checkpointing, once: the block being recomputed and what lies outside the blocks
RUNTIME_BYTES = {"cpu": 85e6, "cuda": 600e6}  # the framework's own: CPU measured; a CUDA context, estimated
ZERO_MEANS_NONE = ("lora_params_per_rank", "text_encoder_bytes", "vae_params", "vae_decode_channels", "lora_rank",
                   "reward_params", "buffer_elements")  # sizes that may be 0; every other one must be positive
REWARD_MODEL_PARAMS = {"clip_score": 428_000_000, "pickscore": 986_000_000}  # CLIP ViT-L/14, PickScore ViT-H/14
# the allocator's reserve over the bytes the parts allocate, as a fraction of them: PyTorch's CUDA caching allocator
# keeps freed blocks (reserved > allocated), an assumption until scripts/gpu_smoke.py measures it; on the CPU the
# calibrated constants already hold glibc's heap (they are fitted to the resident set)
RESERVE_MARGIN = {"cpu": 0.0, "cuda": 0.10}


@dataclass(frozen=True)
class ModelSizes:
    """What the estimate needs of a model."""

    transformer_params: int  # all parameters of the denoiser
    blocks: int  # transformer blocks (FLUX: double + single stream)
    width: int  # heads x head_dim
    tokens: int  # image + text tokens per transition at the run's resolution
    latent_elements: int  # C x H x W of one latent
    image_pixels: int  # H x W of one decoded image
    lora_params_per_rank: int  # trainable parameters of LoRA rank 1 on the workbench's targets
    text_encoder_bytes: int = 0  # the text encoders' weights as loaded
    vae_params: int = 0  # 0 = a pixel-space model (no VAE)
    vae_decode_channels: int = 0  # channels live at full resolution at the decoder's peak (SD3 / FLUX VAE: 512)
    buffer_elements: int = 0  # non-parameter buffers of the denoiser (SD3.5-M's pos_embed: 226 M), in the load dtype

    def __post_init__(self):
        sizes = {f.name: getattr(self, f.name) for f in fields(self)}
        check_counts("the model's sizes", sizes, {k: sizes.pop(k) for k in ZERO_MEANS_NONE if k in sizes})


@dataclass(frozen=True)
class RunSizes:
    """What the estimate needs of a run (TrainConfig's sizes, `run_sizes`)."""

    group: int
    sampling_steps: int  # T + 1 unless train_last_step
    trained_steps: int  # S
    prompts: int  # groups per iteration on this process
    transitions_per_pass: int  # transitions in one forward/backward (micro_batch, else the minibatch)
    lora_rank: int  # 0 = full fine-tuning
    weight_bytes: int = 4  # 2 for bfloat16 weights (SD3 / FLUX loaded in bfloat16)
    compute_bytes: int = 4  # 2 under bfloat16 autocast
    checkpointing: bool = False
    kl: bool = False  # a KL reference (full fine-tuning: a copy of the transformer)
    text_encoders_on_device: bool = True
    decode_batch: int = 4  # images per VAE decode (1 with vae_tiling)
    cfg: bool = False  # classifier-free guidance in training rollouts: two rows (cond, uncond) per transition
    reward_params: int = 0  # parameters of model-based rewards (float32)
    device: str = "cuda"
    world: int = 1  # processes (GPUs) of the run; `prompts` is already this process's share
    fsdp: bool = False  # full fine-tuning's weights, gradients and AdamW state sharded over the `world` processes

    def __post_init__(self):
        sizes = {f.name: getattr(self, f.name) for f in fields(self) if f.type == "int"}
        check_counts("the run's sizes", sizes, {k: sizes.pop(k) for k in ZERO_MEANS_NONE if k in sizes})


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes of each part held at the peak of a training iteration; `total` is their sum."""

    weights: float  # the transformer (+ a frozen copy for the KL of full fine-tuning)
    buffers: float  # the transformer's non-parameter buffers (positional tables)
    trainable: float  # trained weights' float32 gradients and AdamW's two moments (+ LoRA weights)
    activations: float  # kept for backward, one pass of transitions
    rollout: float  # stored states, predictions, means, images of the iteration
    vae: float  # VAE weights + the decode's peak activations
    text_encoders: float
    rewards: float
    runtime: float
    reserve: float  # the allocator's reserve over what the parts allocate: a margin, RESERVE_MARGIN of their sum

    @property
    def total(self) -> float:
        return sum(getattr(self, f.name) for f in fields(self))

    @property
    def allocated(self) -> float:
        """The parts without the allocator's reserve: what torch.cuda.max_memory_allocated should show."""
        return self.total - self.reserve

    def table(self) -> str:
        """One line per part and the total, in GB."""
        rows = [f"  {f.name:14s} {human_bytes(getattr(self, f.name)):>10s}" for f in fields(self)]
        return "\n".join([*rows, f"  {'total':14s} {human_bytes(self.total):>10s}"])


def activation_bytes(model: ModelSizes, transitions: int, compute_bytes: int, checkpointing: bool) -> float:
    """Activations kept for backward, u = transitions x tokens x width x bytes (one residual-stream tensor):
    27 u B without checkpointing, (7.3 B + 24) u with it, for B blocks (constants calibrated on CPU)."""
    unit = transitions * model.tokens * model.width * compute_bytes
    if not checkpointing:
        return ACT_PER_BLOCK * model.blocks * unit
    return (CHECKPOINT_PER_BLOCK * model.blocks + CHECKPOINT_FIXED) * unit


def estimate_memory(model: ModelSizes, run: RunSizes) -> MemoryEstimate:
    """The device memory of one training iteration on one process, part by part (docs/methods.md "Memory
    estimate")."""
    p = model.transformer_params
    trained = model.lora_params_per_rank * run.lora_rank if run.lora_rank else p
    shards = run.world if run.fsdp and not run.lora_rank else 1  # FSDP: each process holds 1 / world of these
    weights = p * (run.weight_bytes if run.lora_rank else 4) / shards  # full fine-tuning keeps float32 weights
    if run.kl and not run.lora_rank:
        weights += p * run.weight_bytes / shards  # the frozen reference copy (LoRA: the adapters switched off instead)
    trainable = trained * 4 * (3 + (1 if run.lora_rank else 0)) / shards  # grad + 2 AdamW moments (+ LoRA weights)
    trajectories = run.prompts * run.group
    rollout = 4 * trajectories * ((3 * run.sampling_steps + 1) * model.latent_elements * 3
                                  + 3 * model.image_pixels)  # core.budget.rollout_bytes(copies=3) + images
    decode_batch = min(run.decode_batch, trajectories)
    decode = decode_batch * model.vae_decode_channels * model.image_pixels * run.compute_bytes
    vae = model.vae_params * run.weight_bytes + decode if model.vae_params else 0
    device = "cpu" if run.device == "cpu" else "cuda"
    parts = dict(
        weights=float(weights), buffers=float(model.buffer_elements * run.weight_bytes), trainable=float(trainable),
        activations=activation_bytes(model, run.transitions_per_pass * (2 if run.cfg else 1), run.compute_bytes,
                                     run.checkpointing),
        rollout=float(rollout), vae=float(vae),
        text_encoders=float(model.text_encoder_bytes if run.text_encoders_on_device else 0),
        rewards=float(run.reward_params * 4), runtime=RUNTIME_BYTES[device])
    return MemoryEstimate(**parts, reserve=RESERVE_MARGIN[device] * sum(parts.values()))


def verdict(estimate: MemoryEstimate, free: int | None, device: str) -> str:
    """'fits' / 'does not fit' line for the estimate against the device's free memory (None = unknown)."""
    need = human_bytes(estimate.total)
    if free is None:
        return f"needs about {need}; the free memory of the {device} is unknown"
    if estimate.total <= free:
        return f"fits: needs about {need} of the {human_bytes(free)} free on the {device}"
    return (f"does not fit: needs about {need} but the {device} has {human_bytes(free)} free; use LoRA, "
            "--gradient-checkpointing, a smaller --micro-batch or --resolution, or bfloat16")
