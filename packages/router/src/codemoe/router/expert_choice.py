"""Expert choice routing (Zhou et al. 2022): each expert picks its tokens.

Every expert takes the ``C = ceil(capacity_factor · T · top_k / E)`` tokens with the highest
softmax score for it, so loads are balanced by construction; a token may get several experts or
none (it then keeps only the residual path). ``top_k`` is the *average* number of experts per
token. The choice looks at every token of the batch at once, so in a causal LM a token's routing
depends on later tokens: use it for training experiments, not where training and generation must
route alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from codemoe.core.moe import UNROUTED, Router, RouterOutput

__all__ = ["ExpertChoiceConfig", "ExpertChoiceRouter", "build"]


@dataclass
class ExpertChoiceConfig:
    """Options of expert choice routing."""

    top_k: int = 2  # average experts per token (sets the capacity with capacity_factor)
    capacity_factor: float = 1.0  # tokens per expert = ceil(capacity_factor · T · top_k / E)


class ExpertChoiceRouter(Router):
    """Experts choose their top-C tokens by softmax score."""

    def __init__(self, config: ExpertChoiceConfig, hidden_size: int, num_experts: int) -> None:
        super().__init__(hidden_size, num_experts, config.top_k)
        self.config = config

    def capacity(self, num_tokens: int) -> int:
        """Tokens each expert takes."""
        cap = math.ceil(self.config.capacity_factor * num_tokens * self.top_k / self.num_experts)
        return max(1, min(num_tokens, cap))

    def route(self, x: torch.Tensor, token_ids: torch.Tensor | None = None) -> RouterOutput:
        logits = self.logits(x)  # [T, E] fp32
        probs = torch.softmax(logits, dim=-1)
        tokens = probs.shape[0]
        picked = probs.t().topk(self.capacity(tokens), dim=-1).indices  # [E, C] tokens each expert takes
        chosen = torch.zeros_like(probs, dtype=torch.bool)
        chosen[picked, torch.arange(self.num_experts, device=probs.device).unsqueeze(-1)] = True  # [T, E]
        slots = max(int(chosen.sum(-1).max()), 1)
        # Per token: its chosen experts first (highest score first), then empty slots.
        order = (probs.detach() + chosen.float() * 2).topk(slots, dim=-1).indices  # [T, slots]
        valid = chosen.gather(-1, order)
        indices = torch.where(valid, order, torch.full_like(order, UNROUTED))
        weights = torch.where(valid, probs.gather(-1, order), torch.zeros_like(order, dtype=probs.dtype))
        return RouterOutput(logits=logits, probs=probs, weights=weights, indices=indices)

    def replay_weights(self, logits: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        return torch.softmax(logits, dim=-1).gather(-1, indices.clamp(min=0)) * (indices >= 0)


def build(config: ExpertChoiceConfig, *, hidden_size: int, num_experts: int) -> ExpertChoiceRouter:
    """Expert choice: each expert takes its top-C tokens (balanced by construction)."""
    return ExpertChoiceRouter(config, hidden_size, num_experts)
