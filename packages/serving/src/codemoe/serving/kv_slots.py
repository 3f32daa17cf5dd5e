"""Where each running group, sample and root lives in the KV cache, and what outlives a request.

:class:`KVSlots` owns the engine's stores: the KV cache (:mod:`codemoe.serving.kv_cache`: a prefix
slot per running group, a suffix slot per running sample, a root slot per common start), the
prefix cache of finished samples kept for the next turn (:mod:`codemoe.serving.prefix_cache`),
and the roots the planner gives prefilled groups (:mod:`codemoe.serving.roots`). Groups, samples
and roots occupy slots ``0 .. G-1``, ``0 .. B-1`` and ``0 .. R-1``: a finished one's slot is
refilled by moving the last one in, so a step's reads are views, never copies. Every step starts
here: :meth:`KVSlots.prefill_batch` and :meth:`KVSlots.decode_batch` build the model inputs and
set the cache's plan for the forward.
"""

from __future__ import annotations

import torch
from codemoe.serving.batches import DecodeBatch, PrefillBatch, decode_batch, prefill_batch
from codemoe.serving.inflight import Group, SampleState
from codemoe.serving.kv_cache import PrefixKVCache
from codemoe.serving.prefix_cache import CachedSequence, PrefixCache
from codemoe.serving.roots import Root, plan_roots

__all__ = ["RUN_CALL_KEYS", "KVSlots"]

# what one more attention call of a decode step costs, in prompt keys read (the engine's
# attention splits the running groups' prompts into runs by length at this price; measured on a
# 2-core CPU for the tiny presets, ``benchmarks/bench_generate.py``'s spread next turns)
RUN_CALL_KEYS = 1024


