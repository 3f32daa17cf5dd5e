"""The policy-gradient algorithm: a composition of registered strategies.

GRPO, PPO, Dr.GRPO, DAPO, RLOO, GSPO, REINFORCE++ are all this one component with different
strategy choices (presets in ``registry/algos/``), never code branches. The algorithm turns rewards
into advantages and one chunk of a batch into the two terms of its loss; the trainer owns the
models, the data and the optimizer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from codemoe.core.config import spec_name
from codemoe.core.errors import ConfigError
from torch import Tensor

__all__ = [
    "Algorithm",
    "AlgorithmConfig",
    "CriticConfig",
    "DynamicSamplingConfig",
    "LossTerms",
    "build_algorithm",
    "value_loss",
]


@dataclass
class CriticConfig:
    """The value network of PPO: a copy of the policy's body with a scalar head."""

    lr: float = 1e-3  # critic learning rate (critics usually learn faster than the policy)
    value_clip: float = 0.2  # clip of the value update around the old value (PPO's value clipping)
    vf_coef: float = 0.5  # weight of the value loss (the critic has its own optimizer; kept for the logged loss)


@dataclass
class DynamicSamplingConfig:
    """What to do with groups whose rewards are all equal: they carry no signal."""

    drop: bool = False  # mask zero-signal groups out of the loss (they would only dilute the normaliser)
    refill_rounds: int = 0  # before dropping, sample up to this many extra rounds of prompts to replace them


@dataclass
class AlgorithmConfig:
    """Options of the ``policy_gradient`` algorithm; presets in ``registry/algos/`` fill them."""

    group_size: int = 8  # G: samples per prompt
    advantage: Any = field(default_factory=lambda: {"name": "grpo"}, metadata={"kind": "advantage"})
    policy_loss: Any = field(default_factory=lambda: {"name": "ppo_clip"}, metadata={"kind": "policy_loss"})
    loss_agg: Any = field(default_factory=lambda: {"name": "seq_mean_token_mean"}, metadata={"kind": "loss_agg"})
    kl: Any = field(default_factory=lambda: {"name": "k3"}, metadata={"kind": "kl"})
    kl_coef: float = 0.0  # beta; 0 turns the reference policy off (no extra forward pass)
    kl_in_reward: bool = False  # False: beta*KL is added to the loss (GRPO); True: subtracted from token rewards (PPO)
    is_correction: Any = field(default_factory=lambda: {"name": "truncated"}, metadata={"kind": "is_correction"})
    dynamic_sampling: DynamicSamplingConfig = field(default_factory=DynamicSamplingConfig)
    epochs: int = 1  # passes over each rollout batch (PPO epochs)
    minibatches: int = 1  # optimizer steps per epoch; the batch's groups are split evenly
    # MoE balance-loss coefficient during RL. Small on purpose: SFT already shaped the routing, and the
    # RL gradient is weak and noisy, so a large balance term would dominate it and rewrite the routing;
    # off entirely, long runs can drift into collapse. 1e-3 keeps the router honest without steering.
    balance_coef: float = 1e-3
    critic: CriticConfig | None = None  # PPO's value network; None: critic-free (GRPO family)
    # Routing replay: trainer forwards of the policy use the experts the engine chose for each token
    # (engines that report routing), so a router that drifted, or a kernel that breaks a near-tie
    # differently, cannot make trainer and engine log-probs disagree; the router still gets gradients
    # through the weights it gives those experts.
    routing_replay: bool = False


@dataclass
class LossTerms:
    """One chunk's loss as ``numerator / denominator`` plus the numbers the trainer logs."""

    numerator: Tensor  # scalar with grad
    denominator: Tensor  # scalar count from the aggregator (summed over chunks and ranks by the trainer)
    kl_sum: float  # sum of the per-token KL over valid tokens (0 when no reference is used)
    clipped: float  # number of valid tokens whose clipped branch was active
    tokens: float  # number of valid tokens


