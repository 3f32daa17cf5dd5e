"""The prefix/suffix KV cache keeps prompts and samples intact through growth and moves."""

from __future__ import annotations

import torch
from codemoe.serving.kv_cache import PrefixKVCache, StepPlan


def test_prefill_decode_growth_and_moves():
    cache = PrefixKVCache(torch.device("cpu"))
    cache.reserve(groups=2, prompt=3, slots=2, generation=2)
    cache.plan = StepPlan(decoding=False, groups=torch.tensor([0, 1]))
    prompts = torch.stack([torch.full((2, 3, 4), 1.0), torch.full((2, 3, 4), 2.0)])  # [R, H, S, D]
    keys, _ = cache.update(prompts, prompts + 0.5, 0)
    assert keys is prompts  # a prefill attends to its own fresh keys
    cache.reserve(groups=3, prompt=5, slots=3, generation=6)  # grows, contents kept
    assert cache.sizes == {"groups": 4, "prompt": 6, "slots": 4, "generation": 6, "roots": 0, "root_len": 0}
    (pk, pv), _ = cache.prefix[0], cache.suffix[0]
    assert torch.all(pk[0, :, :3] == 1.0) and torch.all(pv[1, :, :3] == 2.5)

    # decode: rows 0, 1 belong to group 0 (prompt 3 long), row 2 to group 1 (prompt 2 long)
    prefix_mask = torch.tensor([[0.0, 0, 0], [0, 0, -1e30]]).reshape(2, 1, 1, 3)
    suffix_mask = torch.zeros(3, 1, 1, 1)
    step = torch.stack([torch.full((2, 1, 4), float(v)) for v in (7, 8, 9)])  # [B, H, 1, D]
    cache.plan = StepPlan(
        decoding=True,
        row_group=torch.tensor([0, 0, 1]),
        row_member=torch.tensor([0, 1, 0]),
        members=2,
        suffix_pos=torch.tensor([0, 0, 0]),
        prefix_mask=prefix_mask,
        suffix_mask=suffix_mask,
        gather=True,
    )
    keys, _ = cache.update(step, step, 0)
    assert keys.shape == (3, 2, 3 + 1, 4)  # prompt keys then own keys, per row
    assert keys[:, 0, :, 0].tolist() == [[1, 1, 1, 7], [1, 1, 1, 8], [2, 2, 2, 9]]

    cache.move_row(2, 0, 1)
    cache.move_group(1, 0, 3)
    _, pk_v, sk, _ = cache.layer_views(0, groups=1, batch=1)
    assert sk[0, 0, 0, 0].item() == 9.0 and pk_v[0, 0, 0, 0].item() == 2.5
    assert cache.memory_bytes() == 4 * (4 * 2 * 6 * 4) * 4  # 2 stores x (K, V), [4, 2, 6, 4] each, fp32


def test_a_root_holds_the_common_start_and_the_groups_keep_the_rest():
    cache = PrefixKVCache(torch.device("cpu"))
    cache.reserve(groups=2, prompt=5, slots=2, generation=2)
    cache.plan = StepPlan(decoding=False, groups=torch.tensor([0, 1]))
    # two prompts of 5 tokens whose first 3 are the same: token t of group g has key 10 * t + g
    prompts = torch.stack([torch.arange(5.0) * 10 + g for g in (0, 1)])[:, None, :, None].expand(2, 1, 5, 2)
    prompts = prompts.clone()
    prompts[1, :, :3] = prompts[0, :, :3]
    cache.update(prompts, -prompts, 0)
    cache.reserve(0, 0, 0, 0, roots=1, root_len=3)  # only the root store grows
    assert cache.sizes == {"groups": 2, "prompt": 5, "slots": 2, "generation": 2, "roots": 1, "root_len": 3}
    cache.write_root(0, slot=1, length=3)
    for slot in (0, 1):
        cache.drop_leading(slot, start=3, length=5)
    rk, rv = cache.root[0]
    assert rk[0, 0, :, 0].tolist() == [0, 10, 20] and rv[0, 0, :, 0].tolist() == [0, -10, -20]
    pk, _ = cache.prefix[0]
    assert pk[:, 0, :2, 0].tolist() == [[30, 40], [31, 41]]
    # a kept sequence is the root, then its group's rest, then its own tokens
    keys, values = cache.sequence(1, prompt=5, row=0, generated=0, root=0, root_len=3)
    assert keys[0][0, :, 0].tolist() == [0, 10, 20, 31, 41] and values[0][0, :, 0].tolist()[3:] == [-31, -41]
    cache.reserve(0, 0, 0, 0, roots=2, root_len=3)
    cache.move_root(0, 1, 3)
    assert cache.root[0][0][1, 0, :3, 0].tolist() == [0, 10, 20]
