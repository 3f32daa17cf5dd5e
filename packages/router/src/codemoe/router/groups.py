"""Group-limited selection shared by the routers that use it (DeepSeek-V2/V3).

Experts are split into ``num_groups`` equal groups; each token first keeps its ``topk_groups``
best groups, then picks its top-k experts inside them. On a cluster with one group per node,
a token's experts then span at most ``topk_groups`` nodes, which bounds all-to-all traffic.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["GROUP_SCORES", "group_mask"]


def _max(scores: torch.Tensor) -> torch.Tensor:
    return scores.max(dim=-1).values


def _top2_sum(scores: torch.Tensor) -> torch.Tensor:
    return scores.topk(min(2, scores.shape[-1]), dim=-1).values.sum(dim=-1)


GROUP_SCORES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "max": _max,  # DeepSeek-V2: a group scores as its best expert
    "top2_sum": _top2_sum,  # DeepSeek-V3: a group scores as the sum of its two best experts
}


def group_mask(scores: torch.Tensor, num_groups: int, topk_groups: int, group_score: str = "max") -> torch.Tensor:
    """Boolean ``[T, E]``: True for the experts in each token's ``topk_groups`` best groups."""
    tokens, experts = scores.shape
    if experts % num_groups:
        raise ValueError(f"num_experts={experts} is not divisible by num_groups={num_groups}")
    if not 1 <= topk_groups <= num_groups:
        raise ValueError(f"topk_groups={topk_groups} must be between 1 and num_groups={num_groups}")
    grouped = scores.view(tokens, num_groups, experts // num_groups)
    best = GROUP_SCORES[group_score](grouped).topk(topk_groups, dim=-1).indices  # [T, topk_groups]
    keep = torch.zeros(tokens, num_groups, dtype=torch.bool, device=scores.device).scatter_(1, best, True)
    return keep.unsqueeze(-1).expand_as(grouped).reshape(tokens, experts)
