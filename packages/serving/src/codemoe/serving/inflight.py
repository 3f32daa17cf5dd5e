"""What the engine tracks of each request in flight: a group (one prompt and the samples it still
owes) and each of its samples while it runs, plus the token events streamed from them."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from codemoe.core.contracts import SamplingParams
from codemoe.serving.prefix_cache import CachedSequence
from codemoe.serving.sampling import sample_key
from codemoe.serving.stopping import StopChecker

if TYPE_CHECKING:
    from codemoe.serving.roots import Root

__all__ = ["Group", "SampleState", "TokenEvent", "groups_for"]


@dataclass
class TokenEvent:
    """One generated token, as streamed to ``on_token`` callbacks."""

    sample_index: int
    token_id: int
    logprob: float
    finish_reason: str | None


@dataclass(eq=False)
class SampleState:
    """One sample in flight; it occupies batch row (and suffix slot) ``scheduler.running.index(self)``."""

    group: Group
    index: int  # sample index within its prompt
    key: int  # random stream key
    length: int  # positions of this sample (prompt included) already in the KV cache
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    routing: list[torch.Tensor] = field(default_factory=list)
    finish_reason: str | None = None


@dataclass(eq=False)
class Group:
    """One prompt with the samples it still owes."""

    prompt: list[int]
    params: SamplingParams
    checker: StopChecker
    sample_indices: list[int]
    keys: list[int]
    on_token: Callable[[TokenEvent], None] | None
    finished: list[SampleState] = field(default_factory=list)
    prompt_routing: torch.Tensor | None = None  # [P, moe_layers, k]
    slot: int = -1  # prefix slot while running
    root: Root | None = None  # its prompt's first root.length tokens live there, the rest in its slot
    reused: CachedSequence | None = None  # kept sequence this prompt starts with
    reused_len: int = 0  # how many of its tokens the prefill skips
    # the key of that kept sequence, kept after the prefill let go of its tensors: a finished
    # sample's sequence that extends it replaces it in the prefix cache
    extends: tuple[int, ...] | None = None
    error: BaseException | None = None  # set when a step failed while this group was in flight
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def n(self) -> int:
        return len(self.sample_indices)

    @property
    def root_length(self) -> int:
        """Leading prompt tokens kept in its root rather than in its own prefix slot."""
        return self.root.length if self.root is not None else 0

    def samples(self, length: int, finish_reason: str | None = None) -> list[SampleState]:
        """One state per sample it owes, each with ``length`` positions in the KV cache."""
        return [
            SampleState(self, index, key, length, finish_reason=finish_reason)
            for index, key in zip(self.sample_indices, self.keys)
        ]

    def take_prompt_routing(self, fresh: torch.Tensor | None) -> torch.Tensor | None:
        """Record the prompt's experts (the reused tokens', then ``fresh [P', layers, k]`` of the
        prefill) and let go of the reused sequence (copied into the slot: the prefix cache may evict
        it now); returns the experts of the last prompt token for each sample ``[n, layers, k]``."""
        first = None
        if fresh is not None:
            reused = [] if self.reused is None else [self.reused.routing[: self.reused_len]]
            self.prompt_routing = torch.cat([*reused, fresh])
            first = self.prompt_routing[-1:].expand(self.n, -1, -1)
        self.reused = None
        return first


def groups_for(
    prompt: list[int],
    params: SamplingParams,
    checker: StopChecker,
    seed: int,
    prompt_index: int,
    *,
    share_prefix: bool,
    on_token: Callable[[TokenEvent], None] | None = None,
) -> list[Group]:
    """The groups of one prompt's ``params.n`` samples: one group sharing the prefilled prompt, or
    one group per sample when prefix sharing is off. Sample ``j``'s random stream is keyed by
    (seed, prompt index, j) either way."""
    keys = [sample_key(seed, prompt_index, j) for j in range(params.n)]
    if share_prefix:
        return [Group(prompt, params, checker, list(range(params.n)), keys, on_token)]
    return [Group(prompt, params, checker, [j], [keys[j]], on_token) for j in range(params.n)]
