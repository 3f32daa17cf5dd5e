"""KV reuse across requests: a finished sample's keys and values, kept for the next turn.

An agent's next turn starts with everything of its last turn (prompt, answer, then the tool's
reply). The engine keeps the keys/values of finished samples up to a token budget, least recently
used out first; a new prompt that starts with a kept sequence prefills only the tokens after it.
New weights clear the cache (its keys were computed with the old ones).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch

__all__ = ["CachedSequence", "PrefixCache"]


@dataclass
class CachedSequence:
    """Keys/values (and routing) of ``tokens``, position by position."""

    tokens: list[int]
    keys: dict[int, torch.Tensor]  # layer -> [kv_heads, len(tokens), head_dim]
    values: dict[int, torch.Tensor]
    routing: torch.Tensor | None = None  # [len(tokens), moe_layers, k]


def _common_prefix(a: tuple[int, ...], b: list[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


class PrefixCache:
    """Least-recently-used kept sequences, at most ``budget`` tokens in all."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.entries: OrderedDict[tuple[int, ...], CachedSequence] = OrderedDict()
        self.tokens = 0
        self.reused_tokens = 0  # prompt tokens served from the cache instead of a prefill

    def lookup(self, prompt: list[int]) -> tuple[CachedSequence | None, int]:
        """The kept sequence sharing the longest prefix with ``prompt``, and that length.

        At most ``len(prompt) - 1`` tokens are reused: the last prompt token is always computed,
        its logits give the first sampled token.
        """
        best, best_len = None, 0
        for key, entry in self.entries.items():
            length = min(_common_prefix(key, prompt), len(prompt) - 1)
            if length > best_len:
                best, best_len = entry, length
        if best is not None:
            self.entries.move_to_end(tuple(best.tokens))
            self.reused_tokens += best_len
        return best, best_len

    def add(self, entry: CachedSequence) -> None:
        """Keep ``entry``, evicting the least recently used ones to stay within the budget."""
        key = tuple(entry.tokens)
        if len(key) > self.budget or key in self.entries:
            return
        while self.tokens + len(key) > self.budget:
            _, old = self.entries.popitem(last=False)
            self.tokens -= len(old.tokens)
        self.entries[key] = entry
        self.tokens += len(key)

    def clear(self) -> None:
        self.entries.clear()
        self.tokens = 0
