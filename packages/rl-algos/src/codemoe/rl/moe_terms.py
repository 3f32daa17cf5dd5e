"""The MoE side of a policy update: the balance loss of the last forward and the expert-load numbers.

codemoe MoE models keep their routing losses and statistics in their blocks
(:mod:`codemoe.core.moe`); plain ``transformers`` MoE models return ``aux_loss`` on their output
when ``output_router_logits`` is on. Dense models have neither and contribute no balance term.
The trainer scales the unscaled balance loss by the algorithm's own ``balance_coef``, not by the
model config's pre-training coefficient.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from codemoe.core.moe import aux_losses, metrics_from_stats, moe_blocks, read_layer_stats

__all__ = ["balance_loss", "enable_router_outputs", "expert_load"]


def enable_router_outputs(model: torch.nn.Module) -> None:
    """Ask a plain ``transformers`` MoE model to return its balance loss with every forward."""
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "output_router_logits") and not any(moe_blocks(model)):
        config.output_router_logits = True


def balance_loss(model: torch.nn.Module, outputs: Any) -> torch.Tensor | None:
    """The unscaled load-balance loss of the forward that produced ``outputs``, or None (dense)."""
    if any(moe_blocks(model)):
        return aux_losses(model)["balance"]
    aux = getattr(outputs, "aux_loss", None)
    return aux if isinstance(aux, torch.Tensor) else None


def _combine_ranks(layers: list[Any], all_sum: Callable[[torch.Tensor], torch.Tensor]) -> list[Any]:
    """Every rank's routing of the step as one: loads and token counts summed, per-token means
    weighted by tokens, the balance and z losses averaged over ranks (each is a per-rank statistic)."""
    out = []
    for stats in layers:
        tokens = float(stats.tokens)
        local = torch.tensor(
            [
                *stats.tokens_per_expert,
                tokens,
                tokens * stats.entropy,
                tokens * stats.dropped_fraction,
                stats.balance_loss,
                stats.z_loss,
                1.0,
            ],
            dtype=torch.float64,
        )
        total = all_sum(local).tolist()
        experts = len(stats.tokens_per_expert)
        counts, (tok, ent, drop, bal, z, world) = total[:experts], total[experts:]
        out.append(
            dataclasses.replace(
                stats,
                tokens_per_expert=counts,
                tokens=int(tok),
                entropy=ent / tok if tok else 0.0,
                dropped_fraction=drop / tok if tok else 0.0,
                balance_loss=bal / world,
                z_loss=z / world,
            )
        )
    return out


def expert_load(
    model: torch.nn.Module, all_sum: Callable[[torch.Tensor], torch.Tensor] | None = None
) -> dict[str, float]:
    """The step's routing metrics; empty when dense.

    The aggregates (``moe/max_over_mean``, ``moe/cv``, ...) and each expert's share of the layer's
    routed tokens as ``expert_load/<layer>/<expert>`` (the report's expert-load heatmap over
    training). Reading closes the routing step (routers with a balancing bias update it), so call it
    once per optimizer step. With ``all_sum`` (data parallelism; every rank calls it) the numbers
    cover every rank's tokens.
    """
    if not any(moe_blocks(model)):
        return {}
    layers = read_layer_stats(model)
    if all_sum is not None:  # data parallelism: the step's routing over every rank's tokens
        layers = _combine_ranks(layers, all_sum)
    out = {k: v for k, v in metrics_from_stats(layers).items() if k.count("/") == 1}
    for stats in layers:
        total = sum(stats.tokens_per_expert) or 1.0
        for expert, tokens in enumerate(stats.tokens_per_expert):
            out[f"expert_load/{stats.layer}/{expert}"] = tokens / total
    return out
