"""Policy losses: per-token surrogate losses from new and old log-probs and advantages.

Each loss is registered as kind ``policy_loss`` and returns a :class:`PolicyLossOutput` whose
``per_token`` tensor ``[B, T]`` is then reduced by a loss aggregation (``loss_agg``). Every loss is
called as ``loss(logp, old_logp, advantages, mask)`` with ``[B, T]`` tensors. Signs: the value is a loss to minimise, so a positive advantage lowers it when the ratio grows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    "GSPOConfig",
    "GSPOLoss",
    "PPOClipConfig",
    "PPOClipLoss",
    "PolicyLossOutput",
]


@dataclass
class PolicyLossOutput:
    """Per-token loss and what the trainer reports about it."""

    per_token: Tensor  # [B, T] loss before aggregation (masked positions are ignored by the aggregator)
    ratio: Tensor  # [B, T] importance ratio pi/pi_old that the loss used (detached)
    clipped: Tensor  # [B, T] bool: the clipped branch was active (no gradient through the ratio)


def _clipped_surrogate(ratio: Tensor, advantages: Tensor, low: float, high: float) -> tuple[Tensor, Tensor]:
    """``max(-A r, -A clip(r, 1-low, 1+high))`` and where the clipped branch won."""
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - low, 1.0 + high)
    return torch.maximum(unclipped, clipped), clipped > unclipped


@dataclass
class PPOClipConfig:
    """Options of the PPO clipped-ratio loss."""

    clip_low: float = 0.2  # epsilon below 1: ratio is clipped at 1 - clip_low
    clip_high: float = 0.2  # epsilon above 1; DAPO's clip-higher raises it (0.28) to keep exploring
    dual_clip: float | None = None  # dual-clip constant c > 1: for A < 0 the loss is capped at -c*A; None: off


class PPOClipLoss:
    """PPO clipped surrogate with separate low/high epsilon (clip-higher) and optional dual clip."""

    def __init__(self, config: PPOClipConfig) -> None:
        if config.dual_clip is not None and config.dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1 (got {config.dual_clip}); use null to turn it off")
        self.config = config

    def __call__(self, logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor) -> PolicyLossOutput:
        # logp, old_logp, advantages, mask: [B, T] (the ratio is per token, so mask is not needed here)
        ratio = torch.exp(logp - old_logp)
        loss, clipped = _clipped_surrogate(ratio, advantages, self.config.clip_low, self.config.clip_high)
        if self.config.dual_clip is not None:
            cap = -advantages * self.config.dual_clip
            dual = (advantages < 0) & (loss > cap)
            loss = torch.where(dual, cap, loss)
            clipped = clipped | dual
        return PolicyLossOutput(loss, ratio.detach(), clipped)


@dataclass
class GSPOConfig:
    """Options of GSPO (sequence-level ratio). Its epsilons are far smaller than PPO's."""

    clip_low: float = 3e-4  # the GSPO paper's values
    clip_high: float = 4e-4


class GSPOLoss:
    """GSPO: one ratio per sequence, ``exp(mean_t log(pi/pi_old))``, clipped like PPO.

    Every token of a sequence carries the same ratio; the gradient flows through the mean log-ratio,
    so each token is weighted equally regardless of sequence length. Aggregate with
    ``seq_mean_token_mean``.
    """

    def __init__(self, config: GSPOConfig) -> None:
        self.config = config

    def __call__(self, logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor) -> PolicyLossOutput:
        # logp, old_logp, advantages, mask: [B, T]
        log_ratio = ((logp - old_logp) * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)  # [B]
        ratio = torch.exp(log_ratio).unsqueeze(-1).expand_as(logp)  # [B, T]
        loss, clipped = _clipped_surrogate(ratio, advantages, self.config.clip_low, self.config.clip_high)
        return PolicyLossOutput(loss, ratio.detach(), clipped)
