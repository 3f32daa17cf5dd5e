"""The MoE side of a policy update: the balance loss of the last forward and the expert-load numbers.

codemoe MoE models record their routing in their blocks (``codemoe.core.moe``); transformers MoE
models return ``aux_loss`` on their output when ``output_router_logits`` is on. Dense models
have neither, and contribute no balance term.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["balance_loss", "enable_router_outputs"]


def enable_router_outputs(model: torch.nn.Module) -> None:
    """Ask a transformers MoE model to return its balance loss with every forward."""
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "output_router_logits"):
        config.output_router_logits = True


def balance_loss(model: torch.nn.Module, outputs: Any) -> torch.Tensor | None:
    """The unscaled load-balance loss of the forward that produced ``outputs``, or None (dense)."""
    aux = getattr(outputs, "aux_loss", None)
    return aux if isinstance(aux, torch.Tensor) else None
