"""KV reuse across turns: a next-turn prompt prefills only its new tokens, with unchanged results."""

from __future__ import annotations

import pytest
import torch
from codemoe.core.moe import capture_routing
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
    assert cache.evicted_tokens == 4
    cache.add(entry(range(11)))  # larger than the whole budget: not kept
    assert cache.tokens == 7 and cache.reused_tokens == 5


def test_a_sequence_that_extends_the_one_it_continued_replaces_it():
    cache = PrefixCache(budget=100)
    cache.add(entry([1, 2, 3]))
    cache.add(entry([1, 2, 7]))
    cache.add(entry([1, 2, 3, 4, 5]), extends=(1, 2, 3))  # the next turn of [1, 2, 3]: it goes
    assert [e.tokens for e in cache.entries.values()] == [[1, 2, 7], [1, 2, 3, 4, 5]] and cache.tokens == 8
    assert cache.find([1, 2, 3, 9])[1] == 3  # as much reuse as the dropped sequence gave
    cache.add(entry([1, 2, 8, 8]), extends=(1, 2, 7))  # branched off before its end: both kept
    assert len(cache.entries) == 3 and cache.tokens == 12
    cache.add(entry([5, 5]), extends=(9, 9))  # what it continued was evicted meanwhile: nothing to drop
    assert len(cache.entries) == 4 and cache.tokens == 14


def test_live_episodes_hold_one_history_each_and_a_budget_for_them_does_not_thrash(codemoe_model, tokenizer):
    """Four episodes, four turns, a budget a little over their final histories: every turn after
    the first prefills only its new tokens, because each episode keeps one sequence (its latest)
    rather than one per turn it went through."""
    reply = tokenizer.encode("\n# tool: ok\n")
    histories, turns = [tokenizer.encode(f"def f{i}(x):") for i in range(4)], 4
    final = sum(len(h) for h in histories) + turns * 4 * (6 + len(reply))
    engine = EmbeddedEngine(codemoe_model, tokenizer, EmbeddedEngineConfig(prefix_cache_tokens=final + 8))
    reused, kept = 0, []
    for turn in range(turns):
        params = SamplingParams(max_new_tokens=6, temperature=1.0, seed=turn, ignore_eos=True)
        results = engine.generate(histories, params)
        health = engine.health()
        # each history's whole last turn came from the cache (its last sampled token was never fed)
        assert health["prefix_cache_reused_tokens"] - reused == sum(len(k) for k in kept)
        reused = health["prefix_cache_reused_tokens"]
        kept = [r.prompt_token_ids + r.samples[0].token_ids[:-1] for r in results]
        assert health["prefix_cache_tokens"] == sum(len(k) for k in kept)  # one sequence per episode
        assert health["prefix_cache_evicted_tokens"] == 0  # replaced, never evicted
        histories = [r.prompt_token_ids + r.samples[0].token_ids + reply for r in results]


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


TASK = "class Stack:\n    def __init__(self):\n        self.items = []\n"


def _same_samples(got, want):
    for g, w in zip(got, want):
        assert [s.token_ids for s in g.samples] == [s.token_ids for s in w.samples]
        for a, b in zip(g.samples, w.samples):
            assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=0)
            assert torch.equal(a.routing, b.routing)


@pytest.mark.parametrize("lean", [True, False], ids=["lean-decode", "model-forward"])
def test_groups_with_a_common_start_read_it_once_and_sample_the_same(codemoe_model, tokenizer, lean):
    """Several samples' next turns start with the task prompt: it becomes one root, read once a step."""
    on = EmbeddedEngine(codemoe_model, tokenizer, EmbeddedEngineConfig(common_prefix_tokens=8, lean_decode=lean))
    off = EmbeddedEngine(codemoe_model, tokenizer, EmbeddedEngineConfig(common_prefix_tokens=0, lean_decode=lean))
    task = on.encode(TASK)
    prompts = [task + on.encode(tail) for tail in ("    def push", "    def pop", "    def peek(self):")]
    prompts.append(on.encode("import os"))  # shares nothing: no root
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=10, seed=4, ignore_eos=True)
    got = on.generate(prompts, params)
    assert on.health()["common_prefix_tokens_saved"] >= 2 * len(task)  # three groups, one copy
    assert on.health()["common_prefixes"] == 0  # freed with their groups
    _same_samples(got, off.generate(prompts, params))  # `off` is checked against teacher forcing


