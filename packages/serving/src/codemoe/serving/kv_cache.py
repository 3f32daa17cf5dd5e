"""The engine's KV cache: each prompt stored once, each sample's own tokens stored apart.

Per layer, two preallocated stores that grow by doubling:

- prefix ``[group_slots, kv_heads, prompt_capacity, head_dim]``: the prompt of each running group
  (a prompt with its ``n`` samples), written once by the prefill;
- suffix ``[slots, kv_heads, generation_capacity, head_dim]``: the generated tokens of each running
  sample.

Running samples occupy suffix slots ``0 .. B-1`` and running groups prefix slots ``0 .. G-1``;
a finished one's slot is refilled by moving the last one in, so reads are views, never copies.
A decode step attends to its group's prefix and its own suffix: either with
:mod:`codemoe.serving.attention` (the prefix read once per group), or, for models that do not
dispatch attention through ``transformers``' interface, by gathering both into one key sequence.
The cache quacks like a ``transformers`` cache (``update``), so any causal LM writes into it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["PrefixKVCache", "StepPlan"]


@dataclass
class StepPlan:
    """What the forward in progress reads and writes.

    Prefill (``decoding`` False): row ``r`` is the prompt of the group in prefix slot ``groups[r]``.
    Decode: row ``b`` writes its token at ``suffix_pos[b]`` of suffix slot ``b``, and attends to
    prefix slot ``row_group[b]`` (masked by ``prefix_mask``) and its suffix (``suffix_mask``).
    """

    decoding: bool = False
    groups: torch.Tensor | None = None  # [R] prefix slots, prefill only
    offsets: torch.Tensor | None = None  # [R] prompt tokens already in each prefix slot (reused), prefill only
    row_group: torch.Tensor | None = None  # [B] prefix slot of each row
    row_member: torch.Tensor | None = None  # [B] index of each row within its group
    members: int = 0  # most rows any group has
    suffix_pos: torch.Tensor | None = None  # [B] write position in the suffix
    prefix_mask: torch.Tensor | None = None  # [G, 1, 1, P] additive: 0 on the prompt, min beyond
    suffix_mask: torch.Tensor | None = None  # [B, 1, 1, S] additive: 0 up to suffix_pos
    gather: bool = False  # return prefix + suffix keys from update (models without the engine attention)
    same_pos: int = -1  # the write position when every row writes at the same one (a slice, not a scatter)
    in_group_order: bool = False  # rows are groups 0..G-1 in turn, each with all its members in order


class PrefixKVCache:
    """Prefix and suffix stores per layer (see the module docstring)."""

    is_compileable = False

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.sizes = {"groups": 0, "prompt": 0, "slots": 0, "generation": 0}
        self.prefix: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.suffix: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.plan = StepPlan()

    def reserve(self, groups: int, prompt: int, slots: int, generation: int) -> None:
        """Make room, keeping the contents, for this many group slots / prompt tokens / sample slots / tokens."""
        wanted = {"groups": groups, "prompt": prompt, "slots": slots, "generation": generation}
        grown = {k: max(v, 2 * self.sizes[k]) if v > self.sizes[k] else self.sizes[k] for k, v in wanted.items()}
        if grown == self.sizes:
            return
        for store, (rows, cols) in ((self.prefix, ("groups", "prompt")), (self.suffix, ("slots", "generation"))):
            for layer, pair in store.items():
                store[layer] = tuple(
                    self._grow(t, self.sizes[rows], self.sizes[cols], grown[rows], grown[cols]) for t in pair
                )
        self.sizes = grown

    @staticmethod
    def _grow(old: torch.Tensor, rows: int, cols: int, new_rows: int, new_cols: int) -> torch.Tensor:
        fresh = old.new_zeros(new_rows, old.shape[1], new_cols, old.shape[3])
        fresh[:rows, :, :cols] = old[:rows, :, :cols]
        return fresh

    def _stores(self, layer: int, like: torch.Tensor):
        if layer not in self.prefix:
            heads, dim = like.shape[1], like.shape[3]
            for store, rows, cols in ((self.prefix, "groups", "prompt"), (self.suffix, "slots", "generation")):
                shape = (self.sizes[rows], heads, self.sizes[cols], dim)
                store[layer] = (like.new_zeros(shape), like.new_zeros(shape))
        return self.prefix[layer], self.suffix[layer]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        """Store this forward's keys/values ``[B, H, S, D]``; return what the model's attention should read."""
        (pk, pv), (sk, sv) = self._stores(layer_idx, key_states)
        plan = self.plan
        if not plan.decoding and plan.offsets is None:  # prefill of whole prompts: they attend to themselves
            length = key_states.shape[2]
            pk[plan.groups, :, :length] = key_states
            pv[plan.groups, :, :length] = value_states
            return key_states, value_states
        if not plan.decoding:  # prefill after reused tokens: attend to them and to the new ones
            length = key_states.shape[2]
            positions = plan.offsets[:, None] + torch.arange(length, device=key_states.device)  # [R, S]
            slots = plan.groups[:, None].expand(-1, length)
            pk[slots, :, positions] = key_states.transpose(1, 2)
            pv[slots, :, positions] = value_states.transpose(1, 2)
            end = int(plan.offsets.max()) + length
            return pk[plan.groups, :, :end], pv[plan.groups, :, :end]
        batch = key_states.shape[0]
        if plan.same_pos >= 0:
            sk[:batch, :, plan.same_pos] = key_states[:, :, 0]
            sv[:batch, :, plan.same_pos] = value_states[:, :, 0]
        else:
            rows = torch.arange(batch, device=key_states.device)
            sk[rows, :, plan.suffix_pos] = key_states[:, :, 0]
            sv[rows, :, plan.suffix_pos] = value_states[:, :, 0]
        if not plan.gather:
            return key_states, value_states  # the engine attention reads the stores itself
        prompt, generated = plan.prefix_mask.shape[-1], plan.suffix_mask.shape[-1]
        keys = torch.cat([pk[plan.row_group, :, :prompt], sk[:batch, :, :generated]], dim=2)
        values = torch.cat([pv[plan.row_group, :, :prompt], sv[:batch, :, :generated]], dim=2)
        return keys, values

    def layer_views(self, layer: int, groups: int, batch: int):
        """(prefix keys, prefix values, suffix keys, suffix values) of the running groups and rows."""
        prompt, generated = self.plan.prefix_mask.shape[-1], self.plan.suffix_mask.shape[-1]
        (pk, pv), (sk, sv) = self.prefix[layer], self.suffix[layer]
        return (
            pk[:groups, :, :prompt],
            pv[:groups, :, :prompt],
            sk[:batch, :, :generated],
            sv[:batch, :, :generated],
        )

    def write_prefix(
        self, slot: int, keys: dict[int, torch.Tensor], values: dict[int, torch.Tensor], length: int
    ) -> None:
        """Put reused keys/values (layer -> ``[H, >=length, D]``) at positions ``0 .. length-1`` of a prefix slot."""
        for layer, k in keys.items():
            (pk, pv), _ = self._stores(layer, k[None])
            pk[slot, :, :length] = k[:, :length]
            pv[slot, :, :length] = values[layer][:, :length]

    def sequence(self, slot: int, prompt: int, row: int, generated: int) -> tuple[dict, dict]:
        """Copies of one sample's keys/values: its prompt then its first ``generated`` own tokens."""
        keys, values = {}, {}
        for layer in self.prefix:
            (pk, pv), (sk, sv) = self.prefix[layer], self.suffix[layer]
            keys[layer] = torch.cat([pk[slot, :, :prompt], sk[row, :, :generated]], dim=1)
            values[layer] = torch.cat([pv[slot, :, :prompt], sv[row, :, :generated]], dim=1)
        return keys, values

    def move_row(self, source: int, target: int, length: int) -> None:
        """Move a sample's generated tokens to another suffix slot (compaction after a finish)."""
        for pair in self.suffix.values():
            for buf in pair:
                buf[target, :, :length] = buf[source, :, :length]

    def move_group(self, source: int, target: int, length: int) -> None:
        """Move a group's prompt to another prefix slot (compaction after a group finished)."""
        for pair in self.prefix.values():
            for buf in pair:
                buf[target, :, :length] = buf[source, :, :length]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0

    def memory_bytes(self) -> int:
        """Bytes held by the stores."""
        return sum(t.numel() * t.element_size() for s in (self.prefix, self.suffix) for p in s.values() for t in p)
