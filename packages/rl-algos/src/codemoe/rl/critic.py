"""PPO's critic: a copy of the policy's body with a scalar value head on the last hidden state."""

from __future__ import annotations

import copy

from codemoe.rl.logprobs import token_stats
from torch import Tensor, nn

__all__ = ["Critic"]


class Critic(nn.Module):
    """``V(s_t)`` for every completion position; starts from the policy's weights, head at zero."""

    def __init__(self, policy: nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.body = copy.deepcopy(policy)
        self.head = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, prompt_ids: list[list[int]], completions: Tensor, pad_id: int) -> Tensor:
        """``[B, T]`` values at the positions that predict each completion token.

        Called through the module (``critic(...)``), so FSDP2's root hooks gather the body's
        embeddings and the head before use.
        """
        stats = token_stats(self.body, prompt_ids, completions, pad_id=pad_id, hidden=True)
        # the head in the dtype its weight has now (bf16 under a mixed-precision FSDP2 policy);
        # [B, T, 1] -> [B, T] as a new tensor, not a view (FSDP2 hooks a module's returned tensor)
        return self.head(stats.hidden.to(self.head.weight.dtype)).sum(-1)