def test_roots_are_joined_and_freed_while_groups_come_and_go(codemoe_model, tokenizer):
    """Groups arrive while others run and join the running root; the first root to lose all its
    groups frees its slot and the other root moves in while its groups decode."""
    narrow = EmbeddedEngine(codemoe_model, tokenizer, EmbeddedEngineConfig(common_prefix_tokens=8, max_batch_size=8))
    # roots take slots in prompt order: the first one's groups finish first
    first, second = sorted([narrow.encode(TASK), narrow.encode("def fib(n):\n    return n if n < 2 else fib(n - 1)\n")])
    starts = [first, first, second, second, first, second]
    tails = ["x = 1", "y = 2", "z = 3", "w = 4", "a = 5", "b = 6"]  # first tokens all differ
    budgets = [3, 5, 14, 12, 6, 4]  # group 4 joins the first root, group 5 the second after it moved

    def run(engine):
        jobs = []
        for i, (start, tail, budget) in enumerate(zip(starts, tails, budgets)):
            ids = start + engine.encode(tail)
            params = SamplingParams(n=2, temperature=1.0, max_new_tokens=budget, ignore_eos=True)
            jobs.append((ids, engine.submit(ids, params, seed=8, prompt_index=i)))
        return [engine.collect(ids, parts) for ids, parts in jobs]

    got = run(narrow)
    # two roots of two groups each, then one group joining each: two copies of each start saved
    assert narrow.health()["common_prefix_tokens_saved"] == 2 * len(first) + 2 * len(second)
    assert narrow.health()["common_prefixes"] == 0 and narrow.health()["running"] == 0
    _same_samples(got, run(EmbeddedEngine(codemoe_model, tokenizer, EmbeddedEngineConfig(common_prefix_tokens=0))))


def test_next_turns_of_one_task_share_its_prompt_and_keep_their_histories(codemoe_model, tokenizer):
    """Three turns of four samples: histories come from the prefix cache, their common start is a root,
    and what is kept at the end of turn two (root + rest + own tokens) serves turn three."""
    config = {"prefix_cache_tokens": 8192, "common_prefix_tokens": 8}
    on = EmbeddedEngine(codemoe_model, tokenizer, EmbeddedEngineConfig(**config))
    off = EmbeddedEngine(codemoe_model, tokenizer, EmbeddedEngineConfig(**{**config, "common_prefix_tokens": 0}))
    reply = on.encode("\n# tool: ok\n")
    params = SamplingParams(n=4, temperature=1.0, max_new_tokens=6, seed=1, ignore_eos=True)
    prompts = [on.encode(TASK)]
    for turn in range(3):
        got, want = on.generate(prompts, params), off.generate(prompts, params)
        _same_samples(got, want)
        prompts = [o.prompt_token_ids + s.token_ids + reply for o in got for s in o.samples][:4]
        params = SamplingParams(n=1, temperature=1.0, max_new_tokens=6, seed=2 + turn, ignore_eos=True)
    assert on.health()["common_prefix_tokens_saved"] > 0
    assert on.health()["prefix_cache_reused_tokens"] == off.health()["prefix_cache_reused_tokens"] > 0


def test_root_runs_split_neighbours_to_save_the_most_tokens():
    from codemoe.serving.roots import root_runs

    # two tasks' histories, all starting with a 200-token system prompt: a root per task saves more
    assert root_runs([456, 460, 200, 500, 470], 64) == [(0, 2, 456), (3, 5, 470)]
    assert root_runs([300, 300, 300], 64) == [(0, 3, 300)]  # one start in common: one root
    assert root_runs([100, 30, 100], 64) == [(0, 1, 100), (2, 3, 100)]  # under the minimum: apart
    assert root_runs([10], 64) == [] and root_runs([], 64) == []