class Algorithm:
    """Strategies resolved from the registry, and the two computations that use them."""

    def __init__(self, config: AlgorithmConfig, registry: Any) -> None:
        self.config = config
        where = "algo"
        self.advantage = registry.build("advantage", config.advantage, where=f"{where}.advantage")
        self.policy_loss = registry.build("policy_loss", config.policy_loss, where=f"{where}.policy_loss")
        self.loss_agg = registry.build("loss_agg", config.loss_agg, where=f"{where}.loss_agg")
        missing = [m for m in ("terms", "denominator") if not callable(getattr(self.loss_agg, m, None))]
        if missing:  # what LossAggregator asks for
            raise ConfigError(
                f"'{where}.loss_agg': {spec_name('loss_agg', config.loss_agg)} ({type(self.loss_agg).__name__}) has no "
                f"{' or '.join(missing)} method; a loss aggregation gives terms(per_token, mask) -> (numerator, "
                "denominator) and denominator(mask), a function of the mask alone (codemoe.rl.loss_agg.LossAggregator)"
            )
        self.kl = registry.build("kl", config.kl, where=f"{where}.kl")
        self.is_correction = registry.build("is_correction", config.is_correction, where=f"{where}.is_correction")
        if getattr(self.advantage, "needs_values", False) and config.critic is None:
            raise ConfigError(
                f"'{where}.advantage': {spec_name('advantage', config.advantage)} needs a critic; set '{where}.critic: {{}}' "
                "(the 'ppo' preset does) or pick a critic-free estimator such as grpo"
            )
        if config.group_size < 1 or config.epochs < 1 or config.minibatches < 1:
            raise ConfigError(f"'{where}': group_size, epochs and minibatches must be >= 1")

    @property
    def uses_reference(self) -> bool:
        """Whether a frozen reference policy is needed (a KL penalty is on)."""
        return self.config.kl_coef > 0

    def token_rewards(
        self, rewards: Tensor, mask: Tensor, kl: Tensor | None, step_rewards: Tensor | None = None
    ) -> Tensor:
        """``[B]`` outcome rewards -> ``[B, T]``: reward on the last valid token, minus beta*KL if in reward.

        ``step_rewards [B, T]`` (multi-step episodes) are used as placed instead of ``rewards``.
        """
        # rewards: [B]; mask: [B, T]; kl: [B, T] or None
        if step_rewards is not None:
            out = step_rewards * mask
        else:
            lengths = mask.sum(-1).long()  # completions are right-padded: the last valid token is at length-1
            last = torch.nn.functional.one_hot((lengths - 1).clamp(min=0), mask.shape[1]) * (lengths > 0).unsqueeze(-1)
            out = rewards.unsqueeze(-1) * last.to(rewards.dtype)
        if kl is not None and self.config.kl_in_reward:
            out = out - self.config.kl_coef * kl * mask
        return out

    def loss_terms(
        self,
        logp: Tensor,
        old_logp: Tensor,
        advantages: Tensor,
        mask: Tensor,
        is_weights: Tensor,
        ref_logp: Tensor | None,
    ) -> LossTerms:
        """The policy loss of one chunk; all tensors ``[B, T]``, ``logp`` with grad."""
        out = self.policy_loss(logp, old_logp, advantages, mask)
        per_token = out.per_token * is_weights
        kl_sum = 0.0
        if ref_logp is not None:
            kl = self.kl(logp, ref_logp)
            kl_sum = (kl.detach() * mask).sum().item()
            if not self.config.kl_in_reward:
                per_token = per_token + self.config.kl_coef * kl
        numerator, denominator = self.loss_agg.terms(per_token, mask)
        valid = mask.bool()
        return LossTerms(
            numerator=numerator,
            denominator=denominator,
            kl_sum=kl_sum,
            clipped=float((out.clipped & valid).sum().item()),
            tokens=float(valid.sum().item()),
        )


def build_algorithm(config: AlgorithmConfig, registry: Any) -> Algorithm:
    """Factory of the ``policy_gradient`` algorithm; strategies are built from ``registry``."""
    return Algorithm(config, registry)


def value_loss(values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor, clip: float) -> Tensor:
    """PPO's clipped value loss summed over valid tokens (the caller divides by the token count):
    ``0.5 * max((V-R)^2, (clip(V, V_old +- c) - R)^2)``."""
    # values, old_values, returns, mask: [B, T]
    clipped = old_values + (values - old_values).clamp(-clip, clip)
    loss = 0.5 * torch.maximum((values - returns) ** 2, (clipped - returns) ** 2)
    return (loss * mask).sum()
