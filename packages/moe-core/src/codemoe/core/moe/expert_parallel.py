"""Expert parallelism: experts sharded over ranks, tokens exchanged with all-to-all.

With ``W`` ranks in the expert-parallel group and ``E = W · E_local`` experts, rank ``r`` holds
experts ``[r · E_local, (r + 1) · E_local)`` (its experts module has ``E_local`` experts). Each
rank routes its own tokens, sends every (token, expert) row to the rank holding that expert,
runs its local experts on what it receives, and sends the outputs back, where they are summed
per token. Both exchanges are differentiable: gradients travel the reverse way. Communication is
the scaling bottleneck of MoE training, so the dispatcher counts what it sends.

A trainer builds the whole model on every rank and calls :func:`split_experts` with the ``ep``
dimension of its device mesh: every MoE layer keeps its rank's slice of the experts (the same values
the whole model has for them), as a ``DTensor`` sharded on dim 0 over that mesh, so state dicts and
checkpoints see the global ``[E, ...]`` tensors, and its dispatcher exchanges rows over the ``ep``
group only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from codemoe.core.moe.dispatch import Dispatched

__all__ = ["AllToAllDispatcher", "AllToAllDispatcherConfig", "split_experts"]


class _AllToAll(torch.autograd.Function):
    """``all_to_all_single`` with row splits; backward sends the gradients back the same way."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, send: list[int], recv: list[int], group: Any) -> torch.Tensor:
        ctx.send, ctx.recv, ctx.group = send, recv, group
        out = x.new_empty(sum(recv), *x.shape[1:])
        dist.all_to_all_single(out, x.contiguous(), recv, send, group=group)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        back = grad.new_empty(sum(ctx.send), *grad.shape[1:])
        dist.all_to_all_single(back, grad.contiguous(), ctx.send, ctx.recv, group=ctx.group)
        return back, None, None, None


@dataclass
class AllToAllDispatcherConfig:
    """Expert parallelism over the default process group (every rank holds an equal share of experts)."""


@dataclass
class _Context:
    source: torch.Tensor  # [S_sent] token each sent row came from
    send: list[int]  # rows sent to each rank
    recv: list[int]  # rows received from each rank
    order: torch.Tensor  # [N_recv] received rows in local-expert order


class AllToAllDispatcher:
    """Send rows to the ranks that hold their experts; bring the outputs back."""

    splits_experts = True  # each rank holds a share of the experts (data-parallel sharding must not split them again)

    def __init__(self, config: AllToAllDispatcherConfig | None = None, group: Any = None) -> None:
        self.config = config or AllToAllDispatcherConfig()
        self.group = group
        self.sent_rows = 0
        self.sent_bytes = 0

    def local_experts(self, num_experts: int) -> int:
        """Experts this rank holds: ``num_experts / world`` (all of them without a process group)."""
        if not (dist.is_available() and dist.is_initialized()):
            return num_experts  # a single process (accounting on the meta device, conversion)
        world = dist.get_world_size(self.group)
        if num_experts % world:
            raise ValueError(f"{num_experts} experts cannot be split evenly over {world} expert-parallel ranks")
        return num_experts // world

    def expert_offset(self, held: int) -> int:
        """Global id of this rank's first expert."""
        return dist.get_rank(self.group) * held if dist.is_available() and dist.is_initialized() else 0

    def communication(self) -> dict[str, int]:
        """Rows and bytes this rank sent (dispatch and combine) since the last call; resets them."""
        out = {"rows": self.sent_rows, "bytes": self.sent_bytes}
        self.sent_rows = self.sent_bytes = 0
        return out

    def _count(self, rows: torch.Tensor, split: list[int], rank: int) -> None:
        """Add the rows that leave this rank (its own slice stays local) to the tallies."""
        remote = sum(split) - split[rank]
        self.sent_rows += remote
        self.sent_bytes += remote * math.prod(rows.shape[1:]) * rows.element_size()

    def dispatch(self, x: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor, num_experts: int) -> Dispatched:
        """Exchange the rows of ``x [T, H]`` by expert ``indices [T, k]``; ``num_experts`` is E_local."""
        world, rank = dist.get_world_size(self.group), dist.get_rank(self.group)
        total = num_experts * world
        k = indices.shape[-1]
        flat = indices.reshape(-1)
        keys = torch.where(flat < 0, torch.full_like(flat, total), flat)
        order = torch.argsort(keys, stable=True)
        per_expert = torch.bincount(keys, minlength=total + 1)[:total]  # [E] rows this rank sends per expert
        incoming = torch.empty_like(per_expert)
        dist.all_to_all_single(incoming, per_expert, group=self.group)  # [W · E_local]: per source, per local expert
        # The one host read of a dispatch: all_to_all_single takes its split sizes as host lists (and
        # the experts slice by their counts), so rows sent and received per rank and rows per local
        # expert come back in a single transfer.
        sent, received = per_expert.view(world, num_experts), incoming.view(world, num_experts)
        sizes = torch.cat([sent.sum(1), received.sum(1), received.sum(0)]).tolist()
        send, recv, counts = sizes[:world], sizes[world : 2 * world], sizes[2 * world :]
        order = order[: sum(send)]
        source = order // k
        rows = _AllToAll.apply(x.index_select(0, source), send, recv, self.group)
        row_weights = _AllToAll.apply(weights.reshape(-1).index_select(0, order), send, recv, self.group)
        self._count(rows, send, rank)
        # Received rows come grouped by source rank, then local expert: regroup by local expert.
        # output_size: the total is known here, so repeat_interleave need not read it back
        local_expert = torch.repeat_interleave(
            torch.arange(num_experts, device=x.device).repeat(world), incoming.to(x.device), output_size=sum(recv)
        )
        regroup = torch.argsort(local_expert, stable=True)
        return Dispatched(
            tokens=rows,
            rows=regroup,
            counts=counts,
            weights=row_weights.index_select(0, regroup),
            context=_Context(source=source, send=send, recv=recv, order=regroup),
        )

    def combine(self, out: torch.Tensor, dispatched: Dispatched, num_tokens: int) -> torch.Tensor:
        """Send the experts' outputs ``[N_recv, H]`` back and sum them per token: ``[T, H]``."""
        ctx: _Context = dispatched.context
        back = _AllToAll.apply(out, ctx.recv, ctx.send, self.group)  # [S_sent, H] in send order
        self._count(out, ctx.recv, dist.get_rank(self.group))
        return back.new_zeros(num_tokens, back.shape[-1]).index_add(0, ctx.source, back)


