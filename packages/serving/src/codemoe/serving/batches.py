"""Model inputs, attention masks and cache plans of one engine step, built from plain lists.

Masks are additive (0 where a key is visible, the dtype's minimum elsewhere): that is what both
``transformers``' SDPA and eager attention add to their scores.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from codemoe.serving.kv_cache import StepPlan

__all__ = ["DecodeBatch", "PrefillBatch", "decode_batch", "prefill_batch"]


def _additive(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    mask = torch.zeros(visible.shape, dtype=dtype, device=visible.device)
    return mask.masked_fill_(~visible, torch.finfo(dtype).min)


@dataclass
class PrefillBatch:
    """One prefill forward: prompts right-padded to ``S`` after ``offsets`` reused tokens."""

    ids: torch.Tensor  # [R, S]
    positions: torch.Tensor  # [R, S] absolute positions
    mask: torch.Tensor  # [R, 1, S, L] over reused + new keys
    last: torch.Tensor  # [R] column of each prompt's last token
    plan: StepPlan


def prefill_batch(
    fresh: list[list[int]], offsets: list[int], slots: list[int], device: torch.device, dtype: torch.dtype
) -> PrefillBatch:
    """Inputs for prefilling ``fresh[r]`` (the tokens after ``offsets[r]`` reused ones) into prefix slot ``slots[r]``."""
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
    row_member: list[int],
    group_prompt: list[int],
    *,
    gather: bool,
    device: torch.device,
    dtype: torch.dtype,
    group_root: list[int] | None = None,
    root_len: list[int] | None = None,
) -> DecodeBatch:
    """Inputs for one decode step.

    Row ``b`` has ``lengths[b]`` tokens in the cache, ``row_prompt[b]`` of them its group's prompt;
    it belongs to prefix slot ``row_group[b]`` as member ``row_member[b]``; ``group_prompt[g]`` is
    the prompt length held in prefix slot ``g``. With roots, prefix slot ``g`` belongs to root slot
    ``group_root[g]`` (-1: none), which holds ``root_len[r]`` tokens.
    """
    lengths_t = torch.tensor(lengths, device=device)
    suffix_pos = lengths_t - torch.tensor(row_prompt, device=device)  # [B] write position in own tokens
    prompt_len = torch.tensor(group_prompt, device=device)  # [G]
    prefix_keys = torch.arange(int(prompt_len.max()), device=device)
    own_keys = torch.arange(int(suffix_pos.max()) + 1, device=device)
    prefix_mask = _additive((prefix_keys[None, :] < prompt_len[:, None])[:, None, None], dtype)  # [G, 1, 1, P]
    suffix_mask = _additive((own_keys[None, :] <= suffix_pos[:, None])[:, None, None], dtype)  # [B, 1, 1, S]
    members = max(row_member) + 1
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
    if root_len:
        _add_roots(plan, row_group, group_root, root_len, device, dtype)
    # gathered keys are the prompt's then the row's own, so the mask is the two side by side
    mask = torch.cat([prefix_mask[plan.row_group], suffix_mask], dim=-1) if gather else None
    ids = torch.tensor(last_tokens, device=device)[:, None]
    return DecodeBatch(ids, lengths_t[:, None], mask, plan)


def _add_roots(plan: StepPlan, row_group: list[int], group_root: list[int], root_len: list[int], device, dtype):
    """Which rows read which root, and as which member of its query block."""
    rows, roots, members = [], [], []
    count = [0] * len(root_len)
    for b, g in enumerate(row_group):
        r = group_root[g]
        if r >= 0:
            rows.append(b)
            roots.append(r)
            members.append(count[r])
            count[r] += 1
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
