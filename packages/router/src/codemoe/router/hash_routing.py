"""Hash routing (Roller et al. 2021): a token's experts are a fixed function of its id.

Nothing is learned about the choice, so loads follow the token frequencies and routing never
collapses; a baseline for learned routers. ``top_k`` consecutive experts after ``hash(id) mod E``
get equal weights. The router still computes logits (for the z-loss and metrics). It needs the
model to be called with ``input_ids``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from codemoe.core.moe import Router, RouterOutput

__all__ = ["HashConfig", "HashRouter", "build"]

_KNUTH = 2654435761  # multiplicative hashing constant (2^32 / golden ratio)


@dataclass
class HashConfig:
    """Options of hash routing."""

    top_k: int = 1  # experts per token
    salt: int = 0  # changes the token -> expert map


class HashRouter(Router):
    """Experts from a multiplicative hash of the token id."""

    needs_token_ids = True

    def __init__(self, config: HashConfig, hidden_size: int, num_experts: int) -> None:
        super().__init__(hidden_size, num_experts, config.top_k)
        self.config = config

    def route(self, x: torch.Tensor, token_ids: torch.Tensor | None = None) -> RouterOutput:
        if token_ids is None:
            raise ValueError("hash routing needs the token ids: call the model with input_ids, not inputs_embeds")
        logits = self.logits(x)  # [T, E] fp32
        first = ((token_ids.long() + self.config.salt) * _KNUTH) % (2**32) % self.num_experts  # [T]
        offsets = torch.arange(self.top_k, device=x.device)
        indices = (first.unsqueeze(-1) + offsets) % self.num_experts  # [T, k]
        weights = torch.full(indices.shape, 1.0 / self.top_k, device=x.device)
        return RouterOutput(logits=logits, probs=torch.softmax(logits, dim=-1), weights=weights, indices=indices)

    def replay_weights(self, logits: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        return torch.full(indices.shape, 1.0 / self.top_k, device=logits.device)


def build(config: HashConfig, *, hidden_size: int, num_experts: int) -> HashRouter:
    """Hash routing: experts from a hash of the token id (Roller et al. 2021)."""
    return HashRouter(config, hidden_size, num_experts)
