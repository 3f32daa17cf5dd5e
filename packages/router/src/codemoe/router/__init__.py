"""Routing strategies for codemoe MoE blocks, registered under kind ``router``.

Each router is a :class:`codemoe.core.moe.Router`: ``weight [E, H]`` (saved as ``gate.weight``),
fp32 logits, and a ``route(x)`` that returns the chosen experts and their combine weights.
"""

from codemoe.router.expert_choice import ExpertChoiceConfig, ExpertChoiceRouter
from codemoe.router.group_limited import GroupLimitedConfig, GroupLimitedRouter
from codemoe.router.groups import group_mask
from codemoe.router.hash_routing import HashConfig, HashRouter
from codemoe.router.noisy_topk import NoisyTopKConfig, NoisyTopKRouter
from codemoe.router.sigmoid_bias import SigmoidBiasConfig, SigmoidBiasRouter
from codemoe.router.softmax_topk import SoftmaxTopKConfig, SoftmaxTopKRouter

__all__ = [
    "ExpertChoiceConfig",
    "ExpertChoiceRouter",
    "GroupLimitedConfig",
    "GroupLimitedRouter",
    "HashConfig",
    "HashRouter",
    "NoisyTopKConfig",
    "NoisyTopKRouter",
    "SigmoidBiasConfig",
    "SigmoidBiasRouter",
    "SoftmaxTopKConfig",
    "SoftmaxTopKRouter",
    "group_mask",
]
