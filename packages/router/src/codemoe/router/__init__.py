"""Routing strategies for codemoe MoE blocks, registered under kind ``router``.

Each router is a :class:`codemoe.core.moe.Router`: ``weight [E, H]`` (saved as ``gate.weight``),
fp32 logits, and a ``route(x)`` that returns the chosen experts and their combine weights.

Names are imported on first use (PEP 562), so loading the plugin entry point does not import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ExpertChoiceConfig": "expert_choice",
    "ExpertChoiceRouter": "expert_choice",
    "GroupLimitedConfig": "group_limited",
    "GroupLimitedRouter": "group_limited",
    "HashConfig": "hash_routing",
    "HashRouter": "hash_routing",
    "NoisyTopKConfig": "noisy_topk",
    "NoisyTopKRouter": "noisy_topk",
    "SigmoidBiasConfig": "sigmoid_bias",
    "SigmoidBiasRouter": "sigmoid_bias",
    "SoftmaxTopKConfig": "softmax_topk",
    "SoftmaxTopKRouter": "softmax_topk",
    "group_mask": "groups",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'codemoe.router' has no attribute {name!r}")
    return getattr(importlib.import_module(f"codemoe.router.{_EXPORTS[name]}"), name)


def __dir__() -> list[str]:
    return __all__
