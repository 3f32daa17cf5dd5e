"""Data and expert parallelism with FSDP2: process group from ``torchrun``'s environment, one
``fully_shard`` per transformer block, the ``(dp, ep)`` device mesh, and the few collectives the
trainer needs.

Every rank trains on its own share of each batch. With ``parallel: {dp: N, ep: M}`` and ``M > 1``
the ranks also form an ``N x M`` mesh: each MoE layer's experts are split over the ``M`` ranks of
an ``ep`` group (tokens reach them by all-to-all over that group only) and each slice is sharded
over the ``N`` ranks of a ``dp`` group that hold the same slice; everything else is sharded over
all ranks. Gradients of every parameter are divided by the whole world size, so the update is the
one process's (see :func:`shard_model`).

Without ``torchrun`` (no ``WORLD_SIZE`` in the environment) everything here is a no-op, so the same
trainer runs in one process. On CPU the backend is gloo, on GPU NCCL.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
import torch.distributed as dist
from codemoe.core.errors import ConfigError

__all__ = [
    "PRECISIONS",
    "Dist",
    "ParallelConfig",
    "check_precision",
    "clip_grad_norm",
    "close_distributed",
    "compute_precision",
    "device_mesh",
    "init_distributed",
    "shard_model",
]

# Training precision: fp32 everywhere, or bf16 compute with fp32 master weights, optimizer state and
# gradient reduction (FSDP2's MixedPrecisionPolicy under torchrun, autocast in one process).
PRECISIONS = ("fp32", "bf16")


@dataclass
class ParallelConfig:
    """How a ``torchrun`` job's ranks share the model (option ``parallel: {dp: N, ep: M}``).

    Every rank trains on its own share of each batch. ``ep``: ranks that split each MoE layer's
    experts (``num_experts / ep`` each, tokens exchanged by all-to-all); ``dp``: ranks that hold the
    same expert slice and shard it (FSDP2). ``dp x ep`` must be ``WORLD_SIZE``.
    """

    dp: int = 0  # ranks per expert slice; 0: WORLD_SIZE / ep
    ep: int = 1  # expert-parallel ranks; 1: every rank holds every expert (data parallelism only)

    def __post_init__(self) -> None:
        for key in ("dp", "ep"):
            value = getattr(self, key)
            if not isinstance(value, int) or value < (0 if key == "dp" else 1):
                least = "0 (WORLD_SIZE / ep)" if key == "dp" else "1"
                raise ConfigError(f"'parallel.{key}': {value!r} must be an integer of at least {least}")


@dataclass(frozen=True)
class Dist:
    """This process's place in the job, and the process group its collectives run on (``None``:
    the default group)."""

    rank: int = 0
    world: int = 1
    group: Any = None

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
            dist.all_reduce(out, group=self.group)
        return out

    def all_gather(self, value: Any) -> list[Any]:
        """Every rank's ``value`` (any picklable object), in rank order."""
        if not self.enabled:
            return [value]
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, value, group=self.group)
        return out

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier(group=self.group)

    def own_group(self) -> Dist:
        """The same ranks over a gloo process group of their own, for the collectives of a second
        thread: two threads' collectives on one group would interleave in whatever order each rank
        reaches them (a deadlock, or one thread's data in the other's). Every rank must call this,
        in the same order as its other group creations; in one process it returns ``self``."""
        if not self.enabled:
            return self
        return Dist(rank=self.rank, world=self.world, group=dist.new_group(backend="gloo"))

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
        # CPU tensors over gloo, CUDA tensors over NCCL: a stage on 'device: cpu' on a GPU machine works
        backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
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


def device_mesh(parallel: ParallelConfig, env: Dist, model: torch.nn.Module) -> Any:
    """The ``(dp, ep)`` device mesh of ``parallel`` for ``model``, or None when ``ep`` is 1 (FSDP2
    over every rank needs no mesh of its own). Checks the option against the job and the model
    (:class:`~codemoe.core.errors.ConfigError` naming the key)."""
    from codemoe.core.moe import moe_blocks

    ep = parallel.ep
    if env.world % ep:
        raise ConfigError(f"'parallel.ep': {ep} expert-parallel ranks do not divide the job's {env.world} (WORLD_SIZE)")
    dp = parallel.dp or env.world // ep
    if dp * ep != env.world:
        raise ConfigError(
            f"'parallel': dp={dp} x ep={ep} = {dp * ep} ranks, but the job has {env.world} (WORLD_SIZE); "
            "set dp x ep to WORLD_SIZE, or dp: 0 for WORLD_SIZE / ep"
        )
    if ep == 1:
        return None
    blocks = list(moe_blocks(model))
    if not blocks:
        raise ConfigError(
            f"'parallel.ep': ep={ep} splits MoE experts over ranks, but {type(model).__name__} has no codemoe MoE "
            "layers; use ep: 1"
        )
    experts = blocks[0].num_experts
    if experts % ep:
        raise ConfigError(f"'parallel.ep': {experts} experts per MoE layer cannot be split evenly over ep={ep} ranks")
    if not hasattr(blocks[0].experts, "dispatcher"):
        raise ConfigError(
            f"'parallel.ep': the model's {type(blocks[0].experts).__name__} compute without a dispatcher, so their "
            "tokens cannot travel to other ranks; build the model with experts: {name: grouped} (or grouped_mm)"
        )
    from torch.distributed.device_mesh import init_device_mesh

    device = next(model.parameters()).device.type  # the trainer's device (its 'device' option)
    return init_device_mesh(device, (dp, ep), mesh_dim_names=("dp", "ep"))


