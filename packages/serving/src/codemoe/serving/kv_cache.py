"""A slot-based KV cache: one slot per sequence, preallocated, never concatenated.

Layout per layer: ``keys``/``values`` of shape ``[slots, kv_heads, capacity, head_dim]``.
Active sequences occupy slots ``0 .. B-1`` in batch order, so a decode step attends to the view
``[:B, :, :L]`` without copying. A finished sequence's slot is refilled by moving the last one in.
The cache quacks like a ``transformers`` cache (``update``), so any causal LM writes into it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["SlotKVCache", "WritePlan"]


@dataclass
class WritePlan:
    """Where the forward in progress writes its keys and values.

    Prefill: row ``b`` (a prompt, right-padded to ``S``) writes positions ``0 .. S-1`` of slot
    ``slots[b]`` and attends only to itself. Decode: row ``b`` writes its one token at position
    ``positions[b]`` of slot ``b``; attention then reads positions ``0 .. kv_len-1`` of slots
    ``0 .. B-1``.
    """

    slots: torch.Tensor | None = None  # [B] int64, prefill only
    positions: torch.Tensor | None = None  # [B] int64, decode only
    kv_len: int = 0


class SlotKVCache:
    """Preallocated per-slot KV buffers that grow by doubling when slots or length run out."""

    is_compileable = False

    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        self.device, self.dtype = device, dtype
        self.slots = 0  # allocated slots
        self.capacity = 0  # allocated positions per slot
        self.keys: dict[int, torch.Tensor] = {}
        self.values: dict[int, torch.Tensor] = {}
        self.plan = WritePlan()

    def reserve(self, slots: int, length: int) -> None:
        """Make room for ``slots`` sequences of up to ``length`` tokens, keeping the contents."""
        if slots <= self.slots and length <= self.capacity:
            return
        new_slots = max(slots, 2 * self.slots) if slots > self.slots else self.slots
        new_capacity = max(length, 2 * self.capacity) if length > self.capacity else self.capacity
        for store in (self.keys, self.values):
            for layer, old in store.items():
                fresh = old.new_zeros(new_slots, old.shape[1], new_capacity, old.shape[3])
                fresh[: self.slots, :, : self.capacity] = old
                store[layer] = fresh
        self.slots, self.capacity = new_slots, new_capacity

    def _buffers(self, layer: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if layer not in self.keys:
            shape = (self.slots, like.shape[1], self.capacity, like.shape[3])
            self.keys[layer] = torch.zeros(shape, device=self.device, dtype=like.dtype)
            self.values[layer] = torch.zeros(shape, device=self.device, dtype=like.dtype)
        return self.keys[layer], self.values[layer]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        """Write this forward's keys/values ``[B, H, S, D]``; return the keys/values to attend to."""
        keys, values = self._buffers(layer_idx, key_states)
        plan = self.plan
        if plan.positions is None:  # prefill: whole prompts, attending to themselves only
            length = key_states.shape[2]
            keys[plan.slots, :, :length] = key_states
            values[plan.slots, :, :length] = value_states
            return key_states, value_states
        rows = torch.arange(key_states.shape[0], device=key_states.device)
        keys[rows, :, plan.positions] = key_states[:, :, 0]
        values[rows, :, plan.positions] = value_states[:, :, 0]
        batch = key_states.shape[0]
        return keys[:batch, :, : plan.kv_len], values[:batch, :, : plan.kv_len]

    def copy_slot(self, source: int, targets: slice, length: int) -> None:
        """Copy the first ``length`` positions of slot ``source`` into the slots ``targets``."""
        for store in (self.keys, self.values):
            for buf in store.values():
                buf[targets, :, :length] = buf[source : source + 1, :, :length]

    def move_slot(self, source: int, target: int, length: int) -> None:
        """Move a sequence from slot ``source`` to slot ``target`` (compaction after a finish)."""
        for store in (self.keys, self.values):
            for buf in store.values():
                buf[target, :, :length] = buf[source, :, :length]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.plan.kv_len

    def memory_bytes(self) -> int:
        """Bytes held by the buffers."""
        return sum(t.numel() * t.element_size() for store in (self.keys, self.values) for t in store.values())
