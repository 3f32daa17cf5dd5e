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

    def check_metrics(self, metrics: dict[str, float]) -> list[RouterCollapse]:
        """The same check on the flat ``moe/layer<i>/...`` scalars of :func:`~codemoe.core.moe.moe_metrics`.

        For monitors that only see a step's metrics dict (a ``codemoe_after_train_step`` plugin).
        """
        layers: dict[int, dict[str, float]] = {}
        for key, value in metrics.items():
            parts = key.split("/")
            if len(parts) == 3 and parts[0] == "moe" and parts[1].startswith("layer"):
                layers.setdefault(int(parts[1][len("layer") :]), {})[parts[2]] = value
        found = []
        for layer, values in sorted(layers.items()):
            reasons = self._reasons(values["tokens"], values["max_over_mean"], values["dead_fraction"])
            if reasons:
                found.append(RouterCollapse(layer, reasons, []))
        return found

    def warn(self, layers: list[LayerStats]) -> list[RouterCollapse]:
        """:meth:`check`, and warn (``CollapseWarning`` and the ``codemoe.moe`` logger) per tripped layer."""
        found = self.check(layers)
        for item in found:
            log.warning(item.message())
            warnings.warn(item.message(), CollapseWarning, stacklevel=2)
        return found

    def _check_layer(self, stats: LayerStats) -> RouterCollapse | None:
        num_experts = len(stats.tokens_per_expert)
        dead_fraction = stats.dead_experts / num_experts if num_experts else 0.0
        reasons = self._reasons(stats.tokens, stats.max_over_mean, dead_fraction)
        if not reasons:
            return None
        return RouterCollapse(stats.layer, reasons, stats.tokens_per_expert)

    def _reasons(self, tokens: float, max_over_mean: float, dead_fraction: float) -> list[str]:
        cfg = self.config
        if tokens < cfg.min_tokens:
            return []
        reasons = []
        if max_over_mean > cfg.max_over_mean:
            reasons.append(f"busiest expert has {max_over_mean:.2f}x the mean load (limit {cfg.max_over_mean})")
        if dead_fraction > cfg.dead_fraction:
            reasons.append(f"{dead_fraction:.0%} of the experts received no token (limit {cfg.dead_fraction:.0%})")
        return reasons
