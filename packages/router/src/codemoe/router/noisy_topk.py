"""Noisy top-k gating (Shazeer et al. 2017): Gaussian noise on the logits while training.

``H = x·W + ε · softplus(x·W_noise)`` with ``ε ~ N(0, 1)``; the top-k of ``H`` are kept and the
softmax is taken over them. The noise lets experts that are narrowly losing receive tokens, which
helps balance early in training. Evaluation and generation route without noise. With
``learned_noise`` off, the noise scale is the constant ``noise_std``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from codemoe.core.moe import Router, RouterOutput
from torch import nn

__all__ = ["NoisyTopKConfig", "NoisyTopKRouter", "build"]


@dataclass
class NoisyTopKConfig:
    """Options of noisy top-k gating."""

    top_k: int = 2  # experts per token
    learned_noise: bool = True  # per-token noise scale softplus(x·W_noise) (False: the constant noise_std)
    noise_std: float = 1.0  # noise scale when learned_noise is False


class NoisyTopKRouter(Router):
    """Top-k of noisy logits (training only), softmax over the kept ones."""

    def __init__(self, config: NoisyTopKConfig, hidden_size: int, num_experts: int) -> None:
        super().__init__(hidden_size, num_experts, config.top_k)
        self.config = config
        self.noise_weight = nn.Parameter(torch.zeros(num_experts, hidden_size)) if config.learned_noise else None

    def route(self, x: torch.Tensor, token_ids: torch.Tensor | None = None) -> RouterOutput:
        logits = self.logits(x)  # [T, E] fp32
        noisy = logits
        if self.training:
            if self.noise_weight is not None:
                scale = F.softplus(F.linear(x.float(), self.noise_weight.float()))
            else:
                scale = torch.full_like(logits, self.config.noise_std)
            noisy = logits + torch.randn_like(logits) * scale
        top, indices = noisy.topk(self.top_k, dim=-1)
        weights = torch.softmax(top, dim=-1)
        return RouterOutput(logits=logits, probs=torch.softmax(logits, dim=-1), weights=weights, indices=indices)


def build(config: NoisyTopKConfig, *, hidden_size: int, num_experts: int) -> NoisyTopKRouter:
    """Noisy top-k gating: Gaussian noise on the logits in training (Shazeer et al. 2017)."""
    return NoisyTopKRouter(config, hidden_size, num_experts)
