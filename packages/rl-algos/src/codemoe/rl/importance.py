"""Importance-sampling corrections between the policy that sampled and the policy that learns.

The engine (another kernel, another precision, and with asynchronous rollouts weights up to
``max_staleness`` steps old) gives each sampled token a log-prob ``engine_logp``: the *behaviour*
policy's. The trainer recomputes ``old_logp`` for the same tokens with its weights at the start of
the update: the *proximal* policy, which the PPO ratio ``pi / pi_old`` is taken against. Where the
two disagree the samples are off-policy, and a strategy (kind ``is_correction``) turns the ratio
``rho = exp(old_logp - engine_logp)`` into a detached per-token weight of the loss:

- ``truncated``: truncated IS (TIS), ``min(rho, cap)``; ``level: sequence`` uses one ratio per
  sequence, the product of its tokens' ratios ``exp(sum_t log rho_t)``, truncated the same way;
- ``masked``: masked IS (MIS), ``rho`` where it lies inside ``[low, high]`` and 0 outside (the token,
  or with ``level: sequence`` the whole sequence, is dropped; it stays in the loss normaliser);
- ``decoupled``: the decoupled PPO objective (AReaL): ``rho`` itself, the behaviour-to-proximal
  correction, with the trainer's clipped ratio against the proximal policy; tokens whose ``rho``
  exceeds ``cap`` (when set) are dropped rather than truncated;
- ``none``: weight 1.

Every weight is a function of ``(old_logp, engine_logp, mask)``, all ``[B, T]``; ``mask`` marks the
sampled tokens a sequence-level ratio is taken over.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from codemoe.core.errors import ConfigError
from torch import Tensor

__all__ = [
    "DecoupledIS",
    "DecoupledISConfig",
    "ISStats",
    "MaskedIS",
    "MaskedISConfig",
    "NoCorrection",
    "NoCorrectionConfig",
    "TruncatedIS",
    "TruncatedISConfig",
    "mismatch_stats",
]

LEVELS = ("token", "sequence")


@dataclass
class ISStats:
    """The engine/trainer mismatch of one batch, over valid tokens."""

    ratio_mean: float
    ratio_min: float
    ratio_max: float
    truncated_frac: float  # fraction of tokens whose weight hit the cap
    logp_abs_diff_mean: float  # mean |old_logp - engine_logp|
    logp_abs_diff_max: float
    # the weights the loss used (1 everywhere when none are given)
    weight_mean: float = 1.0
    weight_min: float = 1.0
    weight_max: float = 1.0
    masked_frac: float = 0.0  # fraction of tokens whose weight is 0 (dropped by masked IS)


def mismatch_stats(
    old_logp: Tensor, engine_logp: Tensor, mask: Tensor, cap: float | None, weights: Tensor | None = None
) -> ISStats:
    """Summarise ``exp(old_logp - engine_logp)`` and the correction's ``weights`` over the tokens in
    ``mask`` (all ``[B, T]``)."""
    valid = mask.bool()
    if not valid.any():
        return ISStats(1.0, 1.0, 1.0, 0.0, 0.0, 0.0)
    diff = (old_logp - engine_logp)[valid]
    ratio = torch.exp(diff)
    truncated = (ratio > cap).float().mean().item() if cap is not None else 0.0
    w = weights[valid] if weights is not None else torch.ones_like(ratio)
    return ISStats(
        ratio_mean=ratio.mean().item(),
        ratio_min=ratio.min().item(),
        ratio_max=ratio.max().item(),
        truncated_frac=truncated,
        logp_abs_diff_mean=diff.abs().mean().item(),
        logp_abs_diff_max=diff.abs().max().item(),
        weight_mean=w.mean().item(),
        weight_min=w.min().item(),
        weight_max=w.max().item(),
        masked_frac=(w == 0).float().mean().item(),
    )


def _log_ratio(old_logp: Tensor, engine_logp: Tensor, mask: Tensor | None, level: str) -> Tensor:
    """``[B, T]`` log-ratio per token, or each sequence's summed over its ``mask`` tokens and
    broadcast to them (``level: sequence``)."""
    log_ratio = old_logp - engine_logp
    if level == "token":
        return log_ratio
    mask = torch.ones_like(log_ratio) if mask is None else mask
    return (log_ratio * mask).sum(-1, keepdim=True).expand_as(log_ratio)


def _check_level(level: str) -> None:
    if level not in LEVELS:
        raise ConfigError(f"'is_correction.level': {level!r} is not one of {', '.join(LEVELS)}")


@dataclass
class TruncatedISConfig:
    """Options of truncated importance sampling."""

    cap: float = 2.0  # upper bound C on the weight (the TIS paper uses 2)
    level: str = "token"  # token: one ratio per token | sequence: one per sequence (product of its tokens')


class TruncatedIS:
    """Weight ``min(rho, cap)`` per token or per sequence, no gradient."""

    def __init__(self, config: TruncatedISConfig) -> None:
        if config.cap <= 0:
            raise ConfigError(f"'is_correction.cap' must be > 0, got {config.cap}")
        _check_level(config.level)
        self.config = config
        self.cap: float | None = config.cap

    def __call__(self, old_logp: Tensor, engine_logp: Tensor, mask: Tensor | None = None) -> Tensor:
        log_ratio = _log_ratio(old_logp, engine_logp, mask, self.config.level)
        return torch.exp(log_ratio).clamp(max=self.config.cap).detach()


@dataclass
class MaskedISConfig:
    """Options of masked importance sampling: the band a ratio must lie in to be kept."""

    low: float = 0.5  # ratios below are dropped
    high: float = 2.0  # ratios above are dropped
    level: str = "token"  # token: drop tokens | sequence: drop whole sequences (product of the tokens' ratios)


class MaskedIS:
    """Weight ``rho`` inside ``[low, high]``, 0 outside, per token or per sequence; no gradient."""

    cap: float | None = None

    def __init__(self, config: MaskedISConfig) -> None:
        if not 0 <= config.low < 1 < config.high:
            raise ConfigError(f"'is_correction': need 0 <= low < 1 < high, got low={config.low}, high={config.high}")
        _check_level(config.level)
        self.config = config

    def __call__(self, old_logp: Tensor, engine_logp: Tensor, mask: Tensor | None = None) -> Tensor:
        ratio = torch.exp(_log_ratio(old_logp, engine_logp, mask, self.config.level))
        inside = (ratio >= self.config.low) & (ratio <= self.config.high)
        return torch.where(inside, ratio, torch.zeros_like(ratio)).detach()


@dataclass
class DecoupledISConfig:
    """Options of the decoupled PPO objective's behaviour weight."""

    cap: float | None = None  # tokens whose weight exceeds it are dropped (AReaL's behaviour-weight cap); null: none


