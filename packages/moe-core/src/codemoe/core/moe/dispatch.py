"""Dispatch: permute tokens into expert order, and combine expert outputs back.

This is the seam between routing and expert compute. The local dispatcher sorts the
(token, expert) assignments of one process by expert; an expert-parallel dispatcher replaces
it with an all-to-all exchange that delivers each rank the rows of the experts it holds, with
the same :class:`Dispatched` contract, so expert implementations do not change.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["Dispatched", "LocalDispatcher", "LocalDispatcherConfig"]


@dataclass
class Dispatched:
    """Token rows grouped by expert: rows of expert ``e`` are contiguous and in expert order."""

    tokens: torch.Tensor  # [S, H] one row per (token, expert) assignment, sorted by expert
    counts: list[int]  # [E] rows per expert (a host list: grouped matmuls slice by it)
    source: torch.Tensor  # [S] int64 token index each row came from
    weights: torch.Tensor  # [S] combine weight of each row


@dataclass
class LocalDispatcherConfig:
    """The local dispatcher has no options: every expert lives in this process."""


class LocalDispatcher:
    """Sort assignments by expert within one process (no communication)."""

    def __init__(self, config: LocalDispatcherConfig | None = None) -> None:
        self.config = config or LocalDispatcherConfig()

    def dispatch(self, x: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor, num_experts: int) -> Dispatched:
        """Group the rows of ``x [T, H]`` by the experts in ``indices [T, k]`` (negative: unrouted)."""
        k = indices.shape[-1]
        flat = indices.reshape(-1)
        # Unrouted slots get key E so that the stable sort puts them after every expert's rows.
        keys = torch.where(flat < 0, torch.full_like(flat, num_experts), flat)
        order = torch.argsort(keys, stable=True)
        counts = torch.bincount(keys, minlength=num_experts + 1)[:num_experts].tolist()
        order = order[: sum(counts)]
        source = order // k
        return Dispatched(
            tokens=x.index_select(0, source),
            counts=counts,
            source=source,
            weights=weights.reshape(-1).index_select(0, order),
        )

    def combine(self, y: torch.Tensor, dispatched: Dispatched, num_tokens: int) -> torch.Tensor:
        """Weight the expert outputs ``y [S, H]`` and sum them back per token: ``[T, H]``."""
        weighted = y * dispatched.weights.unsqueeze(-1).to(y.dtype)
        out = y.new_zeros(num_tokens, y.shape[-1])
        return out.index_add(0, dispatched.source, weighted)
