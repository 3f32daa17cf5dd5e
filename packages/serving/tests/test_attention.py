"""The engine's own attention against softmax attention written out in float64: packed prefills
after reused tokens, and decode steps whose prompts are read in runs by length."""

from __future__ import annotations

import itertools
import random

import pytest
import torch
from codemoe.serving.attention import decode_attention, key_runs, prefill_attention
from codemoe.serving.batches import decode_batch, prefill_batch
from codemoe.serving.kv_cache import PrefixKVCache

CPU = torch.device("cpu")
HQ, HKV, D = 4, 2, 8  # two query heads per key/value head, as the tiny presets


def reference(q, keys, values, visible):
    """Softmax attention of one query head's rows ``q [n, D]`` over ``keys``/``values [K, D]``,
    ``visible [n, K]`` bool, in float64."""
    scores = (q.double() @ keys.double().T) * D**-0.5
    scores = scores.masked_fill(~visible, float("-inf"))
    return torch.softmax(scores, -1) @ values.double()


def cost(runs, call_keys):
    return sum((end - first) * keys * rows + call_keys for first, end, keys, rows in runs)


def test_key_runs_split_blocks_where_the_keys_saved_pay_for_another_call():
    ones = [1] * 4
    assert key_runs([100, 100, 1000, 1000], ones, 50) == [(0, 2, 100, 1), (2, 4, 1000, 1)]
    assert key_runs([100, 100, 1000, 1000], ones, 10**6) == [(0, 4, 1000, 1)]  # a call costs more than the padding
    assert key_runs([500], [3], 7) == [(0, 1, 500, 3)]
    # a short block between long ones: reading it up to the long length is cheaper than two more calls
    assert key_runs([900, 10, 900], [1, 1, 1], 500) == [(0, 3, 900, 1)]
    assert key_runs([900, 10, 900], [1, 1, 1], 100) == [(0, 1, 900, 1), (1, 2, 10, 1), (2, 3, 900, 1)]
    # equal lengths, one block read by 22 rows: the others' query blocks are not padded to it
    assert key_runs([400, 400, 400], [2, 22, 2], 1024) == [(0, 1, 400, 2), (1, 2, 400, 22), (2, 3, 400, 2)]


def test_key_runs_are_the_cheapest_split_of_every_small_case():
    """Against every way of cutting 1-7 blocks into runs of neighbours."""
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 7)
        lengths = [rng.randint(1, 2000) for _ in range(n)]
        members = [rng.choice([0, 1, 1, 2, 8]) for _ in range(n)]
        call_keys = rng.choice([0, 64, 1024, 4096])
        runs = key_runs(lengths, members, call_keys)
        assert runs[0][0] == 0 and runs[-1][1] == n
        assert all(a[1] == b[0] for a, b in itertools.pairwise(runs))  # contiguous, in order
        assert all(keys == max(lengths[f:e]) and rows == max(members[f:e]) for f, e, keys, rows in runs)
        best = min(
            cost([(a, b, max(lengths[a:b]), max(members[a:b])) for a, b in itertools.pairwise((0, *cuts, n))],
                 call_keys)
            for k in range(n)
            for cuts in itertools.combinations(range(1, n), k)
        )
        assert cost(runs, call_keys) == best