class KVSlots:
    """The KV cache's slots and the prefix cache (see the module docstring).

    ``common_prefix_tokens`` is the least a root shares (0: no roots; roots need the engine's
    shared-prefix attention, which reads them).
    """

    def __init__(
        self, device: torch.device, dtype: torch.dtype, prefix_cache_tokens: int, common_prefix_tokens: int
    ) -> None:
        self.device, self.dtype = device, dtype
        self.cache = PrefixKVCache(device)
        self.kept = PrefixCache(prefix_cache_tokens) if prefix_cache_tokens > 0 else None
        self.common_prefix_tokens = common_prefix_tokens
        self.groups: list[Group] = []  # running groups, in prefix slot order
        self.roots: list[Root] = []  # in root slot order
        self.tokens_saved = 0  # tokens kept (and read) once for several groups, not per group

    # -- admission -------------------------------------------------------------------------------

    def reusable(self, prompt: list[int]) -> tuple[CachedSequence | None, int]:
        """The kept sequence ``prompt`` starts with and how many of its tokens it gives (nothing taken yet)."""
        return self.kept.find(prompt) if self.kept is not None else (None, 0)

    def reuse(self, group: Group, found: tuple[CachedSequence | None, int]) -> None:
        """``group`` was admitted: its prefill skips the ``found`` tokens."""
        if self.kept is not None:
            group.reused, group.reused_len = found
            group.extends = tuple(found[0].tokens) if found[0] is not None else None
            self.kept.use(*found)

    # -- prefill ---------------------------------------------------------------------------------

    def prefill_batch(self, groups: list[Group], running: int, *, packed: bool = False) -> PrefillBatch:
        """Give admitted ``groups`` prefix slots, copy their reused tokens in, and plan one forward
        over the rest, right-padded or ``packed`` (for the engine's own attention, which reads the
        reused tokens in their slots); ``running`` samples are in the batch already."""
        for group in groups:
            group.slot = len(self.groups)
            self.groups.append(group)
        fresh = [g.prompt[g.reused_len :] for g in groups]
        offsets = [g.reused_len for g in groups]
        room = max(max(len(g.prompt) for g in self.groups), max(offsets) + max(len(f) for f in fresh))
        samples = running + sum(g.n for g in groups)
        self.cache.reserve(len(self.groups), room, samples, max(g.params.max_new_tokens for g in self.groups))
        for group in groups:
            if group.reused is not None:
                self.cache.write_prefix(group.slot, group.reused.keys, group.reused.values, group.reused_len)
        batch = prefill_batch(fresh, offsets, [g.slot for g in groups], self.device, self.dtype, packed=packed)
        self.cache.plan = batch.plan
        return batch

    def place_roots(self, groups: list[Group]) -> None:
        """After their prefill: ``groups`` whose prompts start alike read that start from a root."""
        if self.common_prefix_tokens <= 0:
            return
        plan = plan_roots([g.prompt for g in groups], self.roots, self.common_prefix_tokens)
        for i, root in plan.joins:
            self._join(groups[i], root)
        for members, length in plan.runs:
            first = groups[members[0]]
            root = Root(len(self.roots), first.prompt[:length], 0)
            self.roots.append(root)
            self.cache.reserve(0, 0, 0, 0, len(self.roots), length)
            self.cache.write_root(root.slot, first.slot, length)
            for i in members:
                self._join(groups[i], root)

    def _join(self, group: Group, root: Root) -> None:
        """``group``'s prompt starts with ``root``'s tokens: read them there, keep the rest in its slot."""
        self.cache.drop_leading(group.slot, root.length, len(group.prompt))
        if root.groups > 0:
            self.tokens_saved += root.length
        root.groups += 1
        group.root = root

    # -- decode ----------------------------------------------------------------------------------

    def decode_batch(self, running: list[SampleState], *, gather: bool) -> DecodeBatch:
        """Plan one decode step of the ``running`` samples (in suffix slot order)."""
        batch = decode_batch(
            [s.tokens[-1] for s in running],
            [s.length for s in running],
            [len(s.group.prompt) for s in running],
            [s.group.slot for s in running],
            [len(g.prompt) - g.root_length for g in self.groups],  # what each prefix slot holds
            gather=gather,
            device=self.device,
            dtype=self.dtype,
            group_root=[g.root.slot if g.root is not None else -1 for g in self.groups],
            root_len=[r.length for r in self.roots],
            run_call_keys=0 if gather else RUN_CALL_KEYS,
        )
        self.cache.plan = batch.plan
        return batch

    # -- finishing -------------------------------------------------------------------------------

    def move_row(self, moved: SampleState, source: int, target: int) -> None:
        """Move a running sample's own tokens to another suffix slot (compaction after a finish)."""
        self.cache.move_row(source, target, moved.length - len(moved.group.prompt))

    def keep(self, seq: SampleState, row: int) -> None:
        """Put a finished sample's prompt and completion (all but its last token, never fed) in the
        prefix cache, when there is one."""
        if self.kept is None:
            return
        prompt, generated = len(seq.group.prompt), len(seq.tokens) - 1
        root = seq.group.root
        keys, values = self.cache.sequence(
            seq.group.slot, prompt, row, generated, *((root.slot, root.length) if root is not None else ())
        )
        routing = None
        if seq.group.prompt_routing is not None:
            # position p's experts: the prompt's, then those that produced tokens 1 .. G-1
            routing = torch.cat([seq.group.prompt_routing, *(r[None] for r in seq.routing[1:])])
        self.kept.add(CachedSequence(seq.group.prompt + seq.tokens[:-1], keys, values, routing), seq.group.extends)

    def release(self, group: Group) -> None:
        """Free a finished group's prefix slot by moving the last running group into it (and its
        root's slot, when it was the root's last group, by moving the last root in)."""
        moved = self.groups.pop()
        if moved is not group:
            self.cache.move_group(moved.slot, group.slot, len(moved.prompt) - moved.root_length)
            moved.slot = group.slot
            self.groups[group.slot] = moved
        root = group.root
        if root is not None:
            root.groups -= 1
            if root.groups == 0:
                last = self.roots.pop()
                if last is not root:
                    self.cache.move_root(last.slot, root.slot, last.length)
                    last.slot = root.slot
                    self.roots[root.slot] = last

    def clear_running(self) -> None:
        """Forget every running group and root (a failed step)."""
        self.groups.clear()
        self.roots.clear()

    def clear_kept(self) -> None:
        """Drop the kept sequences: their keys/values belong to weights that were just replaced."""
        if self.kept is not None:
            self.kept.clear()

    def reuse_stats(self) -> dict[str, int]:
        """What the prefix cache and the roots hold and saved, for the engine's health report."""
        return {
            "prefix_cache_tokens": self.kept.tokens if self.kept is not None else 0,
            "prefix_cache_reused_tokens": self.kept.reused_tokens if self.kept is not None else 0,
            "prefix_cache_evicted_tokens": self.kept.evicted_tokens if self.kept is not None else 0,
            "common_prefixes": len(self.roots),
            "common_prefix_tokens_saved": self.tokens_saved,
        }
