"""The router interface every routing strategy implements.

A router scores each token against every expert and picks the experts that will process it. Its
only parameter of the standard kind is ``weight [E, H]``: stored in an MoE block as
``gate.weight``, the name and layout ``transformers`` uses, so checkpoints move unchanged.
Routing strategies live in the ``router`` package and register under kind ``router``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["UNROUTED", "Router", "RouterOutput"]

UNROUTED = -1  # an index slot that sends the token nowhere (dropped, or not picked by expert choice)


@dataclass
class RouterOutput:
    """What a router decides for a batch of ``T`` tokens.

    ``indices`` may hold :data:`UNROUTED` in slots that route nowhere (their weight is 0): expert
    choice gives tokens a varying number of experts, and a capacity limit drops assignments.
    """

    logits: torch.Tensor  # [T, E] fp32 raw scores: the z-loss and the metrics read them
    probs: torch.Tensor  # [T, E] fp32 per-expert probabilities: the balance loss reads them
    weights: torch.Tensor  # [T, k] combine weights of the chosen experts
    indices: torch.Tensor  # [T, k] int64 chosen experts (UNROUTED where a slot is empty)


class Router(nn.Module):
    """Base class of routers: holds ``weight [E, H]`` and computes fp32 logits.

    Subclasses implement :meth:`route`. Routers that keep state across steps (a balancing bias)
    override :meth:`observe` and :meth:`end_step`. ``hf_config`` says which ``transformers`` config keys reproduce the
    router in a standard checkpoint, or None when no standard architecture does.
    """

    def __init__(self, hidden_size: int, num_experts: int, top_k: int) -> None:
        super().__init__()
        if not 1 <= top_k <= num_experts:
            raise ValueError(f"top_k={top_k} must be between 1 and num_experts={num_experts}")
        self.hidden_size = hidden_size
        self.num_experts = num_experts
        self.top_k = top_k
        self.weight = nn.Parameter(torch.zeros(num_experts, hidden_size))

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Router logits ``[T, E]`` in fp32 (x: ``[T, H]``), whatever the model's dtype."""
        return F.linear(x.float(), self.weight.float())

    def route(self, x: torch.Tensor, token_ids: torch.Tensor | None = None) -> RouterOutput:
        """Score the tokens ``x [T, H]`` and choose their experts.

        ``token_ids [T]`` are the input ids of the tokens when the model was called with ids
        (routers that hash ids need them; the others ignore them).
        """
        raise NotImplementedError

    def forward(self, x: torch.Tensor, token_ids: torch.Tensor | None = None) -> RouterOutput:
        return self.route(x, token_ids)

    def probabilities(self, logits: torch.Tensor) -> torch.Tensor:
        """Per-expert probabilities ``[T, E]`` from logits (what the balance loss reads): a softmax."""
        return torch.softmax(logits, dim=-1)

    def replay_weights(self, logits: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        """Combine weights ``[T, k]`` this router gives the experts ``indices`` (routing replay).

        Default: their probabilities, renormalised to sum to one; unrouted slots get 0.
        """
        weights = self.probabilities(logits).gather(-1, indices.clamp(min=0)) * (indices >= 0)
        return weights / weights.sum(dim=-1, keepdim=True).clamp(min=1e-20)

    def replay(self, x: torch.Tensor, indices: torch.Tensor) -> RouterOutput:
        """Route ``x [T, H]`` to the given experts ``indices [T, k]`` instead of choosing them.

        Used to recompute a sampled sequence with the experts the engine used (routing replay):
        the weights still come from this router's current logits, so gradients reach it.
        """
        logits = self.logits(x)
        return RouterOutput(logits, self.probabilities(logits), self.replay_weights(logits, indices), indices)

    def observe(self, counts: torch.Tensor) -> None:
        """Called by the MoE block after each training forward with ``counts [E]``: how many real
        (non-padding) tokens chose each expert. Routers that balance from loads accumulate them."""

    def end_step(self) -> dict[str, float]:
        """Close a training step (update state such as a balancing bias); return its statistics."""
        return {}

    def hf_config(self) -> dict[str, Any] | None:
        """``transformers`` config values under which a standard MoE block routes exactly like this."""
        return None