def shard_model(
    model: torch.nn.Module,
    env: Dist,
    *,
    precision: str = "fp32",
    checkpointing: bool = False,
    mesh: Any = None,
) -> torch.nn.Module:
    """FSDP2: ``fully_shard`` each transformer block, then the root (embeddings, head).

    ``precision="bf16"``: the sharded (master) parameters stay fp32, and so does the optimizer
    state built over them; blocks compute in bf16 and gradients are reduced in fp32.
    ``checkpointing``: each block recomputes its activations in backward
    (:func:`codemoe.core.moe.checkpoint_layers`, routing counted once), in one process too.

    ``mesh`` (:func:`device_mesh`, expert parallelism): every MoE layer keeps its ``ep`` rank's
    slice of the experts (:func:`codemoe.core.moe.expert_parallel.split_experts`), and the slice is
    ``fully_shard``ed over the ``dp`` dimension alone. Gradient division: each rank's loss is
    scaled by the world size ``W`` (its share of a global mean), and every rank's tokens reach the
    experts of its ``ep`` group, so an expert's gradient summed over its ``dp`` group already holds
    all ``W`` ranks' contributions: it is divided by ``W = dp x ep`` (FSDP2's average over ``dp``,
    then ``ep`` in the reduction's hook), not by the ``dp`` group's size alone, exactly as the other
    parameters' average over all ``W`` ranks is.

    A model whose experts are already split over the ranks (built with the ``all_to_all``
    dispatcher, over the whole world) is refused: sharding them again over the same ranks would
    leave each rank a slice of a slice and a whole-model state dict without most experts, silently.
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
            f"{len(split)} expert layers (first: {split[0]}) use an expert-parallel dispatcher (all_to_all) over "
            "every rank, which FSDP2 over every rank cannot shard correctly; build the model with the 'local' "
            "dispatcher and set 'parallel.ep' to split the experts over a mesh dimension"
        )

    policy = MixedPrecisionPolicy()
    if precision == "bf16":
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    if mesh is not None:
        from codemoe.core.moe import moe_blocks
        from codemoe.core.moe.expert_parallel import split_experts

        split_experts(model, mesh["ep"])
        ep = mesh["ep"].size()
        for block in moe_blocks(model):
            fully_shard(block.experts, mesh=mesh["dp"], mp_policy=policy)
            # FSDP2 averages over the dp group; the hook divides the reduced gradient by ep too. (Not
            # set_gradient_divide_factor(W): on a dp group of one rank, torch 2.13 divides a float64
            # or fp16 gradient by a custom factor twice.)
            block.experts.set_all_reduce_hook(partial(_divide, by=float(ep)))
    # every rank, on the model's own device: FSDP2's default mesh would pick the GPU whenever CUDA
    # is there, moving a 'device: cpu' stage's shards onto it
    from torch.distributed.device_mesh import init_device_mesh

    world = init_device_mesh(next(model.parameters()).device.type, (env.world,))
    for block in transformer_blocks(model):
        fully_shard(block, mesh=world, mp_policy=policy)
    fully_shard(model, mesh=world, mp_policy=policy)
    return model


def _divide(grad: torch.Tensor, by: float) -> None:
    grad.div_(by)


def clip_grad_norm(parameters: Any, max_norm: float) -> float:
    """Scale the gradients of ``parameters`` to a global 2-norm of at most ``max_norm``; returns the
    norm before scaling (the whole model's, on every rank).

    Under expert parallelism the gradients live on two meshes (experts on ``(dp, ep)``, the rest on
    every rank), which one ``torch.nn.utils.clip_grad_norm_`` cannot stack: each mesh's norm is
    reduced to a full value first, then the squares are added.
    """
    from torch.distributed.tensor import DTensor

    grads = [p.grad for p in parameters if p.grad is not None]
    groups: dict[Any, list[torch.Tensor]] = {}
    for grad in grads:
        groups.setdefault(grad.device_mesh if isinstance(grad, DTensor) else None, []).append(grad)
    squares = torch.zeros((), dtype=torch.float64)
    for group in groups.values():
        norm = torch.nn.utils.get_total_norm(group)
        norm = norm.full_tensor() if isinstance(norm, DTensor) else norm
        squares += norm.double().cpu() ** 2
    total = float(squares.sqrt())
    coef = max_norm / (total + 1e-6)
    if coef < 1.0:
        for grad in grads:
            grad.mul_(coef)
    return total