@pytest.mark.parametrize("reused", [[0, 0, 0], [5, 0, 17], [3, 9, 1]], ids=["whole-prompts", "mixed", "all-reused"])
def test_a_packed_prefill_is_each_prompts_causal_attention_after_its_reused_tokens(reused):
    torch.manual_seed(0)
    new = [4, 11, 1]
    slots = [2, 0, 1]
    cache = PrefixKVCache(CPU)
    cache.reserve(groups=3, prompt=32, slots=3, generation=4)
    history = {s: (torch.randn(HKV, 32, D), torch.randn(HKV, 32, D)) for s in slots}
    batch = prefill_batch([[1] * n for n in new], reused, slots, CPU, torch.float32, packed=True)
    assert batch.ids.shape == (1, sum(new)) and batch.mask is None
    assert batch.positions[0].tolist() == [p for o, n in zip(reused, new) for p in range(o, o + n)]
    assert batch.last.tolist() == [3, 14, 15]
    cache.plan = batch.plan
    q, k, v = torch.randn(1, HQ, sum(new), D), torch.randn(1, HKV, sum(new), D), torch.randn(1, HKV, sum(new), D)
    cache._stores(0, k, v)
    pk, pv = cache.prefix[0]
    for s, (hk, hv) in history.items():
        pk[s], pv[s] = hk, hv  # the slot's reused tokens (and stale values past them, never read)
    returned = cache.update(k, v, 0)
    assert returned[0] is k  # the attention reads the stores itself
    out = prefill_attention(q, k, v, cache, 0, None)
    start = 0
    for slot, o, n in zip(slots, reused, new):
        span = slice(start, start + n)
        # the new keys were written after the reused ones
        assert torch.equal(pk[slot, :, o : o + n], k[0, :, span]) and torch.equal(pv[slot, :, o : o + n], v[0, :, span])
        keys, values = torch.cat([history[slot][0][:, :o], k[0, :, span]], 1), torch.cat(
            [history[slot][1][:, :o], v[0, :, span]], 1
        )
        visible = torch.arange(o + n)[None, :] <= (o + torch.arange(n))[:, None]  # [n, o + n]
        for h in range(HQ):
            want = reference(q[0, h, span], keys[h // 2], values[h // 2], visible)
            assert torch.allclose(out[0, span, h].double(), want, atol=1e-5, rtol=0)
        start += n


@pytest.mark.parametrize("finished", [(), (0, 6, 8, 10)], ids=["all-running", "first-samples-finished"])
def test_decode_reads_prompts_in_runs_and_gives_what_one_padded_read_gives(finished):
    """Eight groups of two samples with prompts of very different lengths, some with a root: the
    runs read less than the longest prompt for most groups and the result is the same attention.
    ``finished``: samples that are done, so the first sample of groups 0, 3, 4 and 5 is gone and their
    second runs alone: its group's block is then one row deep, whatever the sample's index."""
    torch.manual_seed(1)
    prompt = [700, 40, 35, 60, 650, 20, 30, 25]
    roots, root_len = [0, 0, 1, -1, 2, 2, 0, -1], [300, 20, 500]  # read by 6, 2 and 4 rows
    groups = len(prompt)
    live = [(b // 2, b % 2) for b in range(2 * groups) if b not in finished]  # (group, member) of each row
    rows = len(live)
    own = [3] * rows
    cache = PrefixKVCache(CPU)
    cache.reserve(groups, 800, rows, 8, roots=3, root_len=500)
    k0 = torch.zeros(1, HKV, 1, D)
    cache._stores(0, k0, k0)
    for store in (cache.prefix[0], cache.suffix[0], cache.root[0]):
        for t in store:
            t.normal_()
    query = torch.randn(rows, HQ, 1, D)
    held = [(root_len[r] if r >= 0 else 0) + p for r, p in zip(roots, prompt)]  # each group's whole prompt

    def attention(call_keys):
        batch = decode_batch(
            [1] * rows,
            [held[g] + own[b] for b, (g, _) in enumerate(live)],  # tokens in the cache
            [held[g] for g, _ in live],  # of which the row's prompt
            [g for g, _ in live],
            prompt,
            gather=False,
            device=CPU,
            dtype=torch.float32,
            group_root=roots,
            root_len=root_len,
            run_call_keys=call_keys,
        )
        cache.plan = batch.plan
        return batch.plan, decode_attention(query, cache, 0, None)

    padded_plan, padded = attention(0)
    assert padded_plan.prefix_runs is None and padded_plan.root_runs is None
    plan, got = attention(64)
    depth = [sum(g == group for g, _ in live) for group in range(groups)]  # running rows per group
    assert depth == ([2] * 8 if not finished else [1, 2, 2, 1, 1, 1, 2, 2])
    runs = [(0, 1, 700), (1, 3, 40), (3, 4, 60), (4, 5, 650), (5, 8, 30)]
    assert plan.prefix_runs == [(a, b, k, max(depth[a:b])) for a, b, k in runs]
    readers = [sum(roots[g] == r for g, _ in live) for r in range(3)]
    assert plan.root_runs == [(0, 1, 300, readers[0]), (1, 2, 20, readers[1]), (2, 3, 500, readers[2])]
    assert torch.allclose(got, padded, atol=1e-6, rtol=0)
    # and both are the softmax over the row's root, its group's prompt and its own tokens
    pk, pv = cache.prefix[0]
    sk, sv = cache.suffix[0]
    rk, rv = cache.root[0]
    for b, (g, _) in enumerate(live):
        r = roots[g]
        head_k = [rk[r, :, : root_len[r]]] if r >= 0 else []
        head_v = [rv[r, :, : root_len[r]]] if r >= 0 else []
        keys = torch.cat([*head_k, pk[g, :, : prompt[g]], sk[b, :, : own[b] + 1]], 1)
        values = torch.cat([*head_v, pv[g, :, : prompt[g]], sv[b, :, : own[b] + 1]], 1)
        for h in range(HQ):
            want = reference(query[b, h], keys[h // 2], values[h // 2], torch.ones(1, keys.shape[1], dtype=torch.bool))
            assert torch.allclose(got[b, 0, h].double(), want[0], atol=1e-5, rtol=0)
