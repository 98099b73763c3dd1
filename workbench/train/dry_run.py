"""The plan of a fine-tune, made before anything loads: every setting resolved, the memory estimate of one iteration
on one process and its verdict against the device (`workbench train --dry-run` prints it; every run checks it first
and is refused, with the smallest change that would fit, when it cannot fit).

`plan_run(config, device, world, free)` resolves the model's defaults (`model_settings.model_defaults`) and then the
two the device decides: the micro-batch (the largest number of transitions per forward/backward that fits, by the
estimate) and whether the text encoders leave the device (only when that is what makes the run fit). The sizes come
from the model's configs (`model_sizes.py`), the estimate from `memory.estimate_memory`. `estimate_run` is the
app's shorter form: (estimate, verdict line).

    plan = plan_run(TrainConfig(model="meta:flux.1-dev"), "cuda", free=80e9)
    print(plan.text())      # the resolved settings, the estimate part by part, "fits: needs about 61.3 GB ..."
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from workbench.core.budget import human_bytes
from workbench.core.errors import WorkbenchError
from workbench.models.config_checks import check_model_folder
from workbench.train.config import TrainConfig
from workbench.train.memory import MemoryEstimate, ModelSizes, RunSizes, estimate_memory
from workbench.train.model_settings import AUTO, REAL_LORA_RANK, auto_settings, is_real_model, model_defaults
from workbench.train.model_sizes import (  # noqa: F401 - the sizes' readers, also imported from here
    architecture_sizes,
    embedded_sizes,
    folder_sizes,
    model_sizes,
    run_sizes,
)

SHOWN = ("lora_rank", "dtype", "resolution", "gradient_checkpointing", "micro_batch", "offload_text_encoders",
         "vae_tiling", "fsdp")  # the settings a plan prints, resolved


@dataclass
class RunPlan:
    """A run's resolved settings and its memory estimate on one of `world` processes against `free` bytes."""

    config: TrainConfig  # every 'auto' resolved
    estimate: MemoryEstimate
    device: str
    world: int
    free: int | None  # bytes free on the device; None = unknown
    auto: list[str] = field(default_factory=list)  # the settings that were 'auto'
    fix: str | None = None  # the smallest change that fits, when the run does not
    sizes: tuple[ModelSizes, RunSizes] | None = None  # what the estimate was computed from

    @property
    def fits(self) -> bool | None:
        return None if self.free is None else self.estimate.total <= self.free

    @property
    def verdict(self) -> str:
        need = human_bytes(self.estimate.total)
        if self.free is None:
            return f"needs about {need}; the free memory of the {self.device} is unknown"
        if self.fits:
            return f"fits: needs about {need} of the {human_bytes(self.free)} free on the {self.device}"
        return (f"does not fit: needs about {need} but the {self.device} has {human_bytes(self.free)} free; "
                + (f"the smallest change that fits: {self.fix}" if self.fix else
                   "none of the settings the plan tries (docs/methods.md) makes it fit: a GPU with more memory, "
                   "or a smaller group"))

    def check(self) -> None:
        """Refuse a run that cannot fit, before it loads (the message names the smallest change that fits)."""
        if self.fits is False:
            raise WorkbenchError(f"this run {self.verdict} (workbench train --dry-run prints the plan)")

    def text(self) -> str:
        """The plan as `--dry-run` prints it: the resolved settings, the run's sizes, the estimate and the verdict."""
        c = self.config
        rows = [f"plan of one iteration on the {self.device}, process 1 of {self.world} (docs/methods.md "
                "\"Memory estimate\"; 'auto' = chosen for this model and device):"]
        for name in SHOWN:
            rows.append(f"  {name:24s} {_shown(name, getattr(c, name)):26s}{'auto' if name in self.auto else ''}")
        rows.append(f"  G={c.group}, T={c.steps}, {c.prompts_per_iteration} prompt(s) per iteration "
                    f"({-(-c.prompts_per_iteration // self.world)} on this process), minibatch {c.minibatch_size} "
                    f"transitions, CFG {'on' if c.guidance_scale != 1.0 else 'off'}, KL {c.kl_beta:g}")
        rows.append("memory estimate of one iteration on this process:")
        rows.append(self.estimate.table())
        return "\n".join([*rows, self.verdict])


