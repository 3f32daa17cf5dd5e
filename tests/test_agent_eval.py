"""Agent evaluation: episodes in the sandbox's repository environment, graded on hidden tests."""

from __future__ import annotations

import json
import re

import pytest
from codemoe.core import compose, run_pipeline
from codemoe.core.chat import ChatFormat
from codemoe.core.models.presets import load_preset
from codemoe.core.tokenizer import train_tokenizer
from codemoe.evals.agent_eval import run_agent_episodes


def _repo_tasks(registry, count: int):
    return registry.build("suite", {"name": "agentic-core"}).tasks("heldout")[:count]


def _run(registry, tasks, generate, samples: int, max_turns: int):
    executor = registry.build("executor", {"name": "local"})
    try:
        make = lambda: registry.build(  # noqa: E731
            "environment", {"name": "repo", "step_budget": max_turns}, executor=executor
        )
        chat = ChatFormat(train_tokenizer(["<tool_call>"], 260))  # the rendering; these policies answer in text
        return run_agent_episodes(generate, make, tasks, samples=samples, max_turns=max_turns, chat=chat)
    finally:
        executor.close()


@pytest.mark.slow
def test_the_reference_solution_played_as_tool_calls_passes_and_doing_nothing_fails(spine):
    _, registry, _ = spine
    from codemoe.core.contracts import repository_task

    tasks = _repo_tasks(registry, 2)
    oracle = {t.id: registry.build("scripted_agent", "oracle", task=repository_task(t)).actions for t in tasks}

    def play(prompts: list[str], n: int, turn: int) -> list[list[str]]:
        # each episode's history starts with its task's statement: "Task <id>"
        ids = [re.search(r"^Task (\S+)$", p, re.M).group(1) for p in prompts]
        return [[oracle[i][min(turn, len(oracle[i]) - 1)]] * n for i in ids]

    graded = _run(registry, tasks, play, samples=2, max_turns=8)
    assert [(g.task_id, g.index) for g in graded] == [(t.id, j) for t in tasks for j in range(2)]
    assert all(g.passed for g in graded), [(g.task_id, g.reason) for g in graded]
    assert "[observation]" in graded[0].completion and graded[0].family == tasks[0].family

    submit = '<tool_call>\n{"tool": "submit", "args": {"summary": "done"}}\n</tool_call>'
    idle = _run(registry, tasks[:1], lambda prompts, n, turn: [[submit] * n for _ in prompts], samples=2, max_turns=3)
    assert [g.passed for g in idle] == [False, False] and "not resolved (submitted)" in idle[0].reason


@pytest.mark.slow
def test_eval_stage_runs_agent_episodes(spine, write_pipeline, tmp_path, registry_dir):
    import torch
    from codemoe.core.models import build_model, save_pretrained
    from codemoe.core.tokenizer import train_tokenizer

    torch.manual_seed(0)
    tokenizer = train_tokenizer(["def f(x):\n    return x\n", '{"tool": "read_file", "args": {}}'] * 8, 300)
    spec = {**load_preset("micro"), "num_layers": 1, "moe_intermediate_size": 32, "max_position_embeddings": 16384}
    checkpoint = save_pretrained(build_model(spec, vocab_size=len(tokenizer)), tokenizer, tmp_path / "ckpt")
    text = f"""
run: {{name: agent-eval, dir: {tmp_path / "runs"}}}
stages:
  agent:
    name: eval
    checkpoint: {checkpoint}
    suite: agentic-core
    max_tasks: 2
    environment: repo
    max_turns: 2
    samples: 2
    max_new_tokens: 16
    stop: []
"""
    _, registry, hooks = spine
    ctx = run_pipeline(compose(write_pipeline(text), registry_dir=registry_dir), registry, hooks, show_progress=False)
    result = ctx.results["agent"]
    assert result["tasks"] == 2 and result["samples_per_task"] == 2
    assert result["pass@1"] == 0.0  # an untrained policy resolves nothing
    samples = [json.loads(line) for line in (ctx.run_dir / "agent" / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 4 and all("[action]" in s["completion"] for s in samples)
