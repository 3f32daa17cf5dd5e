"""Loss aggregation: how per-token losses ``[B, T]`` become one scalar.

An aggregator (kind ``loss_agg``, :class:`LossAggregator`) splits the loss into a numerator and a
denominator, and the trainer relies on two properties of them to make a step's loss independent of
how its rows are split into forwards (``micro_batch_size``) and ranks:

- ``terms(per_token, mask)[0]``, the numerator, is a sum of one term per row (a row's term depends on
  that row alone), so the numerators of any split of the rows add up to the whole batch's;
- ``denominator(mask)`` depends on the mask alone (never on the losses), so the trainer computes it
  once for the whole minibatch, all-reduced over ranks, before any forward runs.

Each forward's loss is then its numerator over the whole minibatch's denominator, and the forwards'
gradients add up to the one-forward gradient. The built-in modes:

- ``token_mean``: sum over all tokens / number of tokens (DAPO): long answers weigh more;
- ``seq_mean_token_mean``: mean over sequences of each sequence's token mean (original GRPO);
- ``seq_mean_token_sum_norm``: sum over all tokens / (sequences * horizon) (Dr.GRPO): a constant
  normaliser, so neither length nor batch composition biases the gradient.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

__all__ = [
    "LossAggregator",
    "SeqMeanTokenMean",
    "SeqMeanTokenMeanConfig",
    "SeqMeanTokenSumNorm",
    "SeqMeanTokenSumNormConfig",
    "TokenMean",
    "TokenMeanConfig",
    "aggregate",
]


@runtime_checkable
class LossAggregator(Protocol):
    """What the trainer calls on a ``loss_agg`` component (see the module docstring for the two
    properties it relies on)."""

    def terms(self, per_token: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """``(numerator, denominator)`` of a chunk of rows: a sum of per-row terms, and
        :meth:`denominator` of its mask."""
        ...

    def denominator(self, mask: Tensor) -> Tensor:
        """The normaliser of a batch with valid-token ``mask [B, T]``: a function of the mask alone."""
        ...


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
        return (per_token * mask).sum(), self.denominator(mask)

    def denominator(self, mask: Tensor) -> Tensor:
        return mask.sum()


@dataclass
class SeqMeanTokenMeanConfig:
    """seq_mean_token_mean has no options."""


class SeqMeanTokenMean:
    """Mean over sequences of the per-sequence token mean; empty sequences count as 0."""

    def __init__(self, config: SeqMeanTokenMeanConfig) -> None:
        self.config = config

    def terms(self, per_token: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        seq = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)  # [B]
        return seq.sum(), self.denominator(mask)

    def denominator(self, mask: Tensor) -> Tensor:
        return torch.tensor(float(mask.shape[0]), device=mask.device)


@dataclass
class SeqMeanTokenSumNormConfig:
    """Options of seq_mean_token_sum_norm."""

    horizon: int = 0  # the constant token normaliser; 0: the batch's padded length T (max_new_tokens)


class SeqMeanTokenSumNorm:
    """Sum over all valid tokens divided by ``sequences * horizon``."""

    def __init__(self, config: SeqMeanTokenSumNormConfig) -> None:
        self.config = config

    def terms(self, per_token: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        return (per_token * mask).sum(), self.denominator(mask)

    def denominator(self, mask: Tensor) -> Tensor:
        horizon = self.config.horizon or mask.shape[1]
        return torch.tensor(float(mask.shape[0] * horizon), device=mask.device)
