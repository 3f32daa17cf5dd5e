"""Importance-sampling correction between the engine that sampled and the trainer that learns.

The engine (another kernel, another precision, sometimes stale weights) gives each sampled token a
log-prob ``engine_logp``; the trainer recomputes ``old_logp`` for the same tokens with the weights
that sampled them. Where they disagree the samples are slightly off-policy. Truncated IS (TIS)
multiplies each token's loss by ``min(exp(old_logp - engine_logp), cap)``, detached: the bias of the
mismatch is corrected and the cap bounds the variance. Registered as kind ``is_correction``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["ISStats", "NoCorrection", "NoCorrectionConfig", "TruncatedIS", "TruncatedISConfig", "mismatch_stats"]


@dataclass
class ISStats:
    """The engine/trainer mismatch of one batch, over valid tokens."""

    ratio_mean: float
    ratio_min: float
    ratio_max: float
    truncated_frac: float  # fraction of tokens whose weight hit the cap
    logp_abs_diff_mean: float  # mean |old_logp - engine_logp|
    logp_abs_diff_max: float


def mismatch_stats(old_logp: Tensor, engine_logp: Tensor, mask: Tensor, cap: float | None) -> ISStats:
    """Summarise ``exp(old_logp - engine_logp)`` over the tokens in ``mask`` (all ``[B, T]``)."""
    valid = mask.bool()
    if not valid.any():
        return ISStats(1.0, 1.0, 1.0, 0.0, 0.0, 0.0)
    diff = (old_logp - engine_logp)[valid]
    ratio = torch.exp(diff)
    truncated = (ratio > cap).float().mean().item() if cap is not None else 0.0
    return ISStats(
        ratio_mean=ratio.mean().item(),
        ratio_min=ratio.min().item(),
        ratio_max=ratio.max().item(),
        truncated_frac=truncated,
        logp_abs_diff_mean=diff.abs().mean().item(),
        logp_abs_diff_max=diff.abs().max().item(),
    )


@dataclass
class TruncatedISConfig:
    """Options of truncated importance sampling."""

    cap: float = 2.0  # upper bound C on the per-token weight (the TIS paper uses 2)


class TruncatedIS:
    """Per-token weight ``min(exp(old_logp - engine_logp), cap)``, no gradient."""

    def __init__(self, config: TruncatedISConfig) -> None:
        if config.cap <= 0:
            raise ValueError(f"is_correction.cap must be > 0, got {config.cap}")
        self.config = config
        self.cap: float | None = config.cap

    def __call__(self, old_logp: Tensor, engine_logp: Tensor) -> Tensor:
        return torch.exp(old_logp - engine_logp).clamp(max=self.config.cap).detach()


@dataclass
class NoCorrectionConfig:
    """Turning the correction off has no options; the mismatch is still reported."""


class NoCorrection:
    """Weight 1 for every token: trust the engine's samples as on-policy."""

    cap: float | None = None

    def __init__(self, config: NoCorrectionConfig) -> None:
        self.config = config

    def __call__(self, old_logp: Tensor, engine_logp: Tensor) -> Tensor:
        return torch.ones_like(old_logp)
