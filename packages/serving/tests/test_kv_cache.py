"""The slot KV cache keeps sequences intact through growth, copies and moves."""

from __future__ import annotations

import torch
from codemoe.serving.kv_cache import SlotKVCache, WritePlan


def prefill(cache, slot, length, value):
    cache.plan = WritePlan(slots=torch.tensor([slot]), kv_len=length)
    k = torch.full((1, 2, length, 4), float(value))
    return cache.update(k, k + 0.5, 0)


def test_prefill_decode_growth_copy_and_move():
    cache = SlotKVCache(torch.device("cpu"), torch.float32)
    cache.reserve(2, 4)
    keys, values = prefill(cache, 0, 3, 1.0)
    assert keys.shape == (1, 2, 3, 4) and torch.all(values == 1.5)
    cache.reserve(5, 9)  # grows: the prefilled positions survive
    assert cache.slots >= 5 and cache.capacity >= 9
    assert torch.all(cache.keys[0][0, :, :3] == 1.0)
    cache.copy_slot(0, slice(1, 3), 3)
    assert torch.all(cache.keys[0][1:3, :, :3] == 1.0)
    cache.plan = WritePlan(positions=torch.tensor([3, 3, 3]), kv_len=4)
    step = torch.stack([torch.full((2, 1, 4), float(v)) for v in (7, 8, 9)])  # [B, H, 1, D]
    keys, _ = cache.update(step, step, 0)
    assert keys.shape == (3, 2, 4, 4)
    assert keys[:, 0, 3, 0].tolist() == [7.0, 8.0, 9.0] and torch.all(keys[:, :, :3] == 1.0)
    cache.move_slot(2, 0, 4)
    assert cache.keys[0][0, 0, :4, 0].tolist() == [1.0, 1.0, 1.0, 9.0]
    assert cache.memory_bytes() == 2 * cache.slots * 2 * cache.capacity * 4 * 4
