"""Known-answer masks and plans for prefill and decode steps."""

from __future__ import annotations

import torch
from codemoe.serving.batches import decode_batch, prefill_batch

CPU = torch.device("cpu")


def visible(mask):
    return (mask == 0).int().tolist()


def test_prefill_pads_right_and_attends_causally_after_reused_tokens():
    batch = prefill_batch([[7, 8], [9]], offsets=[0, 2], slots=[3, 4], device=CPU, dtype=torch.float32)
    assert batch.ids.tolist() == [[7, 8], [9, 0]]
    assert batch.positions.tolist() == [[0, 1], [2, 3]]
    assert batch.last.tolist() == [1, 0]
    assert visible(batch.mask[:, 0]) == [
        [[1, 0, 0, 0], [1, 1, 0, 0]],  # row 0: its own two tokens, causally
        [[1, 1, 1, 0], [1, 1, 1, 1]],  # row 1: two reused tokens, then its own (and a pad)
    ]
    assert batch.plan.groups.tolist() == [3, 4] and batch.plan.offsets.tolist() == [0, 2]
    assert prefill_batch([[1]], [0], [0], CPU, torch.float32).plan.offsets is None


def test_decode_masks_split_prompt_and_own_tokens():
    batch = decode_batch(
        last_tokens=[5, 6, 7],
        lengths=[4, 5, 3],  # tokens in cache: rows 0, 1 of group 0 (prompt 3), row 2 of group 1 (prompt 2)
        row_prompt=[3, 3, 2],
        row_group=[0, 0, 1],
        group_prompt=[3, 2],
        gather=True,
        device=CPU,
        dtype=torch.float32,
    )
    plan = batch.plan
    assert batch.ids.tolist() == [[5], [6], [7]] and batch.positions.tolist() == [[4], [5], [3]]
    assert plan.suffix_pos.tolist() == [1, 2, 1] and plan.members == 2
    assert visible(plan.prefix_mask[:, 0, 0]) == [[1, 1, 1], [1, 1, 0]]
    assert visible(plan.suffix_mask[:, 0, 0]) == [[1, 1, 0], [1, 1, 1], [1, 1, 0]]
    assert visible(batch.mask[:, 0, 0]) == [[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1], [1, 1, 0, 1, 1, 0]]
    no_gather = decode_batch([5], [3], [3], [0], [3], gather=False, device=CPU, dtype=torch.float32)
    assert no_gather.mask is None
    assert plan.same_pos == -1 and not plan.in_group_order  # rows write at 1, 2, 1; group 1 lacks a member


def test_decode_plan_spots_grpo_layout_for_views_instead_of_scatters():
    def plan(row_group):
        """Two groups of two samples (prompts of 5 and 7 tokens), every row at its second own token."""
        args = ([1, 2, 3, 4], [7, 7, 9, 9], [5, 5, 7, 7], row_group, [5, 7])
        return decode_batch(*args, gather=False, device=CPU, dtype=torch.float32).plan

    # started together: rows are the groups' blocks, all at one position
    grpo = plan([0, 0, 1, 1])
    assert grpo.same_pos == 2 and grpo.in_group_order
    # after compaction a group's rows may come out of order
    shuffled = plan([0, 1, 0, 1])
    assert shuffled.same_pos == 2 and not shuffled.in_group_order