class DecoupledIS:
    """The decoupled PPO objective (Hilton et al. 2022; AReaL): the loss of a token is
    ``pi_prox / pi_behav * clipped_surrogate(pi / pi_prox)``, with ``pi_prox`` the policy at the start
    of the update (the trainer's ``old_logp``) and ``pi_behav`` the engine's (``engine_logp``). The
    trainer supplies the clipped surrogate against ``old_logp``; this gives the behaviour weight."""

    cap: float | None = None

    def __init__(self, config: DecoupledISConfig) -> None:
        if config.cap is not None and config.cap <= 1:
            raise ConfigError(f"'is_correction.cap' must be > 1 or null, got {config.cap}")
        self.config = config

    def __call__(self, old_logp: Tensor, engine_logp: Tensor, mask: Tensor | None = None) -> Tensor:
        weight = torch.exp(old_logp - engine_logp)
        if self.config.cap is not None:
            weight = torch.where(weight > self.config.cap, torch.zeros_like(weight), weight)
        return weight.detach()


@dataclass
class NoCorrectionConfig:
    """Turning the correction off has no options; the mismatch is still reported."""


class NoCorrection:
    """Weight 1 for every token: trust the engine's samples as on-policy."""

    cap: float | None = None

    def __init__(self, config: NoCorrectionConfig) -> None:
        self.config = config

    def __call__(self, old_logp: Tensor, engine_logp: Tensor, mask: Tensor | None = None) -> Tensor:
        return torch.ones_like(old_logp)
