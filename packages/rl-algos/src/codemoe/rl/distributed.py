"""Data parallelism with FSDP2: process group from ``torchrun``'s environment, one ``fully_shard``
per transformer block, and the few collectives the trainer needs.

Without ``torchrun`` (no ``WORLD_SIZE`` in the environment) everything here is a no-op, so the same
trainer runs in one process. On CPU the backend is gloo, on GPU NCCL.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from codemoe.core.errors import ConfigError

__all__ = ["PRECISIONS", "Dist", "check_precision", "close_distributed", "compute_precision", "init_distributed", "shard_model"]

# Training precision: fp32 everywhere, or bf16 compute with fp32 master weights, optimizer state and
# gradient reduction (FSDP2's MixedPrecisionPolicy under torchrun, autocast in one process).
PRECISIONS = ("fp32", "bf16")


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

    def close(self) -> None:
        """Leave the process group at the end of a run: wait for every rank, then destroy it.

        The barrier keeps a rank that finishes first from closing its connections while another
        still uses them; what FSDP2 still holds of the group goes at exit (:func:`close_distributed`).
        """
        if self.enabled and dist.is_initialized():
            dist.barrier()
            close_distributed()


def init_distributed() -> Dist:
    """Join the ``torchrun`` process group if there is one (idempotent)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
        atexit.register(close_distributed)  # also where a run ends without Dist.close()
    return Dist(rank=dist.get_rank(), world=dist.get_world_size())


def close_distributed() -> None:
    """Destroy the process group if one is up (idempotent; no barrier, so safe on an error path).

    ``destroy_process_group`` only drops torch's own references: FSDP2 modules and device meshes
    keep the gloo group alive, and when the last of them goes at interpreter shutdown its threads
    are joined while the interpreter is torn down, which can abort the process. Registered with
    ``atexit`` by :func:`init_distributed`, this runs after the run's objects are unreachable and
    before that teardown, so the collection here frees the group while Python is still whole.
    """
    if dist.is_initialized():
        dist.destroy_process_group()
    gc.collect()


def transformer_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated blocks of a decoder: the children of the model's ``layers`` (or ``blocks``) list."""
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and name.rsplit(".", 1)[-1] in ("layers", "blocks", "h"):
            return list(module)
    raise ValueError(f"{type(model).__name__} has no 'layers' / 'blocks' ModuleList to shard block by block")


def check_precision(precision: str) -> None:
    """Refuse a precision other than :data:`PRECISIONS`, naming the option."""
    if precision not in PRECISIONS:
        raise ConfigError(f"'precision': {precision!r} is not one of {', '.join(PRECISIONS)}")


def compute_precision(precision: str, env: Dist, model: torch.nn.Module) -> contextlib.AbstractContextManager[Any]:
    """The context a trainer's forwards run in: bf16 autocast in one process; under FSDP2 nothing,
    since the sharding's mixed-precision policy casts the gathered parameters itself."""
    if precision == "fp32" or env.enabled:
        return contextlib.nullcontext()
    device = next(model.parameters()).device.type
    return torch.autocast(device_type=device, dtype=torch.bfloat16)


def shard_model(
    model: torch.nn.Module, env: Dist, *, precision: str = "fp32", checkpointing: bool = False
) -> torch.nn.Module:
    """FSDP2: ``fully_shard`` each transformer block, then the root (embeddings, head).

    ``precision="bf16"``: the sharded (master) parameters stay fp32, and so does the optimizer
    state built over them; blocks compute in bf16 and gradients are reduced in fp32.
    ``checkpointing``: each block recomputes its activations in backward
    (:func:`codemoe.core.moe.checkpoint_layers`, routing counted once), in one process too.

    A model whose experts are already split over the ranks (the ``all_to_all`` dispatcher) is
    refused: sharding them again over the same ranks would leave each rank a slice of a slice and
    a whole-model state dict without most experts, silently.
    """
    check_precision(precision)
    if checkpointing:
        from codemoe.core.moe import checkpoint_layers

        checkpoint_layers(transformer_blocks(model))
    if not env.enabled:
        return model
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    split = sorted({name for name, m in model.named_modules() if getattr(m, "dispatcher", None) is not None
                    and getattr(m.dispatcher, "splits_experts", False)})
    if split:
        raise ConfigError(
            f"{len(split)} expert layers (first: {split[0]}) use an expert-parallel dispatcher (all_to_all), which "
            "data-parallel training (FSDP2 over every rank) cannot shard correctly; use the 'local' dispatcher "
            "under torchrun until the dp x ep mesh exists"
        )

    policy = MixedPrecisionPolicy()
    if precision == "bf16":
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in transformer_blocks(model):
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    return model
