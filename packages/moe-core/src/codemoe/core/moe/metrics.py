"""Routing statistics, accumulated on the device and read once per step.

Each MoE block owns a :class:`RoutingStats`. Forwards add to a few small tensors (no host sync);
:meth:`RoutingStats.read` turns them into numbers once per optimizer step and resets them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

__all__ = ["LayerStats", "RoutingStats"]


@dataclass
class LayerStats:
    """One layer's routing over the forwards since the last read."""

    layer: int  # index of the decoder layer
    tokens_per_expert: list[float]  # [E] assignments each expert received
    tokens: int  # tokens routed
    dropped_fraction: float  # share of assignments dropped by the capacity limit
    entropy: float  # mean router entropy per token, in units of log(E) (1.0: uniform)
    balance_loss: float  # mean balance loss of the forwards (1.0 at perfect balance)
    z_loss: float  # mean router z-loss of the forwards
    router: dict[str, float] = field(default_factory=dict)  # router state statistics (bias)

    @property
    def max_over_mean(self) -> float:
        """Load of the busiest expert over the mean load (1.0 when balanced, E when collapsed)."""
        mean = sum(self.tokens_per_expert) / max(len(self.tokens_per_expert), 1)
        return max(self.tokens_per_expert) / mean if mean > 0 else 0.0

    @property
    def cv(self) -> float:
        """Coefficient of variation of the expert loads (0.0 when balanced)."""
        loads = self.tokens_per_expert
        mean = sum(loads) / max(len(loads), 1)
        if mean <= 0:
            return 0.0
        return math.sqrt(sum((x - mean) ** 2 for x in loads) / len(loads)) / mean

    @property
    def dead_experts(self) -> int:
        """Experts that received no token."""
        return sum(1 for x in self.tokens_per_expert if x == 0)

    def scalars(self) -> dict[str, float]:
        """The per-layer scalars ``moe_metrics`` reports."""
        out = {
            "max_over_mean": self.max_over_mean,
            "cv": self.cv,
            "dead_experts": float(self.dead_experts),
            "dead_fraction": self.dead_experts / max(len(self.tokens_per_expert), 1),
            "tokens": float(self.tokens),
            "entropy": self.entropy,
            "dropped_fraction": self.dropped_fraction,
            "balance_loss": self.balance_loss,
            "z_loss": self.z_loss,
        }
        out.update(self.router)
        return out


class RoutingStats:
    """Device-side accumulators of one MoE block."""

    def __init__(self, num_experts: int) -> None:
        self.num_experts = num_experts
        self._sums: dict[str, torch.Tensor] | None = None
        self.forwards = 0

    def _zeros(self, device: torch.device) -> dict[str, torch.Tensor]:
        return {
            "counts": torch.zeros(self.num_experts, dtype=torch.float64, device=device),
            "tokens": torch.zeros((), dtype=torch.float64, device=device),
            "assigned": torch.zeros((), dtype=torch.float64, device=device),
            "dropped": torch.zeros((), dtype=torch.float64, device=device),
            "entropy": torch.zeros((), dtype=torch.float64, device=device),
            "balance": torch.zeros((), dtype=torch.float64, device=device),
            "z": torch.zeros((), dtype=torch.float64, device=device),
        }

    @torch.no_grad()
    def add(
        self,
        probs: torch.Tensor,
        counts: torch.Tensor,
        dropped: torch.Tensor | int,
        balance: torch.Tensor | None,
        z: torch.Tensor | None,
        mask: torch.Tensor | None = None,
    ) -> None:
        """Accumulate one forward: ``probs [T, E]``, ``counts [E]`` assignments kept, ``dropped``
        count, ``mask [T]`` False for padding (which counts nowhere)."""
        if self._sums is None:
            self._sums = self._zeros(probs.device)
        sums = self._sums
        sums["counts"] += counts.double()
        sums["assigned"] += counts.sum().double() + dropped
        sums["dropped"] += dropped
        entropy = -(probs * probs.clamp(min=1e-20).log()).sum(-1)  # [T]
        if mask is None:
            sums["tokens"] += probs.shape[0]
        else:
            weight = mask.to(entropy.dtype)
            sums["tokens"] += weight.sum().double()
            entropy = entropy * weight
        if self.num_experts > 1:
            sums["entropy"] += entropy.sum().double() / math.log(self.num_experts)
        if balance is not None:
            sums["balance"] += balance.detach().double()
        if z is not None:
            sums["z"] += z.detach().double()
        self.forwards += 1

    def read(self, layer: int, router: dict[str, float] | None = None) -> LayerStats:
        """The statistics since the last read (one host sync); resets the accumulators."""
        sums = self._sums or self._zeros(torch.device("cpu"))
        values = {k: v.cpu() for k, v in sums.items()}
        forwards = max(self.forwards, 1)
        tokens = float(values["tokens"])
        stats = LayerStats(
            layer=layer,
            tokens_per_expert=values["counts"].tolist(),
            tokens=int(tokens),
            dropped_fraction=float(values["dropped"] / values["assigned"]) if values["assigned"] > 0 else 0.0,
            entropy=float(values["entropy"]) / tokens if tokens else 0.0,
            balance_loss=float(values["balance"]) / forwards,
            z_loss=float(values["z"]) / forwards,
            router=dict(router or {}),
        )
        self._sums = None
        self.forwards = 0
        return stats
