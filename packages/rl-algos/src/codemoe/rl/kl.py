"""KL estimators between the policy and a frozen reference policy, per token.

With ``log_ratio = logp - ref_logp`` sampled under the policy (Schulman, "Approximating KL
Divergence", 2020):

- ``k1 = log_ratio``: unbiased, high variance, can be negative;
- ``k2 = log_ratio**2 / 2``: biased, low variance, its gradient is the true KL gradient's
  first-order term;
- ``k3 = exp(-log_ratio) + log_ratio - 1``: unbiased and always >= 0 (GRPO's choice).

Registered as kind ``kl``. Whether the penalty enters the loss or the reward is the algorithm's
``kl_in_reward`` option, not the estimator's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["K1", "K2", "K3", "KLConfig"]


@dataclass
class KLConfig:
    """KL estimators have one option."""

    clamp: float | None = 10.0  # clamp |log_ratio| before the estimate (keeps k3's exp finite); None: off


class _Estimator:
    def __init__(self, config: KLConfig) -> None:
        self.config = config

    def _log_ratio(self, logp: Tensor, ref_logp: Tensor) -> Tensor:
        log_ratio = logp - ref_logp
        if self.config.clamp is not None:
            log_ratio = log_ratio.clamp(-self.config.clamp, self.config.clamp)
        return log_ratio


class K1(_Estimator):
    """k1 = log(pi/pi_ref)."""

    def __call__(self, logp: Tensor, ref_logp: Tensor) -> Tensor:
        return self._log_ratio(logp, ref_logp)


class K2(_Estimator):
    """k2 = log(pi/pi_ref)^2 / 2."""

    def __call__(self, logp: Tensor, ref_logp: Tensor) -> Tensor:
        return self._log_ratio(logp, ref_logp).pow(2) / 2


class K3(_Estimator):
    """k3 = pi_ref/pi - log(pi_ref/pi) - 1."""

    def __call__(self, logp: Tensor, ref_logp: Tensor) -> Tensor:
        neg = -self._log_ratio(logp, ref_logp)
        return torch.exp(neg) - neg - 1
