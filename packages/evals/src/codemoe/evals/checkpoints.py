"""Loading the policy to evaluate from a checkpoint directory (no download, ever)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["load_policy"]


def load_policy(path: str | Path, *, registry: Any = None) -> tuple[Any, Any]:
    """``(model, tokenizer)`` in eval mode, by :func:`codemoe.core.models.load_policy` (codemoe and
    Qwen3-MoE checkpoints with codemoe's blocks from ``registry``, other causal LMs through
    ``transformers``)."""
    from codemoe.core.models import load_policy as load

    return load(path, registry=registry)
