"""Data parallelism with FSDP2: process group from ``torchrun``'s environment, one ``fully_shard``
per transformer block, and the few collectives the trainer needs.

Without ``torchrun`` (no ``WORLD_SIZE`` in the environment) everything here is a no-op, so the same
trainer runs in one process. On CPU the backend is gloo, on GPU NCCL.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["Dist", "init_distributed", "shard_model"]


@dataclass(frozen=True)
class Dist:
    """This process's place in the job."""

    rank: int = 0
    world: int = 1

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def all_sum(self, value: torch.Tensor) -> torch.Tensor:
        """Sum a tensor over ranks (a copy; the input is left alone)."""
        out = value.detach().clone()
        if self.enabled:
            dist.all_reduce(out)
        return out

    def all_gather(self, value: Any) -> list[Any]:
        """Every rank's ``value`` (any picklable object), in rank order."""
        if not self.enabled:
            return [value]
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, value)
        return out

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()


def init_distributed() -> Dist:
    """Join the ``torchrun`` process group if there is one (idempotent)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
    return Dist(rank=dist.get_rank(), world=dist.get_world_size())


def transformer_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated blocks of a decoder: the children of the model's ``layers`` (or ``blocks``) list."""
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and name.rsplit(".", 1)[-1] in ("layers", "blocks", "h"):
            return list(module)
    raise ValueError(f"{type(model).__name__} has no 'layers' / 'blocks' ModuleList to shard block by block")


def shard_model(model: torch.nn.Module, env: Dist) -> torch.nn.Module:
    """FSDP2: ``fully_shard`` each transformer block, then the root (embeddings, head)."""
    if not env.enabled:
        return model
    from torch.distributed.fsdp import fully_shard

    for block in transformer_blocks(model):
        fully_shard(block)
    fully_shard(model)
    return model
