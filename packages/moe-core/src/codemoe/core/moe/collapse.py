"""Router collapse detection (路由坍缩): a few experts take all the tokens.

A collapsed layer wastes its experts: the MoE degenerates into a small dense model. The
detector reads one step's :class:`~codemoe.core.moe.metrics.LayerStats` and reports every layer
past a threshold, with the numbers and the remedy.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass

from codemoe.core.moe.metrics import LayerStats

__all__ = ["CollapseConfig", "CollapseDetector", "CollapseWarning", "RouterCollapse"]

log = logging.getLogger("codemoe.moe")

REMEDY = (
    "raise the balance loss weight (balance_coef) or, with the sigmoid_bias router, the bias update rate "
    "(bias_rate); check the router warm-up phase"
)


class CollapseWarning(UserWarning):
    """Warning category of router collapse reports."""


@dataclass
class CollapseConfig:
    """Thresholds of the collapse detector (a layer trips on any one of them)."""

    max_over_mean: float = 3.0  # busiest expert's load over the mean load (1.0 balanced, E collapsed)
    dead_fraction: float = 0.25  # share of experts that got no token this step
    min_tokens: int = 64  # ignore steps that routed fewer tokens than this (too few to judge)


@dataclass
class RouterCollapse:
    """One layer that tripped the detector."""

    layer: int
    reasons: list[str]
    loads: list[float]

    def message(self) -> str:
        return f"router collapse in MoE layer {self.layer}: {'; '.join(self.reasons)}. Remedy: {REMEDY}."


class CollapseDetector:
    """Check per-layer routing statistics against :class:`CollapseConfig` thresholds."""

    def __init__(self, config: CollapseConfig | None = None) -> None:
        self.config = config or CollapseConfig()

    def check(self, layers: list[LayerStats]) -> list[RouterCollapse]:
        """The layers that tripped (empty when routing is healthy)."""
        return [found for stats in layers if (found := self._check_layer(stats)) is not None]

    def warn(self, layers: list[LayerStats]) -> list[RouterCollapse]:
        """:meth:`check`, and warn (``CollapseWarning`` and the ``codemoe.moe`` logger) per tripped layer."""
        found = self.check(layers)
        for item in found:
            log.warning(item.message())
            warnings.warn(item.message(), CollapseWarning, stacklevel=2)
        return found

    def _check_layer(self, stats: LayerStats) -> RouterCollapse | None:
        cfg = self.config
        if stats.tokens < cfg.min_tokens:
            return None
        reasons = []
        num_experts = len(stats.tokens_per_expert)
        if stats.max_over_mean > cfg.max_over_mean:
            reasons.append(f"busiest expert has {stats.max_over_mean:.2f}x the mean load (limit {cfg.max_over_mean})")
        dead = stats.dead_experts
        if num_experts and dead / num_experts > cfg.dead_fraction:
            reasons.append(f"{dead}/{num_experts} experts received no token (limit {cfg.dead_fraction:.0%})")
        if not reasons:
            return None
        return RouterCollapse(stats.layer, reasons, stats.tokens_per_expert)
