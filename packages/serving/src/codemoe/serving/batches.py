"""Model inputs, attention masks and cache plans of one engine step, built from plain lists.

Masks are additive (0 where a key is visible, the dtype's minimum elsewhere): that is what both
``transformers``' SDPA and eager attention add to their scores.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from codemoe.serving.attention import key_runs
from codemoe.serving.kv_cache import StepPlan

__all__ = ["DecodeBatch", "PrefillBatch", "decode_batch", "prefill_batch"]


def _additive(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    mask = torch.zeros(visible.shape, dtype=dtype, device=visible.device)
    return mask.masked_fill_(~visible, torch.finfo(dtype).min)


@dataclass
class PrefillBatch:
    """One prefill forward: prompts right-padded to ``S`` after ``offsets`` reused tokens, or, packed
    (``plan.prefill_rows``), every row's new tokens one after the other in a single row, no padding."""

    ids: torch.Tensor  # [R, S], packed: [1, T]
    positions: torch.Tensor  # [R, S] absolute positions, packed: [1, T]
    mask: torch.Tensor | None  # [R, 1, S, L] over reused + new keys; packed: None (the engine's attention needs none)
    last: torch.Tensor  # [R] column of each prompt's last token
    plan: StepPlan

    @property
    def packed(self) -> bool:
        return self.plan.prefill_rows is not None

    def per_row(self, values: torch.Tensor) -> torch.Tensor:
        """``values [1, T, ...]`` of a packed forward as ``[R, S, ...]``, each row's from column 0,
        zeros after it (``values`` as they are when not packed)."""
        if not self.packed:
            return values
        lengths = [new for _, _, new in self.plan.prefill_rows]
        rows = values.new_zeros(len(lengths), max(lengths), *values.shape[2:])
        for row, part in enumerate(values[0].split(lengths)):
            rows[row, : len(part)] = part
        return rows


def prefill_batch(
    fresh: list[list[int]], offsets: list[int], slots: list[int], device: torch.device, dtype: torch.dtype,
    *, packed: bool = False,
) -> PrefillBatch:
    """Inputs for prefilling ``fresh[r]`` (the tokens after ``offsets[r]`` reused ones) into prefix slot ``slots[r]``.

    ``packed``: for the engine's own attention (:func:`codemoe.serving.attention.prefill_attention`),
    which takes the rows one after the other in a single row and reads reused tokens where they lie:
    no row is padded, so the projections and experts run on real tokens only. Otherwise the rows are
    right-padded and the mask is causal over reused + new keys, for the model's own attention.
    """
    if packed:
        lengths = [len(f) for f in fresh]
        ids = torch.tensor([[t for f in fresh for t in f]], dtype=torch.long, device=device)
        positions = torch.cat([torch.arange(o, o + n, device=device) for o, n in zip(offsets, lengths)])[None]
        write_slots = torch.repeat_interleave(torch.tensor(slots), torch.tensor(lengths)).to(device)
        plan = StepPlan(
            decoding=False,
            prefill_rows=list(zip(slots, offsets, lengths)),
            write_slots=write_slots,
            write_positions=positions[0],
        )
        last = torch.tensor(lengths, device=device).cumsum(0) - 1
        return PrefillBatch(ids, positions, None, last, plan)
    longest = max(len(f) for f in fresh)
    ids = torch.zeros(len(fresh), longest, dtype=torch.long, device=device)
    for row, tokens in enumerate(fresh):
        ids[row, : len(tokens)] = torch.tensor(tokens)
    start = torch.tensor(offsets, device=device)
    positions = start[:, None] + torch.arange(longest, device=device)
    keys = torch.arange(max(offsets) + longest, device=device)
    # causal over reused + new tokens: real tokens never see the right padding
    mask = _additive((keys[None, None, :] <= positions[:, :, None])[:, None], dtype)
    plan = StepPlan(
        decoding=False,
        groups=torch.tensor(slots, device=device),
        offsets=start if any(offsets) else None,
    )
    last = torch.tensor([len(f) - 1 for f in fresh], device=device)
    return PrefillBatch(ids, positions, mask, last, plan)


@dataclass
class DecodeBatch:
    """One decode forward: the last token of every running sample."""

    ids: torch.Tensor  # [B, 1]
    positions: torch.Tensor  # [B, 1] absolute positions
    mask: torch.Tensor | None  # [B, 1, 1, P + S] for gathered keys; None for the shared-prefix attention
    plan: StepPlan


