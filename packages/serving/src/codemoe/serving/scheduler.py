"""Scheduling: admission and continuous batching.

Every engine step first admits waiting groups, in order, while the batch has free slots and one
prefill's padded token budget allows (tokens reused from the prefix cache are not computed, so
they do not count), then decodes one token for every running sample. A sample that finishes
leaves the batch at once: the last running sample moves into its row, so rows stay ``0 .. B-1``.
"""

from __future__ import annotations

from collections import deque

import torch
from codemoe.serving.inflight import Group, SampleState, TokenEvent
from codemoe.serving.kv_slots import KVSlots

__all__ = ["Scheduler"]


class Scheduler:
    """The waiting groups and the running samples (batch rows, in suffix slot order)."""

    def __init__(self, kv: KVSlots, max_batch_size: int, max_prefill_tokens: int) -> None:
        self.kv = kv
        self.max_batch_size = max_batch_size
        self.max_prefill_tokens = max_prefill_tokens
        self.waiting: deque[Group] = deque()
        self.running: list[SampleState] = []

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    def submit(self, groups: list[Group]) -> None:
        self.waiting.extend(groups)

    def waiting_samples(self) -> int:
        return sum(g.n for g in self.waiting)

    def admit(self) -> list[Group]:
        """Waiting groups, in order, that fit the free slots and one prefill's token budget."""
        admitted: list[Group] = []
        slots = len(self.running)
        longest = 0
        while self.waiting:
            group = self.waiting[0]
            found = self.kv.reusable(group.prompt)
            fresh = len(group.prompt) - found[1]
            padded = max(longest, fresh) * (len(admitted) + 1)  # the prefill computes only what is not reused
            if slots + group.n > self.max_batch_size or (admitted and padded > self.max_prefill_tokens):
                break
            admitted.append(self.waiting.popleft())
            self.kv.reuse(group, found)
            slots += group.n
            longest = max(longest, fresh)
        return admitted

    def start(self, group: Group) -> list[SampleState]:
        """Put a prefilled group's samples in the batch."""
        seqs = group.samples(len(group.prompt))
        self.running.extend(seqs)
        return seqs

    def accept(
        self, seqs: list[SampleState], tokens: list[int], logprobs: list[float], routing: torch.Tensor | None
    ) -> None:
        """Record each sample's next token (and its experts ``routing [B, layers, k]``), stream it,
        and retire the samples that finished."""
        rows = routing.unbind(0) if routing is not None else [None] * len(seqs)
        finished = []
        for seq, token, logprob, row in zip(seqs, tokens, logprobs, rows):
            seq.tokens.append(token)
            seq.logprobs.append(logprob)
            if row is not None:
                seq.routing.append(row)
            seq.finish_reason = seq.group.checker.check(seq.tokens)
            if seq.group.on_token is not None:
                seq.group.on_token(TokenEvent(seq.index, token, logprob, seq.finish_reason))
            if seq.finish_reason is not None:
                finished.append(seq)
        if finished:
            self.retire(finished)

    def retire(self, finished: list[SampleState]) -> None:
        """Remove finished samples (and groups), keeping the running ones in rows ``0 .. B-1``."""
        index = {id(s): i for i, s in enumerate(self.running)}
        for seq in finished:
            self.kv.keep(seq, index[id(seq)])
        for row in sorted((index[id(s)] for s in finished), reverse=True):
            last = len(self.running) - 1
            if row != last:
                moved = self.running[last]
                self.kv.move_row(moved, last, row)
                self.running[row] = moved
            self.running.pop()
        for seq in finished:
            group = seq.group
            group.finished.append(seq)
            if len(group.finished) == group.n:
                self.kv.release(group)
                group.done.set()

    def cancel(self, parts: list[Group]) -> None:
        """End a submitted prompt's samples with finish_reason ``"abort"``, waiting or running."""
        for group in parts:
            if any(g is group for g in self.waiting):
                self.waiting = deque(g for g in self.waiting if g is not group)
                group.finished.extend(group.samples(0, finish_reason="abort"))
                group.done.set()
            running = [s for s in self.running if s.group is group]
            for seq in running:
                seq.finish_reason = "abort"
            if running:
                self.retire(running)

    def fail_all(self, exc: BaseException) -> None:
        """A failed step leaves the batch unusable: end every request in flight with the error."""
        in_flight = [*self.kv.groups, *self.waiting, *(s.group for s in self.running)]
        for group in {id(g): g for g in in_flight}.values():
            group.error = exc
            group.done.set()
        self.running.clear()
        self.kv.clear_running()
        self.waiting.clear()
