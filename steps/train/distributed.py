"""The training step's process group: this rank, its device, and the collectives the
trainer uses (each a no-op for one process).

Ranks: ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` as torchrun (or the Training Operator,
for a pod per process) sets them; none set is one process. gloo on CPU, NCCL on GPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Dist:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def setup_distributed() -> Dist:
    """Join the process group the environment describes; pick this rank's device."""
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if world_size > 1 and not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, device_id=device if device.type == "cuda" else None)
    return Dist(rank, world_size, local_rank, device)


def teardown_distributed() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum(tensor: torch.Tensor, d: Dist) -> torch.Tensor:
    if d.distributed:
        dist.all_reduce(tensor)
    return tensor


def broadcast_object(obj: Any, d: Dist) -> Any:
    """Rank 0's value of ``obj`` on every rank."""
    if not d.distributed:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier(d: Dist) -> None:
    if d.distributed:
        dist.barrier()


def average_buffers(model: torch.nn.Module, d: Dist) -> None:
    """Average BatchNorm running statistics over ranks: each rank saw other batches."""
    if not d.distributed:
        return
    for buffer in model.buffers():
        if buffer.is_floating_point():
            dist.all_reduce(buffer)
            buffer.div_(d.world_size)
