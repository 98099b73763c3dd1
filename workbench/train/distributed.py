"""Several processes: groups split across ranks, gradients averaged by trained trajectories.

Under `torchrun` / `accelerate launch` (WORLD_SIZE > 1) every process takes the groups r::world of an
iteration; `gather` collects picklable objects (rewards, statistics) in rank order and
`sync_gradients` averages gradients weighted by the trajectories each process trained. A single
process needs none of torch.distributed: every helper is a no-op there.
"""

from __future__ import annotations

import atexit
import os
from dataclasses import dataclass

import torch


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
        # leave the group before the interpreter tears down: a gloo group still alive then can abort the process
        # ("terminate called without an active exception", exit -6) after all its work succeeded
        atexit.register(lambda: dist.is_initialized() and dist.destroy_process_group())
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
