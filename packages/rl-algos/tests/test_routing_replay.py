"""Routing replay: the trainer's policy forwards use exactly the experts the engine chose."""

from __future__ import annotations

import copy

import torch
from codemoe.core.contracts import SamplingParams
from codemoe.core.moe import capture_routing, moe_blocks
from codemoe.core.tokenizer import train_tokenizer
from codemoe.rl.logprobs import token_stats
from codemoe.rl.rollout import Score, build_rollouts
from rl_toy import tiny_policy


def _rollouts(registry, policy):
    tokenizer = train_tokenizer(["def f(x):\n    return x + 1\n"] * 4, vocab_size=300)
    engine = registry.build("engine", {"name": "embedded"}, model=copy.deepcopy(policy), tokenizer=tokenizer)
    prompts = [[3, 4, 5], [6, 7]]
    outputs = engine.generate(prompts, SamplingParams(n=3, max_new_tokens=5, seed=1, ignore_eos=True))
    scores = [Score(reward=0.0) for out in outputs for _ in out.samples]
    return build_rollouts(outputs, scores, horizon=5, pad_id=0)


def test_replayed_forward_uses_the_engines_experts(registry):
    policy = tiny_policy()
    rollouts = _rollouts(registry, policy)
    assert rollouts.routes is not None and rollouts.routes[0].shape == (3 + 5 - 1, 2, 2)
    with torch.no_grad():
        for block in moe_blocks(policy):  # the trainer's routers drift away from the engine's
            block.gate.weight.add_(torch.randn_like(block.gate.weight))
        with capture_routing(policy) as record:
            token_stats(policy, rollouts.prompt_ids, rollouts.completions, pad_id=0, routes=rollouts.routes)
        width = max(len(p) for p in rollouts.prompt_ids) + 5
        for i, layer in enumerate(block.layer for block in moe_blocks(policy)):
            used = record.layer(layer).view(len(rollouts.routes), width, -1)
            for row, route in enumerate(rollouts.routes):
                assert torch.equal(used[row, : route.shape[0]].sort(-1).values, route[:, i].sort(-1).values)
        with capture_routing(policy) as free:
            token_stats(policy, rollouts.prompt_ids, rollouts.completions, pad_id=0)
        assert not torch.equal(free.layer(0), record.layer(0))  # without replay the drifted routers choose


def test_replay_is_a_no_op_when_weights_match_and_matches_the_engine(registry):
    policy = tiny_policy()
    rollouts = _rollouts(registry, policy)
    with torch.no_grad():
        free = token_stats(policy, rollouts.prompt_ids, rollouts.completions, pad_id=0).logp
        replayed = token_stats(policy, rollouts.prompt_ids, rollouts.completions, pad_id=0, routes=rollouts.routes).logp
    assert torch.allclose(free, replayed, atol=1e-5)
    assert torch.allclose(replayed, rollouts.engine_logp, atol=1e-4)
