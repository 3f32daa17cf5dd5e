"""The trainer against the real engine and sandbox: routing replay (the policy's forwards use exactly
the experts the embedded engine chose), the prefix cache across agent turns, and repository episodes
whose tool calls run in the sandbox."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch
from codemoe.core.chat import ChatFormat
from codemoe.core.contracts import SamplingParams
from codemoe.core.moe import capture_routing, moe_blocks
from codemoe.core.tokenizer import train_tokenizer
from codemoe.rl.episodes import run_episodes
from codemoe.rl.logprobs import token_stats
from codemoe.rl.rollout import Score, build_rollouts

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "rl-algos" / "tests"))  # rl's toy helpers

from rl_toy import ToyEpisodeEnvironment, tiny_policy
from test_episodes import ScriptedEngine
from test_shared_prompts import _grads


class ByteEngine(ScriptedEngine):
    """A scripted engine whose token ids are UTF-8 bytes (so text observations can be appended)."""

    def __init__(self, actions: list[str]) -> None:
        super().__init__([self.encode(a) for a in actions], texts=actions)

    @staticmethod
    def encode(text: str) -> list[int]:
        return list(text.encode("utf-8"))


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


def _agreement_by_hand(model, rollouts) -> float:
    """The known answer: each row's own forward, its captured experts against the engine's, per
    (position, MoE layer) the engine ran, as sets."""
    agree = total = 0
    for row, (prompt, route) in enumerate(zip(rollouts.prompt_ids, rollouts.routes)):
        generated = route.shape[0] - len(prompt) + 1
        tokens = list(prompt) + rollouts.completions[row, :generated].tolist()
        with torch.no_grad(), capture_routing(model) as record:
            model(torch.tensor([tokens]))
        for i, layer in enumerate(block.layer for block in moe_blocks(model)):
            own = record.forwards[0][layer][: route.shape[0]]
            agree += int((own.sort(-1).values == route[:, i].sort(-1).values).all(-1).sum())
            total += route.shape[0]
    return agree / total


def test_routing_agreement_is_the_share_of_the_engines_choices_the_routers_make(registry):
    policy = tiny_policy()
    rollouts = _rollouts(registry, policy)
    pairs = sum(route.shape[0] * route.shape[1] for route in rollouts.routes)
    # float64 hidden states: the per-row and the batched forwards then give the routers the same
    # fp32 logits, so no near-tie is broken differently between the answer and the measurement
    same, drifted = copy.deepcopy(policy).double(), copy.deepcopy(policy).double()
    with torch.no_grad():
        torch.manual_seed(3)
        for block in moe_blocks(drifted):
            block.gate.weight.add_(0.5 * block.gate.weight.std() * torch.randn_like(block.gate.weight))
    want = _agreement_by_hand(drifted, rollouts)
    assert 0 < want < 1
    for replay in (True, False):
        for share in (True, False):
            kwargs = dict(pad_id=0, routes=rollouts.routes, replay=replay, agreement=True, share_prompts=share)
            with torch.no_grad():
                agreed, compared = token_stats(same, rollouts.prompt_ids, rollouts.completions, **kwargs).agreement
                assert int(agreed) == int(compared) == pairs, (replay, share)  # the engine's own weights
                agreed, compared = token_stats(drifted, rollouts.prompt_ids, rollouts.completions, **kwargs).agreement
            assert int(compared) == pairs and int(agreed) / int(compared) == pytest.approx(want, abs=1e-12), (
                replay, share)


def test_shared_prompt_forward_replays_the_engines_experts(registry):
    policy = tiny_policy()
    rollouts = _rollouts(registry, policy)
    drifted = copy.deepcopy(policy)
    with torch.no_grad():
        for block in moe_blocks(drifted):  # the trainer's routers drift away from the engine's
            block.gate.weight.add_(torch.randn_like(block.gate.weight))
    args = (drifted, rollouts.prompt_ids, rollouts.completions)
    shared, g_shared = _grads(*args, share=True, routes=rollouts.routes)
    plain, g_plain = _grads(*args, share=False, routes=rollouts.routes)
    free, _ = _grads(*args, share=True)
    torch.testing.assert_close(shared.logp, plain.logp, atol=1e-5, rtol=0)
    assert not torch.allclose(free.logp, plain.logp, atol=1e-3)  # replay mattered
    for name in g_plain:
        torch.testing.assert_close(g_shared[name], g_plain[name], atol=2e-5, rtol=1e-4, msg=name)


@pytest.mark.slow
def test_repository_episodes_run_tool_calls_in_the_sandbox_and_score_the_outcome(registry):
    """Real components: an agentic-core task, the repo environment over the local sandbox, a reward
    recipe. The scripted policy runs the visible tests, then submits without fixing anything."""
    from codemoe.rl.repo_episodes import RepoEpisodes
    from codemoe.sandbox.agent import ToolCall, render_tool_call

    task = registry.build("suite", {"name": "agentic-core", "heldout_percent": 0}).tasks("train")[0]
    executor = registry.build("executor", {"name": "local"})
    recipe = registry.build("reward", {"name": "weighted_sum", "components": {"task_complete": {"weight": 1.0}}})
    actions = [render_tool_call(ToolCall("run_tests", {})), render_tool_call(ToolCall("submit", {"summary": "x"}))]
    engine = ByteEngine(actions)
    try:
        rollouts = run_episodes(
            engine,
            lambda: RepoEpisodes(
                registry.build("environment", {"name": "repo", "step_budget": 2}, executor=executor), recipe,
                ChatFormat(train_tokenizer(["<tool_call>"], 260)),  # chat turns, written in the engine's bytes
            ),
            [task],
            SamplingParams(n=2, max_new_tokens=256),
            max_turns=2,
            max_observation_tokens=2000,
            pad_id=0,
        )
    finally:
        executor.close()
    first, second = (len(ByteEngine.encode(a)) for a in actions)
    row = rollouts.mask[0]
    assert row[:first].eq(1).all() and row[first] == 0  # the test run's output follows the first action
    observation = bytes(rollouts.completions[0, first : int(row.nonzero()[first])].tolist()).decode()
    assert "failed" in observation or "error" in observation  # the task's visible tests fail before a fix
    assert int(row.sum()) == first + second
    assert rollouts.passed.tolist() == [False, False] and rollouts.rewards.tolist() == [0.0, 0.0]
    assert "You are a coding agent" in bytes(rollouts.prompt_ids[0]).decode()


def test_later_turns_continue_from_the_engines_kept_histories(registry):
    """With the embedded engine's prefix cache, a turn prefills only the last action's final token
    and the observation: the history before it is reused, and the log-probs stay the trainer's."""
    from codemoe.rl.logprobs import token_stats
    from rl_toy import tiny_policy, toy_tasks

    policy = tiny_policy()
    engine = registry.build("engine", {"name": "embedded", "prefix_cache_tokens": 4096}, model=policy, tokenizer=None)
    params = SamplingParams(n=2, max_new_tokens=3, seed=4, ignore_eos=True)
    rollouts = run_episodes(
        engine,
        lambda: ToyEpisodeEnvironment(turns=3),
        toy_tasks(2),
        params,
        max_turns=3,
        max_observation_tokens=1,
        pad_id=0,
    )
    assert engine.health()["prefix_cache_reused_tokens"] > 0
    with torch.no_grad():
        logp = token_stats(policy, rollouts.prompt_ids, rollouts.completions, pad_id=0).logp
    actions = rollouts.mask > 0
    torch.testing.assert_close(logp[actions], rollouts.engine_logp[actions], atol=1e-4, rtol=0)
