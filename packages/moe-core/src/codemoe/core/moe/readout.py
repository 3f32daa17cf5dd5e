"""What trainers read from a model's MoE blocks: losses of the last forward and per-step metrics."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from codemoe.core.moe.block import MoEBlock
from codemoe.core.moe.metrics import LayerStats
from torch import nn

__all__ = ["aux_losses", "metrics_from_stats", "moe_blocks", "moe_metrics", "read_layer_stats"]


def moe_blocks(model: nn.Module) -> Iterator[MoEBlock]:
    """The MoE blocks of ``model`` in module order."""
    for module in model.modules():
        if isinstance(module, MoEBlock):
            yield module


def aux_losses(model: nn.Module) -> dict[str, torch.Tensor]:
    """Balance and z losses of the last forward, averaged over MoE layers, unscaled and differentiable.

    Keys: ``balance`` (1.0 at perfect balance, see :mod:`codemoe.core.moe.balance`), ``z``, and
    ``weighted``: ``balance_coef · balance + z_coef · z`` with each layer's coefficients from the
    model config, the term a trainer adds to its loss.
    """
    blocks = [b for b in moe_blocks(model) if b.last_losses]
    if not blocks:
        zero = torch.zeros(())
        return {"balance": zero, "z": zero, "weighted": zero}
    balance = torch.stack([b.last_losses["balance"] for b in blocks]).mean()
    z = torch.stack([b.last_losses["z"] for b in blocks]).mean()
    weighted = torch.stack(
        [b.options.balance_coef * b.last_losses["balance"] + b.options.z_coef * b.last_losses["z"] for b in blocks]
    ).mean()
    return {"balance": balance, "z": z, "weighted": weighted}


def read_layer_stats(model: nn.Module) -> list[LayerStats]:
    """Close the step: apply router state updates (the balancing bias) and read every layer's statistics.

    Call once per optimizer step; accumulators reset.
    """
    return [block.stats.read(block.layer, block.gate.end_step()) for block in moe_blocks(model)]


def moe_metrics(model: nn.Module) -> dict[str, float]:
    """Routing metrics since the last call, per layer (``moe/layer{i}/...``) and aggregated (``moe/...``).

    Read once per step: it closes the step like :func:`read_layer_stats` (routers with a balancing
    bias update it from the step's loads). Aggregates are the mean over layers, except
    ``max_over_mean`` (the worst layer) and ``dead_experts`` (the sum).
    """
    return metrics_from_stats(read_layer_stats(model))


def metrics_from_stats(layers: list[LayerStats]) -> dict[str, float]:
    """The :func:`moe_metrics` dictionary of statistics already read with :func:`read_layer_stats`."""
    out: dict[str, float] = {}
    per_name: dict[str, list[float]] = {}
    for stats in layers:
        for name, value in stats.scalars().items():
            out[f"moe/layer{stats.layer}/{name}"] = value
            per_name.setdefault(name, []).append(value)
    for name, values in per_name.items():
        if name == "max_over_mean":
            out[f"moe/{name}"] = max(values)
        elif name == "dead_experts":
            out[f"moe/{name}"] = sum(values)
        else:
            out[f"moe/{name}"] = sum(values) / len(values)
    return out
