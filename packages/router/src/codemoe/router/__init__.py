"""Routing strategies for codemoe MoE blocks, registered under kind ``router``."""

from codemoe.router.softmax_topk import SoftmaxTopKConfig, SoftmaxTopKRouter

__all__ = ["SoftmaxTopKConfig", "SoftmaxTopKRouter"]
