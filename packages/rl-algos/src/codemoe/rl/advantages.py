"""Advantage estimators: turn rewards (and, for GAE, values) into per-token advantages.

Every estimator is a small callable ``estimator(inputs) -> AdvantageOutput`` registered as kind
``advantage``. Conventions, stated once:

- ``token_rewards: [B, T]`` holds the outcome reward on each sequence's last valid token plus, when
  the KL penalty is applied in the reward, ``-beta * kl`` on every token. Outcome estimators score a
  sequence by ``score = sum_t token_rewards[b, t] * mask[b, t]``.
- Rows come in groups of ``group_size`` consecutive samples of the same prompt (``B = groups * G``).
- Advantages are zero outside ``mask``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

__all__ = [
    "AdvantageInput",
    "AdvantageOutput",
    "DrGRPOAdvantage",
    "DrGRPOConfig",
    "GAEAdvantage",
    "GAEConfig",
    "GRPOAdvantage",
    "GRPOConfig",
    "RLOOAdvantage",
    "RLOOConfig",
    "ReinforcePPAdvantage",
    "ReinforcePPConfig",
]


@dataclass
class AdvantageInput:
    """What an estimator may look at; shapes ``[B, T]`` unless noted."""

    token_rewards: Tensor  # [B, T] rewards per token (outcome on the last token, KL penalty on every token)
    mask: Tensor  # [B, T] 1.0 on completion tokens that count, 0.0 on padding
    group_size: int  # G: samples per prompt, consecutive rows
    values: Tensor | None = None  # [B, T] critic values V(s_t) (GAE only)
    # sums a tensor over data-parallel ranks, so batch whitening uses the whole batch (identity: 1 rank)
    all_sum: Callable[[Tensor], Tensor] = field(default=lambda x: x)

    def scores(self) -> Tensor:
        """Sequence scores ``[B]``: the summed token rewards."""
        return (self.token_rewards * self.mask).sum(-1)

    def grouped(self) -> Tensor:
        """Sequence scores as ``[groups, G]``."""
        scores = self.scores()
        if scores.numel() % self.group_size:
            raise ValueError(f"{scores.numel()} samples do not split into groups of {self.group_size}")
        return scores.view(-1, self.group_size)


@dataclass
class AdvantageOutput:
    """Advantages for the policy loss and, for critic-based estimators, returns for the value loss."""

    advantages: Tensor  # [B, T]
    returns: Tensor | None = None  # [B, T] value targets (GAE only)


def _whiten(x: Tensor, mask: Tensor, all_sum: Callable[[Tensor], Tensor], eps: float) -> Tensor:
    """Zero mean, unit std over the valid tokens of the whole (all-rank) batch."""
    count = all_sum(mask.sum()).clamp(min=1.0)
    mean = all_sum((x * mask).sum()) / count
    var = all_sum((((x - mean) * mask) ** 2).sum()) / count
    return (x - mean) / (var.sqrt() + eps) * mask


def _broadcast(per_sequence: Tensor, mask: Tensor) -> Tensor:
    """``[B]`` -> ``[B, T]``: every completion token of a sequence gets the sequence's advantage."""
    return per_sequence.unsqueeze(-1) * mask


@dataclass
class GRPOConfig:
    """Options of the GRPO estimator."""

    std_eps: float = 1e-6  # added to the group std before dividing (avoids 0/0 in all-equal groups)
    unbiased_std: bool = True  # Bessel-corrected group std (n-1), as in the GRPO paper's reference code


class GRPOAdvantage:
    """GRPO: ``(score - group mean) / (group std + eps)``, the same for every token of a sample."""

    def __init__(self, config: GRPOConfig) -> None:
        self.config = config

    def __call__(self, inputs: AdvantageInput) -> AdvantageOutput:
        grouped = inputs.grouped()  # [groups, G]
        centered = grouped - grouped.mean(-1, keepdim=True)
        std = grouped.std(-1, keepdim=True, unbiased=self.config.unbiased_std)
        return AdvantageOutput(_broadcast((centered / (std + self.config.std_eps)).flatten(), inputs.mask))


@dataclass
class DrGRPOConfig:
    """Dr.GRPO has no options: it is GRPO without the std division (which biases toward easy prompts)."""


class DrGRPOAdvantage:
    """Dr.GRPO: ``score - group mean``; no std normalisation."""

    def __init__(self, config: DrGRPOConfig) -> None:
        self.config = config

    def __call__(self, inputs: AdvantageInput) -> AdvantageOutput:
        grouped = inputs.grouped()
        return AdvantageOutput(_broadcast((grouped - grouped.mean(-1, keepdim=True)).flatten(), inputs.mask))


