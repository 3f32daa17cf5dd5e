"""KV reuse across requests: a finished sample's keys and values, kept for the next turn.

An agent's next turn starts with everything of its last turn (prompt, answer, then the tool's
reply). The engine keeps the keys/values of finished samples up to a token budget, least recently
used out first; a new prompt that starts with a kept sequence prefills only the tokens after it.
When a finished sequence extends the kept one its prompt continued (the agent's next turn), that
one is dropped: every prompt shares at least as long a prefix with the longer sequence, so the
shorter one would only take budget (a radix tree shares such prefixes; here the older copy goes).
Without that, each live episode held a copy of every turn it had been through, and a budget sized
for the live histories thrashed. New weights clear the cache (its keys were computed with the old ones).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import torch

__all__ = ["CachedSequence", "PrefixCache", "common_prefix"]


@dataclass
class CachedSequence:
    """Keys/values (and routing) of ``tokens``, position by position."""

    tokens: list[int]
    keys: dict[int, torch.Tensor]  # layer -> [kv_heads, len(tokens), head_dim]
    values: dict[int, torch.Tensor]
    routing: torch.Tensor | None = None  # [len(tokens), moe_layers, k]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences of the same type (tuple or list).

    Compares slices (C speed) in a binary search: an agent's history of thousands of tokens
    against every kept sequence must not cost a Python loop per token.
    """
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class PrefixCache:
    """Least-recently-used kept sequences, at most ``budget`` tokens in all."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.entries: OrderedDict[tuple[int, ...], CachedSequence] = OrderedDict()
        self._by_first: dict[int, dict[tuple[int, ...], None]] = {}  # first token -> keys: the candidates
        self.tokens = 0
        self.reused_tokens = 0  # prompt tokens served from the cache instead of a prefill
        self.evicted_tokens = 0  # tokens of sequences dropped for room (not those a longer one replaced)

    def lookup(self, prompt: list[int]) -> tuple[CachedSequence | None, int]:
        """The kept sequence sharing the longest prefix with ``prompt``, and that length, taken for
        reuse (:meth:`find`, then :meth:`use`)."""
        best, best_len = self.find(prompt)
        self.use(best, best_len)
        return best, best_len

    def find(self, prompt: list[int]) -> tuple[CachedSequence | None, int]:
        """The kept sequence sharing the longest prefix with ``prompt``, and that length; nothing
        changes until :meth:`use`.

        At most ``len(prompt) - 1`` tokens are reused: the last prompt token is always computed,
        its logits give the first sampled token.
        """
        best, best_len = None, 0
        tokens = tuple(prompt)
        for key in self._by_first.get(tokens[0], ()) if tokens else ():
            length = min(common_prefix(key, tokens), len(prompt) - 1)
            if length > best_len:
                best, best_len = self.entries[key], length
        return best, best_len

    def use(self, entry: CachedSequence | None, length: int) -> None:
        """``length`` tokens of ``entry`` (from :meth:`find`) are reused: it becomes the most recent."""
        if entry is not None:
            self.entries.move_to_end(tuple(entry.tokens))
            self.reused_tokens += length

    def add(self, entry: CachedSequence, extends: tuple[int, ...] | None = None) -> None:
        """Keep ``entry``, evicting the least recently used ones to stay within the budget.

        ``extends``: the key of the kept sequence ``entry``'s prompt was continued from; it is
        dropped when ``entry`` starts with all of it (it can serve no prompt better than ``entry``).
        """
        key = tuple(entry.tokens)
        if not key or len(key) > self.budget or key in self.entries:
            return
        if extends is not None and extends in self.entries and key[: len(extends)] == extends:
            self._remove(extends)
        while self.tokens + len(key) > self.budget:
            oldest = next(iter(self.entries))
            self.evicted_tokens += len(oldest)
            self._remove(oldest)
        self.entries[key] = entry
        self._by_first.setdefault(key[0], {})[key] = None
        self.tokens += len(key)

    def _remove(self, key: tuple[int, ...]) -> None:
        del self.entries[key]
        self.tokens -= len(key)
        same_start = self._by_first[key[0]]
        del same_start[key]
        if not same_start:
            del self._by_first[key[0]]

    def clear(self) -> None:
        self.entries.clear()
        self._by_first.clear()
        self.tokens = 0
