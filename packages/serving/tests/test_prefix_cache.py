"""KV reuse across turns: a next-turn prompt prefills only its new tokens, with unchanged results."""

from __future__ import annotations

import torch
from codemoe.serving import SamplingParams
from codemoe.serving.embedded import EmbeddedEngine, EmbeddedEngineConfig
from codemoe.serving.prefix_cache import CachedSequence, PrefixCache


def entry(tokens):
    return CachedSequence(list(tokens), {}, {})


def test_lookup_takes_the_longest_prefix_and_eviction_is_lru():
    cache = PrefixCache(budget=10)
    cache.add(entry([1, 2, 3]))
    cache.add(entry([1, 2, 9, 9]))
    found, length = cache.lookup([1, 2, 9, 7, 7])
    assert found.tokens == [1, 2, 9, 9] and length == 3
    found, length = cache.lookup([1, 2, 3])  # the last prompt token is always computed
    assert length == 2
    assert cache.lookup([5, 6]) == (None, 0)
    cache.add(entry([4, 4, 4, 4]))  # 11 tokens > 10: the least recently used ([1, 2, 9, 9]) goes
    assert [e.tokens for e in cache.entries.values()] == [[1, 2, 3], [4, 4, 4, 4]] and cache.tokens == 7
    cache.add(entry(range(11)))  # larger than the whole budget: not kept
    assert cache.tokens == 7 and cache.reused_tokens == 5


def test_a_next_turn_reuses_the_last_turn_and_samples_the_same(codemoe_model, tokenizer):
    kept = EmbeddedEngine(codemoe_model, tokenizer, EmbeddedEngineConfig(prefix_cache_tokens=4096))
    turn1 = kept.generate(["def add(a, b):"], SamplingParams(n=2, max_new_tokens=10, seed=1, ignore_eos=True))[0]
    history = turn1.prompt_token_ids + turn1.samples[1].token_ids
    prompts = [history + kept.encode("\n# tool: ok\n"), kept.encode("class Stack:")]
    params = SamplingParams(n=3, temperature=0.9, max_new_tokens=8, seed=2, ignore_eos=True)
    got = kept.generate(prompts, params)
    assert kept.health()["prefix_cache_reused_tokens"] == len(history) - 1  # all but the never-fed last token
    want = EmbeddedEngine(codemoe_model, tokenizer).generate(prompts, params)
    for g, w in zip(got, want):
        assert [s.token_ids for s in g.samples] == [s.token_ids for s in w.samples]
        for a, b in zip(g.samples, w.samples):
            assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)
            assert torch.equal(a.routing, b.routing)
        assert torch.equal(g.prompt_routing, w.prompt_routing)


def test_new_weights_clear_the_prefix_cache(make_codemoe_model, tokenizer):
    model = make_codemoe_model(0)
    engine = EmbeddedEngine(model, tokenizer, EmbeddedEngineConfig(prefix_cache_tokens=4096))
    engine.generate(["def add(a, b):"], SamplingParams(max_new_tokens=4))
    assert engine.health()["prefix_cache_tokens"] > 0
    engine.update_weights(state_dict=make_codemoe_model(1).state_dict())
    assert engine.health()["prefix_cache_tokens"] == 0
