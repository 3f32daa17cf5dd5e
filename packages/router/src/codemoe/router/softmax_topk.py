"""Softmax top-k routing (Switch, GShard, Mixtral, Qwen-MoE).

Two orders: ``softmax_topk`` takes the softmax over all experts and keeps the top-k
probabilities (optionally renormalised to sum to one; Qwen3-MoE's ``norm_topk_prob``);
``topk_softmax`` keeps the top-k logits and takes the softmax over them only (Mixtral), which
always sums to one. Both choose the same experts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from codemoe.core.moe import Router, RouterOutput

__all__ = ["SoftmaxTopKConfig", "SoftmaxTopKRouter", "build"]

ORDERS = ("softmax_topk", "topk_softmax")


@dataclass
class SoftmaxTopKConfig:
    """Options of the softmax top-k router."""

    top_k: int = 2  # experts per token
    order: str = (
        "softmax_topk"  # 'softmax_topk': softmax over all, then top-k; 'topk_softmax': top-k logits, then softmax
    )
    normalize: bool = True  # softmax_topk only: renormalise the kept probabilities to sum to one


class SoftmaxTopKRouter(Router):
    """Softmax over expert logits, top-k experts per token."""

    def __init__(self, config: SoftmaxTopKConfig, hidden_size: int, num_experts: int) -> None:
        if config.order not in ORDERS:
            raise ValueError(f"softmax_topk order '{config.order}' is not one of {', '.join(ORDERS)}")
        super().__init__(hidden_size, num_experts, config.top_k)
        self.config = config

    def route(self, x: torch.Tensor, token_ids: torch.Tensor | None = None) -> RouterOutput:
        logits = self.logits(x)  # [T, E] fp32
        probs = torch.softmax(logits, dim=-1)
        if self.config.order == "softmax_topk":
            weights, indices = torch.topk(probs, self.top_k, dim=-1)
            if self.config.normalize:
                weights = weights / weights.sum(dim=-1, keepdim=True)
        else:
            top_logits, indices = torch.topk(logits, self.top_k, dim=-1)
            weights = torch.softmax(top_logits, dim=-1)
        return RouterOutput(logits=logits, probs=probs, weights=weights, indices=indices)

    def replay_weights(self, logits: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        weights = torch.softmax(logits, dim=-1).gather(-1, indices)
        if self.config.normalize or self.config.order == "topk_softmax":
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights

    def hf_config(self) -> dict[str, Any] | None:
        # topk_softmax equals softmax_topk with renormalisation, which is Qwen3-MoE's norm_topk_prob=True.
        normalize = self.config.normalize or self.config.order == "topk_softmax"
        return {"num_experts_per_tok": self.top_k, "norm_topk_prob": normalize}


def build(config: SoftmaxTopKConfig, *, hidden_size: int, num_experts: int) -> SoftmaxTopKRouter:
    """Softmax top-k routing; with renormalisation it is the Qwen3-MoE router."""
    return SoftmaxTopKRouter(config, hidden_size, num_experts)
