"""Sigmoid scores with the auxiliary-loss-free balancing bias (DeepSeek-V3).

Each expert's affinity is ``s = sigmoid(logit)``. A per-expert bias ``b`` is added **only to
choose** the top-k (``s + b``); the combine weights are the unbiased ``s`` of the chosen experts,
renormalised. After every training step the bias moves by the sign rule::

    b_e += γ · sign(mean_load − load_e)

with ``load_e`` the tokens expert ``e`` received during the step, summed over data-parallel ranks,
so overloaded experts become less attractive and idle ones more, without a loss term that
fights the language-model gradient. The bias is a buffer named as ``transformers``' DeepSeek-V3
names it (``e_score_correction_bias``), saved with the checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from codemoe.core.moe import Router, RouterOutput
from codemoe.router.groups import group_mask

__all__ = ["SigmoidBiasConfig", "SigmoidBiasRouter", "build"]


@dataclass
class SigmoidBiasConfig:
    """Options of the sigmoid router with a balancing bias."""

    top_k: int = 8  # experts per token
    bias_rate: float = 0.001  # γ: bias change per step (0 disables the update)
    normalize: bool = True  # renormalise the chosen experts' sigmoid scores to sum to one
    route_scale: float = 1.0  # multiply the combine weights (DeepSeek-V3 uses 2.5)
    num_groups: int = 1  # expert groups for group-limited routing (1: no groups)
    topk_groups: int = 1  # groups each token may use
    group_score: str = "top2_sum"  # how a group scores: 'top2_sum' (DeepSeek-V3) or 'max'


class SigmoidBiasRouter(Router):
    """Sigmoid affinities; a bias, updated by the sign rule, steers the choice toward idle experts."""

    def __init__(self, config: SigmoidBiasConfig, hidden_size: int, num_experts: int) -> None:
        super().__init__(hidden_size, num_experts, config.top_k)
        self.config = config
        self.register_buffer("e_score_correction_bias", torch.zeros(num_experts))
        self.register_buffer("step_load", torch.zeros(num_experts, dtype=torch.long), persistent=False)

    def _apply(self, fn, recurse: bool = True):
        # The bias stays fp32 when the model is cast to bf16: steps of γ = 1e-3 vanish in bf16's
        # 8-bit mantissa once the bias is away from zero.
        super()._apply(fn, recurse)
        self.e_score_correction_bias.data = self.e_score_correction_bias.data.float()
        return self

    def route(self, x: torch.Tensor, token_ids: torch.Tensor | None = None) -> RouterOutput:
        logits = self.logits(x)  # [T, E] fp32
        scores = torch.sigmoid(logits)
        choice = scores.detach() + self.e_score_correction_bias.float()
        if self.config.num_groups > 1:
            mask = group_mask(choice, self.config.num_groups, self.config.topk_groups, self.config.group_score)
            choice = choice.masked_fill(~mask, float("-inf"))
        indices = choice.topk(self.top_k, dim=-1).indices  # [T, k]
        weights = scores.gather(-1, indices)
        if self.config.normalize:
            weights = weights / weights.sum(dim=-1, keepdim=True).clamp(min=1e-20)
        weights = weights * self.config.route_scale
        return RouterOutput(logits=logits, probs=self.probabilities(logits), weights=weights, indices=indices)

    def probabilities(self, logits: torch.Tensor) -> torch.Tensor:
        """Sigmoid affinities normalised into a distribution (for the balance loss)."""
        scores = torch.sigmoid(logits)
        return scores / scores.sum(dim=-1, keepdim=True)

    def replay_weights(self, logits: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        weights = torch.sigmoid(logits).gather(-1, indices)
        if self.config.normalize:
            weights = weights / weights.sum(dim=-1, keepdim=True).clamp(min=1e-20)
        return weights * self.config.route_scale

    @torch.no_grad()
    def observe(self, counts: torch.Tensor) -> None:
        """Add a training forward's loads (real tokens only) to this step's."""
        self.step_load += counts.round().long()

    @torch.no_grad()
    def end_step(self) -> dict[str, float]:
        """Apply the sign rule with this step's loads (summed over data-parallel ranks) and reset them."""
        load = self.step_load.clone()
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(load)
        load = load.float()
        if self.config.bias_rate > 0 and load.sum() > 0:
            self.e_score_correction_bias += self.config.bias_rate * torch.sign(load.mean() - load)
        self.step_load.zero_()
        bias = self.e_score_correction_bias
        return {"bias_abs_mean": float(bias.abs().mean()), "bias_min": float(bias.min()), "bias_max": float(bias.max())}


def build(config: SigmoidBiasConfig, *, hidden_size: int, num_experts: int) -> SigmoidBiasRouter:
    """Sigmoid scores with DeepSeek-V3's aux-loss-free balancing bias (optionally group-limited)."""
    return SigmoidBiasRouter(config, hidden_size, num_experts)
