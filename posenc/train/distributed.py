"""Data-parallel training under ``torchrun``: process group setup and small collectives.

``torchrun --nproc_per_node N posenc train ...`` sets ``WORLD_SIZE``, ``RANK`` and
``LOCAL_RANK``; :func:`setup` then joins the process group (nccl on CUDA, gloo on CPU). Without
those variables everything runs in one process and the collectives do nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from ..errors import UserError


@dataclass(frozen=True)
class DistInfo:
    """Where this process stands: ``rank`` of ``world_size``, and its device."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    owns_group: bool = False       # this process created the group (and so destroys it)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def setup(device: str = "auto") -> DistInfo:
    """Join the process group when launched by torchrun; pick this process's device:
    ``auto`` the CUDA GPU of its local rank when there is one, else the CPU; ``cuda`` the
    GPU of its local rank; any other device string as given (``cuda:1``, ``mps``, ``xpu``)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    dev = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else
                       "cpu" if device == "auto" else device)
    use_cuda = dev.type == "cuda"
    if use_cuda and not torch.cuda.is_available():
        raise UserError(f"device {device!r} was asked for but CUDA is not available")
    if use_cuda:
        if dev.index is None:                # one GPU per process under torchrun
            dev = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(dev)
    if world <= 1:
        return DistInfo(device=dev)
    owns = False
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
        owns = True
    return DistInfo(rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local,
                    device=dev, owns_group=owns)


def teardown(info: DistInfo) -> None:
    if info.owns_group and dist.is_initialized():
        dist.destroy_process_group()


def mean(info: DistInfo, value: float) -> float:
    """The mean of ``value`` over all processes."""
    if not info.enabled:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=info.device)
    dist.all_reduce(t)
    return t.item() / info.world_size


def broadcast_flag(info: DistInfo, flag: bool) -> bool:
    """Rank 0's ``flag`` on every process."""
    if not info.enabled:
        return flag
    t = torch.tensor([int(flag)], device=info.device)
    dist.broadcast(t, src=0)
    return bool(t.item())


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()