@dataclass
class RLOOConfig:
    """RLOO has no options: each sample's baseline is the mean of the other G-1 samples."""


class RLOOAdvantage:
    """RLOO: ``score_i - mean_{j != i} score_j``, an unbiased leave-one-out baseline."""

    def __init__(self, config: RLOOConfig) -> None:
        self.config = config

    def __call__(self, inputs: AdvantageInput) -> AdvantageOutput:
        grouped = inputs.grouped()  # [groups, G]
        g = grouped.shape[-1]
        if g < 2:
            raise ValueError("RLOO needs at least 2 samples per prompt (group_size >= 2)")
        others = (grouped.sum(-1, keepdim=True) - grouped) / (g - 1)
        return AdvantageOutput(_broadcast((grouped - others).flatten(), inputs.mask))


@dataclass
class ReinforcePPConfig:
    """Options of REINFORCE++ with a group baseline."""

    gamma: float = 1.0  # discount of the per-token return
    whiten_eps: float = 1e-8  # added to the batch std when whitening


class ReinforcePPAdvantage:
    """REINFORCE++ with baseline: per-token return minus the group-mean score, whitened over the batch.

    The return at token t is ``sum_{t' >= t} gamma^(t'-t) r_t'`` (so a KL penalty in the reward
    reaches only the tokens before it); the group mean of sequence scores is the baseline; the result
    is normalised to zero mean and unit std over all valid tokens of the batch.
    """

    def __init__(self, config: ReinforcePPConfig) -> None:
        self.config = config

    def __call__(self, inputs: AdvantageInput) -> AdvantageOutput:
        mask = inputs.mask
        returns = _discounted_returns(inputs.token_rewards * mask, self.config.gamma, mask)  # [B, T]
        baseline = inputs.grouped().mean(-1).repeat_interleave(inputs.group_size)  # [B]
        adv = (returns - baseline.unsqueeze(-1)) * mask
        return AdvantageOutput(_whiten(adv, mask, inputs.all_sum, self.config.whiten_eps))


def _discounted_returns(rewards: Tensor, gamma: float, mask: Tensor) -> Tensor:
    """``[B, T]`` rewards -> ``[B, T]`` reward-to-go over the valid tokens.

    Masked tokens are not steps: in a multi-step episode the environment's observation tokens sit
    between two actions, and the discount counts only the policy's tokens.
    """
    out = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(rewards.shape[1])):
        running = torch.where(mask[:, t] > 0, rewards[:, t] + gamma * running, running)
        out[:, t] = running
    return out


@dataclass
class GAEConfig:
    """Options of generalised advantage estimation (PPO with a critic)."""

    gamma: float = 1.0  # discount; 1.0 is usual for finite completions
    lam: float = 0.95  # GAE lambda: 1.0 is Monte Carlo (high variance), 0.0 is one-step TD (high bias)
    whiten: bool = True  # normalise advantages to zero mean, unit std over valid tokens


class GAEAdvantage:
    """GAE: ``A_t = sum_l (gamma*lam)^l delta_{t+l}``, ``delta_t = r_t + gamma V_{t+1} - V_t``.

    The value after the last valid token is 0 (the episode ends). Returns ``A + V`` are the critic's
    targets, taken before whitening. Masked tokens inside a row (a multi-step episode's
    observations) are skipped: ``t + 1`` is the next valid token, so the recursion runs over the
    policy's tokens only.
    """

    needs_values = True

    def __init__(self, config: GAEConfig) -> None:
        self.config = config

    def __call__(self, inputs: AdvantageInput) -> AdvantageOutput:
        if inputs.values is None:
            raise ValueError("GAE needs critic values: use an algorithm with a critic (the 'ppo' preset)")
        mask, gamma, lam = inputs.mask, self.config.gamma, self.config.lam
        values = inputs.values * mask  # [B, T]
        rewards = inputs.token_rewards * mask
        adv = torch.zeros_like(values)
        running = torch.zeros_like(values[:, 0])
        next_value = torch.zeros_like(values[:, 0])
        for t in reversed(range(values.shape[1])):
            valid = mask[:, t] > 0
            delta = rewards[:, t] + gamma * next_value - values[:, t]
            running = torch.where(valid, delta + gamma * lam * running, running)
            adv[:, t] = running * mask[:, t]
            next_value = torch.where(valid, values[:, t], next_value)
        returns = adv + values
        if self.config.whiten:
            adv = _whiten(adv, mask, inputs.all_sum, 1e-8)
        return AdvantageOutput(adv, returns)
