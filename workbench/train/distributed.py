"""Several processes through accelerate: DDP (or FSDP) around the transformer, objects gathered in rank order.

Under `accelerate launch` / `torchrun` (WORLD_SIZE > 1) `init_distributed` builds an `accelerate.Accelerator`,
which joins the process group (gloo on CPU, NCCL on GPUs). `Distribution.prepare` wraps the trained transformer in
DDP (LoRA and full fine-tuning; every rank then starts from rank 0's weights, which DDP broadcasts) or, with
`TrainConfig.fsdp`, in FSDP (weights, gradients and AdamW state sharded: full fine-tunes that do not fit one GPU).
Gradients are averaged by DDP's all-reduce in the backward pass; `Distribution.no_sync` skips it for every backward
of an optimizer step but the last (`train/update.py` says how the average gives the one-process gradient,
docs/methods.md "Several processes"). A single process needs none of this: every helper is a no-op there and
accelerate is not imported.
"""

from __future__ import annotations

import atexit
import contextlib
import os
from dataclasses import dataclass

import torch


@dataclass
class DistInfo:
    """Where this process stands: its rank among `world` processes and its GPU index on the machine."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    lockstep: bool = False  # every pass syncs and every process runs as many (FSDP's passes gather the weights)

    @property
    def main(self) -> bool:
        return self.rank == 0

    # ---------------------------------------------------------------------------- one process: no-ops
    def gather(self, obj) -> list:
        """Every process's `obj`, in rank order (a one-element list in a single process)."""
        return [obj]

    def broadcast(self, obj):
        """Rank 0's `obj` on every process."""
        return obj

    def prepare(self, transformer: torch.nn.Module) -> torch.nn.Module:
        """The transformer wrapped for training across processes (itself in one process)."""
        return transformer

    def no_sync(self, model: torch.nn.Module):
        """A context in which backward passes through `model` accumulate gradients without averaging them."""
        return contextlib.nullcontext()

    def clip_grad_norm_(self, model: torch.nn.Module, params: list[torch.Tensor], max_norm: float) -> torch.Tensor:
        return torch.nn.utils.clip_grad_norm_(params, max_norm)

    def full_state(self, model: torch.nn.Module, params: dict[str, torch.Tensor],
                   optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
        """(trained weights by name, optimizer state) as one process holds them, for a checkpoint."""
        return params, optimizer.state_dict()

    def load_optimizer_state(self, model: torch.nn.Module, params: dict[str, torch.Tensor],
                             optimizer: torch.optim.Optimizer, state: dict) -> None:
        """Load a checkpoint's optimizer state (as `full_state` wrote it, from any number of processes)."""
        optimizer.load_state_dict(state)


class Prepared:
    """The prepared (DDP) transformer called in place of the transformer; everything else (config, dtype,
    parameters) is read from the transformer itself."""

    def __init__(self, prepared: torch.nn.Module, module: torch.nn.Module):
        self._prepared, self._module = prepared, module

    def __call__(self, *args, **kwargs):
        return self._prepared(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._module, name)


class Distribution(DistInfo):
    """Several processes, through one `accelerate.Accelerator` (DDP by default, FSDP with `fsdp`)."""

    def __init__(self, fsdp: bool = False):
        from accelerate import Accelerator
        from accelerate.utils import DistributedDataParallelKwargs

        # broadcast_buffers off: buffers never change, and ranks run different numbers of forward passes (their
        # shares of a minibatch differ), which a per-forward broadcast would deadlock
        ddp = DistributedDataParallelKwargs(broadcast_buffers=False)
        self.accelerator = Accelerator(cpu=not torch.cuda.is_available(), device_placement=False,
                                       kwargs_handlers=[ddp], fsdp_plugin=fsdp_plugin() if fsdp else None)
        state = self.accelerator.state
        super().__init__(state.process_index, state.num_processes, state.local_process_index, lockstep=fsdp)
        self.fsdp = fsdp
        import torch.distributed as dist

        # leave the group before the interpreter tears down: a gloo group still alive then can abort the process
        # ("terminate called without an active exception", exit -6) after all its work succeeded
        atexit.register(lambda: dist.is_initialized() and dist.destroy_process_group())

    def gather(self, obj) -> list:
        from accelerate.utils import gather_object

        return gather_object([obj])

    def broadcast(self, obj):
        from accelerate.utils import broadcast_object_list

        return broadcast_object_list([obj], from_process=0)[0]

    def prepare(self, transformer: torch.nn.Module) -> torch.nn.Module:
        return self.accelerator.prepare_model(transformer, device_placement=False)

    def no_sync(self, model: torch.nn.Module):
        return self.accelerator.no_sync(model)

    def clip_grad_norm_(self, model: torch.nn.Module, params: list[torch.Tensor], max_norm: float) -> torch.Tensor:
        if self.fsdp:
            return self.accelerator.clip_grad_norm_(model.parameters(), max_norm)
        return torch.nn.utils.clip_grad_norm_(params, max_norm)  # DDP: every rank holds the same averaged gradient

    def full_state(self, model: torch.nn.Module, params: dict[str, torch.Tensor],
                   optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
        """DDP: this rank's (every rank holds the same). FSDP: the full weights and optimizer state gathered from the
        shards (a collective: every rank calls it), keyed by parameter name so any world size loads them."""
        if not self.fsdp:
            return params, optimizer.state_dict()
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        weights = self.accelerator.get_state_dict(model)
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        state = get_optimizer_state_dict(model, optimizer, options=options)  # keyed by parameter name
        return {k: v for k, v in weights.items() if k in params}, by_index(state, list(params))

    def load_optimizer_state(self, model: torch.nn.Module, params: dict[str, torch.Tensor],
                             optimizer: torch.optim.Optimizer, state: dict) -> None:
        if not self.fsdp:
            return optimizer.load_state_dict(state)
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        set_optimizer_state_dict(model, optimizer, by_name(state, list(params)),
                                 options=StateDictOptions(full_state_dict=True))


def by_index(state: dict, names: list[str]) -> dict:
    """A full optimizer state keyed by parameter name (torch.distributed.checkpoint's) -> keyed by the parameter's
    index in `names`, as `Optimizer.state_dict` keys it (what a one-process run saves and loads)."""
    index = {name: i for i, name in enumerate(names)}
    groups = [{**g, "params": [index[p] for p in g["params"]]} for g in state["param_groups"]]
    return {"state": {index[k]: v for k, v in state["state"].items()}, "param_groups": groups}


def by_name(state: dict, names: list[str]) -> dict:
    """The inverse of `by_index`."""
    groups = [{**g, "params": [names[i] for i in g["params"]]} for g in state["param_groups"]]
    return {"state": {names[k]: v for k, v in state["state"].items()}, "param_groups": groups}


def fsdp_plugin():
    """accelerate's FSDP2 plugin for full fine-tunes: each transformer block its own shard unit (diffusers' block
    classes, `_no_split_modules`), weights resharded after the forward, the full state dict on saving."""
    from accelerate import FullyShardedDataParallelPlugin

    return FullyShardedDataParallelPlugin(fsdp_version=2, reshard_after_forward=True,
                                          auto_wrap_policy="transformer_based_wrap", state_dict_type="FULL_STATE_DICT")


def init_distributed(fsdp: bool = False) -> DistInfo:
    """This process's place: a `Distribution` over accelerate when `accelerate launch` / `torchrun` started several
    (WORLD_SIZE > 1), else a single-process `DistInfo` (accelerate is then not imported)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return DistInfo()
    return Distribution(fsdp)


def world_size() -> int:
    """The number of processes this one was launched among (WORLD_SIZE; 1 when not launched by a launcher)."""
    return max(1, int(os.environ.get("WORLD_SIZE") or 1))  # unset or empty: 1
