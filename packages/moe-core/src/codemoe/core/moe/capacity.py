"""Capacity limits: at most ``C`` assignments per expert, the rest dropped.

``C = ceil(capacity_factor · T · k / E)``: a factor of 1.0 gives every expert exactly its fair
share. Dropped assignments route nowhere (their token keeps the residual path and any other
experts it chose). Which assignments go is a drop policy, registered by name here.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from codemoe.core.moe.routing import UNROUTED

__all__ = ["DROP_POLICIES", "apply_capacity", "capacity"]


def capacity(num_tokens: int, top_k: int, num_experts: int, factor: float) -> int:
    """Assignments one expert may take: ``ceil(factor · T · k / E)``."""
    return max(1, math.ceil(factor * num_tokens * top_k / num_experts))


def _priority_by_weight(indices: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Higher router weight is kept first (drops the least confident assignments)."""
    return weights.detach().float()


def _priority_by_position(indices: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Earlier tokens are kept first, first choices before second ones (GShard / Switch)."""
    t, k = indices.shape
    slot_major = torch.arange(k, device=indices.device).unsqueeze(0) * t + torch.arange(
        t, device=indices.device
    ).unsqueeze(1)
    return -slot_major.float()


DROP_POLICIES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "weight": _priority_by_weight,
    "position": _priority_by_position,
}


def apply_capacity(
    indices: torch.Tensor, weights: torch.Tensor, num_experts: int, cap: int, policy: str = "weight"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Keep at most ``cap`` assignments per expert; returns (indices, weights, dropped count).

    indices, weights: ``[T, k]``; dropped slots get index :data:`UNROUTED` and weight 0.
    """
    try:
        priority = DROP_POLICIES[policy](indices, weights)  # [T, k], higher is kept first
    except KeyError:
        raise ValueError(f"unknown drop policy '{policy}': choose one of {', '.join(DROP_POLICIES)}") from None
    flat_idx = indices.reshape(-1)
    flat_pri = priority.reshape(-1)
    # Order assignments by (expert, priority descending); rank within each expert = position - expert start.
    order = torch.argsort(flat_pri, descending=True, stable=True)
    order = order[torch.argsort(flat_idx[order].clamp(min=0) + (flat_idx[order] < 0) * num_experts, stable=True)]
    sorted_experts = flat_idx[order]
    valid = sorted_experts >= 0
    counts = torch.bincount(sorted_experts[valid], minlength=num_experts)
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.arange(order.numel(), device=indices.device) - starts[sorted_experts.clamp(min=0)]
    keep_sorted = valid & (rank < cap)
    keep = torch.empty_like(keep_sorted)
    keep[order] = keep_sorted
    keep = keep.view_as(indices) | (indices < 0)
    dropped = (~keep).sum()
    new_indices = torch.where(keep, indices, torch.full_like(indices, UNROUTED))
    new_weights = torch.where(keep, weights, torch.zeros_like(weights))
    return new_indices, new_weights, dropped