@torch.no_grad()
def split_experts(model: torch.nn.Module, ep_mesh: Any) -> int:
    """Keep, in every MoE layer of ``model``, this rank's slice of the experts; returns the layers split.

    ``ep_mesh`` is a 1-D ``DeviceMesh`` (the trainer's ``ep`` dimension): its rank ``r`` of ``W``
    keeps experts ``[r · E / W, (r + 1) · E / W)`` as ``DTensor`` parameters placed ``Shard(0)`` on
    it (global shape ``[E, ...]``), and the layer's dispatcher becomes the all-to-all over that
    mesh's process group. The experts must be the grouped kind (they dispatch through a dispatcher)
    and still whole (the ``local`` dispatcher).
    """
    from codemoe.core.moe.dispatch import LocalDispatcher
    from codemoe.core.moe.readout import moe_blocks
    from torch.distributed.tensor import DTensor, Shard

    world, rank = ep_mesh.size(), ep_mesh.get_local_rank()
    group = ep_mesh.get_group()
    split = 0
    for block in moe_blocks(model):
        experts = block.experts
        where = f"MoE layer {block.layer}"
        if not isinstance(getattr(experts, "dispatcher", None), LocalDispatcher):
            kind = type(getattr(experts, "dispatcher", experts)).__name__
            raise ValueError(
                f"{where}: expert parallelism splits grouped experts whose dispatcher is 'local'; this layer has "
                f"{kind} (use experts: {{name: grouped}} with the default dispatcher)"
            )
        total = experts.num_experts
        if total % world:
            raise ValueError(f"{where}: {total} experts cannot be split evenly over {world} expert-parallel ranks")
        held = total // world
        offset = rank * held
        for name in ("gate_up_proj", "down_proj"):
            whole = getattr(experts, name)
            local = whole.detach()[offset : offset + held].clone()
            sharded = DTensor.from_local(local, ep_mesh, [Shard(0)], run_check=False)
            setattr(experts, name, torch.nn.Parameter(sharded, requires_grad=whole.requires_grad))
        experts.num_experts, experts.expert_offset = held, offset
        experts.dispatcher = AllToAllDispatcher(group=group)
        split += 1
    return split


def build_all_to_all_dispatcher(config: AllToAllDispatcherConfig) -> AllToAllDispatcher:
    """Expert parallelism: all-to-all exchange of rows with the ranks that hold their experts."""
    return AllToAllDispatcher(config)