def test_histories_of_two_tasks_behind_one_system_prompt_get_a_root_each(codemoe_model, tokenizer):
    engine = EmbeddedEngine(codemoe_model, tokenizer, EmbeddedEngineConfig(common_prefix_tokens=8))
    system = engine.encode("import os\nprint(os.getcwd())\n")
    tasks = [system + engine.encode(TASK), system + engine.encode("def fib(n):\n    return n\n")]
    prompts = [task + engine.encode(tail) for task in tasks for tail in ("x = 1", "y = 2", "z = 3")]
    engine.generate(prompts, SamplingParams(max_new_tokens=2, seed=0, ignore_eos=True))
    # two roots of three histories each (one root of all six would save 5 * len(system))
    assert engine.health()["common_prefix_tokens_saved"] == 2 * len(tasks[0]) + 2 * len(tasks[1])


def test_next_turns_of_different_lengths_match_teacher_forced_forwards(codemoe_model, tokenizer):
    """Agent-like next turns: histories and replies of different lengths, so the packed prefill holds
    prompts that reused 0 to ~40 tokens and the decode reads prompts of several lengths (in runs).
    Every log-prob and every expert is what one forward of the whole history gives."""
    engine = EmbeddedEngine(codemoe_model, tokenizer, EmbeddedEngineConfig(prefix_cache_tokens=8192))
    firsts = ["def add(a, b):", "class Stack:\n    def __init__(self):\n        self.items = []\n", "import os"]
    replies = ["\n# ok\n", "\n# tool: 3 tests failed, see above\n", "\n"]
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=12, seed=3, ignore_eos=True)
    prompts = [engine.encode(p) for p in firsts]
    for turn in range(2):
        out = engine.generate([*prompts, engine.encode(f"x = {turn}")], params)  # and a prompt seen first now
        for o in out:
            for sample in o.samples:
                full = torch.tensor([o.prompt_token_ids + sample.token_ids])
                with torch.no_grad(), capture_routing(codemoe_model) as record:
                    logits = codemoe_model(full).logits[0].float()
                layers = record.forwards[0]
                experts = torch.stack([layers[i] for i in sorted(layers)], dim=1)  # [positions, layers, k]
                n = len(o.prompt_token_ids)
                want = torch.log_softmax(logits[n - 1 : -1], -1).gather(1, torch.tensor(sample.token_ids)[:, None])
                assert torch.allclose(torch.tensor(sample.logprobs), want[:, 0], atol=1e-4, rtol=0)
                assert torch.equal(sample.routing.long(), experts[n - 1 : -1])
            assert torch.equal(o.prompt_routing.long(), experts[:n])  # reused tokens' and those prefilled now
        prompts = [o.prompt_token_ids + o.samples[i % 2].token_ids + engine.encode(replies[i % 3])
                   for i, o in enumerate(out[:3])]
    assert engine.health()["prefix_cache_reused_tokens"] > 0


def test_samples_left_running_in_a_group_whose_first_samples_stopped_match_teacher_forced_forwards(
    make_codemoe_model, tokenizer
):
    """GRPO-like groups of four samples that stop at different tokens (a stop string most tokens
    hold), behind prompts long and short enough for the decode to read them in runs: when a group's
    first samples are done its later ones run on alone, and each of their log-probs is still what one
    forward of the whole sequence gives."""
    codemoe_model = make_codemoe_model(max_position_embeddings=2048)
    engine = EmbeddedEngine(codemoe_model, tokenizer, EmbeddedEngineConfig())
    long = engine.encode("def total(items):\n    return sum(items)\n" * 80)
    prompts = [long[:1500], engine.encode("import os"), engine.encode("x = 1"), long[:700]]
    params = SamplingParams(n=4, temperature=1.0, max_new_tokens=16, seed=5, stop=["e"])
    out = engine.generate(prompts, params)
    # the case in question happened: a group's earlier sample stopped while a later one ran on
    assert any(len(a.token_ids) < len(b.token_ids) for o in out for i, a in enumerate(o.samples) for b in o.samples[i + 1 :])
    for o in out:
        for sample in o.samples:
            full = torch.tensor([o.prompt_token_ids + sample.token_ids])
            with torch.no_grad():
                logits = codemoe_model(full).logits[0].float()
            n = len(o.prompt_token_ids)
            want = torch.log_softmax(logits[n - 1 : -1], -1).gather(1, torch.tensor(sample.token_ids)[:, None])
            assert torch.allclose(torch.tensor(sample.logprobs), want[:, 0], atol=1e-4, rtol=0)