def decode_batch(
    last_tokens: list[int],
    lengths: list[int],
    row_prompt: list[int],
    row_group: list[int],
    group_prompt: list[int],
    *,
    gather: bool,
    device: torch.device,
    dtype: torch.dtype,
    group_root: list[int] | None = None,
    root_len: list[int] | None = None,
    run_call_keys: int = 0,
) -> DecodeBatch:
    """Inputs for one decode step.

    Row ``b`` has ``lengths[b]`` tokens in the cache, ``row_prompt[b]`` of them its group's prompt;
    it belongs to prefix slot ``row_group[b]`` (its group's rows are one query block, in the order
    they come); ``group_prompt[g]`` is the prompt length held in prefix slot ``g``. With roots,
    prefix slot ``g`` belongs to root slot ``group_root[g]`` (-1: none), which holds ``root_len[r]``
    tokens. ``run_call_keys`` > 0: the engine's attention reads the groups' prompts (and the roots)
    in runs of neighbouring slots (:func:`codemoe.serving.attention.key_runs`, one attention call
    costing that many keys).
    """
    lengths_t = torch.tensor(lengths, device=device)
    suffix_pos = lengths_t - torch.tensor(row_prompt, device=device)  # [B] write position in own tokens
    prompt_len = torch.tensor(group_prompt, device=device)  # [G]
    prefix_keys = torch.arange(int(prompt_len.max()), device=device)
    own_keys = torch.arange(int(suffix_pos.max()) + 1, device=device)
    prefix_mask = _additive((prefix_keys[None, :] < prompt_len[:, None])[:, None, None], dtype)  # [G, 1, 1, P]
    suffix_mask = _additive((own_keys[None, :] <= suffix_pos[:, None])[:, None, None], dtype)  # [B, 1, 1, S]
    # a row's place in its group's query block: its rank among the group's running rows (the samples'
    # own indices leave holes when a group's first samples are done, and a block deeper than its
    # rows is work for nothing)
    row_member, seen = _ranks(row_group, len(group_prompt))
    members = max(seen)
    positions = {n - p for n, p in zip(lengths, row_prompt)}
    plan = StepPlan(
        decoding=True,
        row_group=torch.tensor(row_group, device=device),
        row_member=torch.tensor(row_member, device=device),
        members=members,
        suffix_pos=suffix_pos,
        prefix_mask=prefix_mask,
        suffix_mask=suffix_mask,
        gather=gather,
        same_pos=positions.pop() if len(positions) == 1 else -1,
        in_group_order=len(row_group) == len(group_prompt) * members
        and all(g == b // members and m == b % members for b, (g, m) in enumerate(zip(row_group, row_member))),
    )
    if run_call_keys > 0 and not gather and len(group_prompt) > 1:
        plan.prefix_runs = _runs(tuple(group_prompt), tuple(seen), run_call_keys)
    if root_len:
        readers = _add_roots(plan, row_group, group_root, root_len, device, dtype)
        if run_call_keys > 0 and len(root_len) > 1:
            plan.root_runs = _runs(tuple(root_len), tuple(readers), run_call_keys)
    # gathered keys are the prompt's then the row's own, so the mask is the two side by side
    mask = torch.cat([prefix_mask[plan.row_group], suffix_mask], dim=-1) if gather else None
    ids = torch.tensor(last_tokens, device=device)[:, None]
    return DecodeBatch(ids, lengths_t[:, None], mask, plan)


def _ranks(blocks: list[int], count: int) -> tuple[list[int], list[int]]:
    """Each row's rank among the rows of its block (in row order), and each of ``count`` blocks' rows."""
    sizes = [0] * count
    ranks = []
    for b in blocks:
        ranks.append(sizes[b])
        sizes[b] += 1
    return ranks, sizes


@functools.lru_cache(maxsize=16)
def _runs(lengths: tuple[int, ...], members: tuple[int, ...], call_keys: int) -> list[tuple[int, int, int, int]] | None:
    """:func:`key_runs`, once per set of running prompts (it changes only when samples come or go);
    None for a single run (one call over everything, as without runs)."""
    runs = key_runs(list(lengths), list(members), call_keys)
    return runs if len(runs) > 1 else None


def _add_roots(
    plan: StepPlan, row_group: list[int], group_root: list[int], root_len: list[int], device, dtype
) -> list[int]:
    """Which rows read which root, and as which member of its query block; returns each root's readers."""
    rows = [b for b, g in enumerate(row_group) if group_root[g] >= 0]
    roots = [group_root[row_group[b]] for b in rows]
    members, count = _ranks(roots, len(root_len))
    lengths = torch.tensor(root_len, device=device)
    keys = torch.arange(int(lengths.max()), device=device)
    plan.root_mask = _additive((keys[None, :] < lengths[:, None])[:, None, None], dtype)  # [R, 1, 1, L]
    plan.root_rows = None if len(rows) == len(row_group) else torch.tensor(rows, device=device)
    plan.row_root = torch.tensor(roots, device=device)
    plan.root_member = torch.tensor(members, device=device)
    plan.root_members = max(count)
    per = plan.root_members
    plan.roots_in_order = len(rows) == len(row_group) == len(root_len) * per and all(
        r == b // per and m == b % per for b, (r, m) in enumerate(zip(roots, members))
    )
    return count
