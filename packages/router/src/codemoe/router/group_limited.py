"""Group-limited top-k with softmax scores (DeepSeek-V2): each token uses at most ``topk_groups``
of the ``num_groups`` expert groups."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from codemoe.core.moe import Router, RouterOutput
from codemoe.router.groups import group_mask

__all__ = ["GroupLimitedConfig", "GroupLimitedRouter", "build"]


@dataclass
class GroupLimitedConfig:
    """Options of group-limited routing."""

    top_k: int = 2  # experts per token
    num_groups: int = 2  # equal groups the experts are split into (e.g. one per device or node)
    topk_groups: int = 1  # groups each token may use
    group_score: str = "max"  # how a group scores: 'max' (DeepSeek-V2) or 'top2_sum'
    normalize: bool = False  # renormalise the kept probabilities to sum to one


class GroupLimitedRouter(Router):
    """Softmax over experts; top-k among the experts of each token's best groups."""

    def __init__(self, config: GroupLimitedConfig, hidden_size: int, num_experts: int) -> None:
        super().__init__(hidden_size, num_experts, config.top_k)
        if config.top_k > num_experts // config.num_groups * config.topk_groups:
            raise ValueError(
                f"top_k={config.top_k} exceeds the experts in {config.topk_groups} of {config.num_groups} groups"
            )
        self.config = config

    def route(self, x: torch.Tensor, token_ids: torch.Tensor | None = None) -> RouterOutput:
        logits = self.logits(x)  # [T, E] fp32
        probs = torch.softmax(logits, dim=-1)
        mask = group_mask(probs.detach(), self.config.num_groups, self.config.topk_groups, self.config.group_score)
        weights, indices = probs.masked_fill(~mask, 0.0).topk(self.top_k, dim=-1)
        if self.config.normalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return RouterOutput(logits=logits, probs=probs, weights=weights, indices=indices)

    def replay_weights(self, logits: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        weights = torch.softmax(logits, dim=-1).gather(-1, indices)
        if self.config.normalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights


def build(config: GroupLimitedConfig, *, hidden_size: int, num_experts: int) -> GroupLimitedRouter:
    """Softmax top-k restricted to each token's best expert groups (DeepSeek-V2)."""
    return GroupLimitedRouter(config, hidden_size, num_experts)
