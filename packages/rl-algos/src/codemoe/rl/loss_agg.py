"""Loss aggregation: how per-token losses ``[B, T]`` become one scalar.

An aggregator returns ``(numerator, denominator)`` for a local chunk; the trainer sums both over
every minibatch chunk and rank that make up one optimizer step and divides, so the result does not
depend on how the batch was split. Registered as kind ``loss_agg``:

- ``token_mean``: sum over all tokens / number of tokens (DAPO): long answers weigh more;
- ``seq_mean_token_mean``: mean over sequences of each sequence's token mean (original GRPO);
- ``seq_mean_token_sum_norm``: sum over all tokens / (sequences * horizon) (Dr.GRPO): a constant
  normaliser, so neither length nor batch composition biases the gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    "SeqMeanTokenMean",
    "SeqMeanTokenMeanConfig",
    "SeqMeanTokenSumNorm",
    "SeqMeanTokenSumNormConfig",
    "TokenMean",
    "TokenMeanConfig",
    "aggregate",
]


def aggregate(aggregator, per_token: Tensor, mask: Tensor) -> Tensor:
    """The aggregated loss of one whole batch: ``numerator / denominator``."""
    numerator, denominator = aggregator.terms(per_token, mask)
    return numerator / denominator.clamp(min=1e-8)


@dataclass
class TokenMeanConfig:
    """token_mean has no options."""


class TokenMean:
    """Mean over every valid token of the batch."""

    def __init__(self, config: TokenMeanConfig) -> None:
        self.config = config

    def terms(self, per_token: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        return (per_token * mask).sum(), mask.sum()


@dataclass
class SeqMeanTokenMeanConfig:
    """seq_mean_token_mean has no options."""


class SeqMeanTokenMean:
    """Mean over sequences of the per-sequence token mean; empty sequences count as 0."""

    def __init__(self, config: SeqMeanTokenMeanConfig) -> None:
        self.config = config

    def terms(self, per_token: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        seq = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)  # [B]
        return seq.sum(), torch.tensor(float(mask.shape[0]), device=mask.device)


@dataclass
class SeqMeanTokenSumNormConfig:
    """Options of seq_mean_token_sum_norm."""

    horizon: int = 0  # the constant token normaliser; 0: the batch's padded length T (max_new_tokens)


class SeqMeanTokenSumNorm:
    """Sum over all valid tokens divided by ``sequences * horizon``."""

    def __init__(self, config: SeqMeanTokenSumNormConfig) -> None:
        self.config = config

    def terms(self, per_token: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        horizon = self.config.horizon or mask.shape[1]
        return (per_token * mask).sum(), torch.tensor(float(mask.shape[0] * horizon), device=mask.device)