def _shown(name: str, value) -> str:
    """A resolved setting as the plan prints it."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:
        return {"resolution": "the model's own", "micro_batch": "the whole minibatch"}.get(name, "none")
    if name == "resolution":
        return f"{value} px"
    if name == "micro_batch":
        return f"{value} transition{'s' if value != 1 else ''} per pass"
    if name == "lora_rank":
        return f"{value}" if value else "0 (full fine-tuning)"
    return str(value)


def _sizes(config: TrainConfig, device: str, world: int) -> tuple[ModelSizes, RunSizes]:
    run = run_sizes(config, device, world)
    return model_sizes(config, run.weight_bytes), run


def _estimate(config: TrainConfig, device: str, world: int) -> MemoryEstimate:
    return estimate_memory(*_sizes(config, device, world))


def _largest_micro_batch(config: TrainConfig, device: str, world: int, free: int) -> int:
    """The most transitions per pass whose estimate fits `free` (activations grow linearly with them); 1 when even
    one does not fit (the plan then says so)."""
    full = config.minibatch_size
    one = _estimate(replace(config, micro_batch=1), device, world)
    if one.total > free:
        return 1
    per = (_estimate(replace(config, micro_batch=2), device, world).total - one.total)  # bytes per transition
    micro = min(full, 1 + int((free - one.total) // per)) if per > 0 else full
    while micro > 1 and _estimate(replace(config, micro_batch=micro), device, world).total > free:
        micro -= 1  # float rounding of the linear solve
    return micro


def _resolve_device_settings(config: TrainConfig, device: str, world: int, free: int | None) -> TrainConfig:
    """micro_batch and offload_text_encoders left 'auto': the text encoders stay on the device unless only their
    offload makes the run fit; the micro-batch is the largest that fits (the whole minibatch if free is unknown)."""
    micro_auto, offload_auto = config.micro_batch == AUTO, config.offload_text_encoders == AUTO
    if offload_auto:
        config = replace(config, offload_text_encoders=False)
    if free is None:
        return replace(config, micro_batch=config.minibatch_size) if micro_auto else config

    def settle(c: TrainConfig) -> TrainConfig:
        return replace(c, micro_batch=_largest_micro_batch(c, device, world, free)) if micro_auto else c

    on_device = settle(config)
    if offload_auto and _estimate(on_device, device, world).total > free:
        offloaded = settle(replace(config, offload_text_encoders=True))
        if _estimate(offloaded, device, world).total < _estimate(on_device, device, world).total:
            return offloaded
    return on_device


def _candidate_fixes(config: TrainConfig, resolved: TrainConfig, world: int, device: str, free: int):
    """(flag, overrides) of single changes, those that keep the run's maths first (docs/methods.md)."""
    real = is_real_model(config.model)
    if real and resolved.offload_text_encoders is not True:
        yield "--offload-text-encoders", {"offload_text_encoders": True}
    if real and config.micro_batch != AUTO and resolved.micro_batch != 1:
        yield "--micro-batch auto", {"micro_batch": AUTO}
    micro = _largest_micro_batch(resolved, device, world, free)
    if not real and micro < (resolved.micro_batch or resolved.minibatch_size):
        yield f"--micro-batch {micro}", {"micro_batch": micro}
    if real and not resolved.vae_tiling:
        yield "--vae-tiling", {"vae_tiling": True}
    if not resolved.checkpointing:
        yield "--gradient-checkpointing", {"gradient_checkpointing": True}
    if world > 1 and resolved.lora_rank == 0 and not resolved.fsdp and device.startswith("cuda"):
        yield "--fsdp", {"fsdp": True}
    if real and resolved.dtype == "float32":
        yield "--dtype bfloat16", {"dtype": "bfloat16"}
    if real and resolved.lora_rank == 0 and not resolved.fsdp:
        yield f"--lora-rank {REAL_LORA_RANK}", {"lora_rank": REAL_LORA_RANK}
    n = resolved.prompts_per_iteration // 2
    while n >= world:
        if n % world == 0:
            yield f"--prompts-per-iteration {n}", {"prompts_per_iteration": n}
        n //= 2
    if real and isinstance(resolved.resolution, int):
        for px in (768, 512, 384, 256):
            if px < resolved.resolution:
                yield f"--resolution {px}", {"resolution": px}


def _smallest_fix(config: TrainConfig, resolved: TrainConfig, device: str, world: int, free: int) -> str | None:
    """The first single change (`_candidate_fixes`) that fits; else the first changes, in order, that fit together."""
    flags, overrides = {}, {}
    for flag, change in _candidate_fixes(config, resolved, world, device, free):
        try:
            if _plan(replace(config, **change), device, world, free).fits:
                return flag
            if _plan(replace(config, **(overrides | change)), device, world, free).fits:
                return " and ".join([*{**flags, **dict.fromkeys(change, flag)}.values()]) + " together"
        except WorkbenchError:  # a change this config cannot take (a minibatch that no longer divides)
            continue
        flags |= dict.fromkeys(change, flag)
        overrides |= change
    return None


def _plan(config: TrainConfig, device: str, world: int, free: int | None) -> RunPlan:
    auto = auto_settings(config)
    resolved = _resolve_device_settings(model_defaults(config), device, world, free)
    resolved.check_batches(world)
    sizes = _sizes(resolved, device, world)
    return RunPlan(resolved, estimate_memory(*sizes), device, world, free, auto, sizes=sizes)


def plan_run(config: TrainConfig, device: str | None = None, world: int | None = None,
             free: int | None = None) -> RunPlan:
    """The plan of `config` on `device` (default: config.device, else the best available) as one of `world`
    processes (default: WORLD_SIZE), against `free` bytes (default: what the device has free)."""
    from workbench.core.budget import free_bytes
    from workbench.models.adapters import default_device
    from workbench.train.distributed import world_size

    if not str(config.model or "").startswith("meta:"):
        check_model_folder(config.model)  # damaged or absurd configs are refused here, before the meta build
    device = device or config.device or default_device()
    world = world or world_size()
    free = free_bytes(device) if free is None else free
    plan = _plan(config, device, world, free)
    if plan.fits is False:
        plan.fix = _smallest_fix(config, plan.config, device, world, free)
    return plan


def estimate_run(config: TrainConfig, device: str | None = None) -> tuple[MemoryEstimate, str]:
    """(estimate, verdict line) of a run's first iteration on its device, without loading any weights."""
    plan = plan_run(config, device)
    return plan.estimate, plan.verdict
