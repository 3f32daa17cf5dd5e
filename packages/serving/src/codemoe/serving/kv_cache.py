"""The engine's KV cache: each prompt stored once, each sample's own tokens stored apart.

Per layer, two preallocated stores that grow by doubling:

- prefix ``[group_slots, kv_heads, prompt_capacity, head_dim]``: the prompt of each running group
  (a prompt with its ``n`` samples), written once by the prefill;
- suffix ``[slots, kv_heads, generation_capacity, head_dim]``: the generated tokens of each running
  sample.

- root ``[root_slots, kv_heads, root_capacity, head_dim]``: the leading tokens that several groups
  admitted together have in common (an agent's next turns: every sample's history starts with the
  task prompt). A group with a root keeps only the rest of its prompt in its prefix slot, shifted
  to position 0 after its prefill (:meth:`PrefixKVCache.drop_leading`).

Running samples occupy suffix slots ``0 .. B-1``, running groups prefix slots ``0 .. G-1`` and
roots root slots ``0 .. R-1``; a finished one's slot is refilled by moving the last one in, so reads
are views, never copies.
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
    groups: torch.Tensor | None = None  # [R] prefix slots, padded prefill only
    offsets: torch.Tensor | None = None  # [R] prompt tokens already in each prefix slot (reused), prefill only
    # a packed prefill (one row of every prompt's new tokens) for the engine's attention, which reads
    # reused tokens in place: (prefix slot, reused tokens, new tokens) per prompt, and where each
    # packed token is written (prefix slot, position)
    prefill_rows: list[tuple[int, int, int]] | None = None
    write_slots: torch.Tensor | None = None  # [T]
    write_positions: torch.Tensor | None = None  # [T]
    row_group: torch.Tensor | None = None  # [B] prefix slot of each row
    row_member: torch.Tensor | None = None  # [B] index of each row within its group
    members: int = 0  # most rows any group has
    suffix_pos: torch.Tensor | None = None  # [B] write position in the suffix
    prefix_mask: torch.Tensor | None = None  # [G, 1, 1, P] additive: 0 on the prompt, min beyond
    suffix_mask: torch.Tensor | None = None  # [B, 1, 1, S] additive: 0 up to suffix_pos
    gather: bool = False  # return prefix + suffix keys from update (models without the engine attention)
    same_pos: int = -1  # the write position when every row writes at the same one (a slice, not a scatter)
    in_group_order: bool = False  # rows are groups 0..G-1 in turn, each with all its members in order
    # prefix slots read in runs (first, end, keys, members): each run's prompts up to its own longest,
    # its query blocks as deep as its largest group
    prefix_runs: list[tuple[int, int, int, int]] | None = None
    # decode with roots: rows ``root_rows`` (all rows when None) also attend to root slot
    # ``row_root`` as member ``root_member`` of its query block, masked by ``root_mask``
    root_mask: torch.Tensor | None = None  # [R, 1, 1, L] additive
    root_rows: torch.Tensor | None = None  # [B'] rows that have a root
    row_root: torch.Tensor | None = None  # [B'] root slot of each of those rows
    root_member: torch.Tensor | None = None  # [B'] index of each of those rows within its root's block
    root_members: int = 0  # most rows any root has
    roots_in_order: bool = False  # every row has a root; rows are roots 0..R-1 in turn, all members in order
    root_runs: list[tuple[int, int, int, int]] | None = None  # root slots read in runs, as prefix_runs


class PrefixKVCache:
    """Prefix and suffix stores per layer (see the module docstring)."""

    is_compileable = False

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.sizes = {"groups": 0, "prompt": 0, "slots": 0, "generation": 0, "roots": 0, "root_len": 0}
        self.prefix: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.suffix: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.root: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.plan = StepPlan()

    _STORES = (("prefix", "groups", "prompt"), ("suffix", "slots", "generation"), ("root", "roots", "root_len"))

    def reserve(self, groups: int, prompt: int, slots: int, generation: int, roots: int = 0, root_len: int = 0) -> None:
        """Make room, keeping the contents, for this many group slots / prompt tokens / sample slots /
        tokens / root slots / root tokens."""
        wanted = {
            "groups": groups,
            "prompt": prompt,
            "slots": slots,
            "generation": generation,
            "roots": roots,
            "root_len": root_len,
        }
        grown = {k: max(v, 2 * self.sizes[k]) if v > self.sizes[k] else self.sizes[k] for k, v in wanted.items()}
        if grown == self.sizes:
            return
        for name, rows, cols in self._STORES:
            store = getattr(self, name)
            if (grown[rows], grown[cols]) == (self.sizes[rows], self.sizes[cols]):
                continue
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

    def _stores(self, layer: int, key_like: torch.Tensor, value_like: torch.Tensor):
        """The layer's stores, made on first use; keys and values each keep their own heads and
        width (MLA caches a latent ``[B, 1, S, rank]`` and a shared rotary key ``[B, 1, S, rope]``)."""
        if layer not in self.prefix:
            for name, rows, cols in self._STORES:
                pair = tuple(
                    like.new_zeros(self.sizes[rows], like.shape[1], self.sizes[cols], like.shape[3])
                    for like in (key_like, value_like)
                )
                getattr(self, name)[layer] = pair
        return self.prefix[layer], self.suffix[layer]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        """Store this forward's keys/values ``[B, H, S, D]`` (values may have other ``H, D``); return
        what the model's attention should read."""
        (pk, pv), (sk, sv) = self._stores(layer_idx, key_states, value_states)
        plan = self.plan
        if plan.prefill_rows is not None:  # packed prefill: the engine attention reads the stores in place
            pk[plan.write_slots, :, plan.write_positions] = key_states[0].transpose(0, 1)
            pv[plan.write_slots, :, plan.write_positions] = value_states[0].transpose(0, 1)
            return key_states, value_states
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

    def root_views(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(keys, values) of the running roots, as long as the longest."""
        roots, length = self.plan.root_mask.shape[0], self.plan.root_mask.shape[-1]
        rk, rv = self.root[layer]
        return rk[:roots, :, :length], rv[:roots, :, :length]

    def write_root(self, root: int, slot: int, length: int) -> None:
        """Copy the first ``length`` prompt tokens of prefix ``slot`` into root slot ``root``."""
        for layer, pair in self.prefix.items():
            for buf, root_buf in zip(pair, self.root[layer]):
                root_buf[root, :, :length] = buf[slot, :, :length]

    def drop_leading(self, slot: int, start: int, length: int) -> None:
        """Shift prefix ``slot``'s tokens ``start .. length-1`` to position 0 (the rest now lives in a root)."""
        for pair in self.prefix.values():
            for buf in pair:
                buf[slot, :, : length - start] = buf[slot, :, start:length].clone()

    def move_root(self, source: int, target: int, length: int) -> None:
        """Move a root to another root slot (compaction after its last group finished)."""
        for pair in self.root.values():
            for buf in pair:
                buf[target, :, :length] = buf[source, :, :length]

    def write_prefix(
        self, slot: int, keys: dict[int, torch.Tensor], values: dict[int, torch.Tensor], length: int
    ) -> None:
        """Put reused keys/values (layer -> ``[H, >=length, D]``) at positions ``0 .. length-1`` of a prefix slot."""
        for layer, k in keys.items():
            (pk, pv), _ = self._stores(layer, k[None], values[layer][None])
            pk[slot, :, :length] = k[:, :length]
            pv[slot, :, :length] = values[layer][:, :length]

    def sequence(
        self, slot: int, prompt: int, row: int, generated: int, root: int = -1, root_len: int = 0
    ) -> tuple[dict, dict]:
        """Copies of one sample's keys/values: its prompt (its root's ``root_len`` tokens, then the
        ``prompt - root_len`` of its group's slot) then its first ``generated`` own tokens."""
        keys, values = {}, {}
        for layer in self.prefix:
            (pk, pv), (sk, sv) = self.prefix[layer], self.suffix[layer]
            head_k, head_v = [], []
            if root >= 0:
                rk, rv = self.root[layer]
                head_k, head_v = [rk[root, :, :root_len]], [rv[root, :, :root_len]]
            rest = prompt - root_len
            keys[layer] = torch.cat([*head_k, pk[slot, :, :rest], sk[row, :, :generated]], dim=1)
            values[layer] = torch.cat([*head_v, pv[slot, :, :rest], sv[row, :, :generated]], dim=1)
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
        stores = (self.prefix, self.suffix, self.root)
        return sum(t.numel() * t.element_size() for s in stores for p in s.values() for t in p)
