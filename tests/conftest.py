"""Fixtures of the cross-package flows: the registry with every installed plugin, a tiny checkpoint.

Kept free of torch at import time, like the root conftest.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from codemoe.core import Hooks, build_plugin_manager, build_registry
from codemoe.core.models.presets import load_preset


@pytest.fixture(scope="session")
def registry():
    """The registry with every installed plugin, as ``codemoe run`` builds it."""
    return build_registry(build_plugin_manager())


@pytest.fixture
def spine() -> tuple[Any, Any, Hooks]:
    """(plugin manager, registry, hooks) with every installed plugin."""
    pm = build_plugin_manager()
    return pm, build_registry(pm), Hooks(pm)


# vocab_size comes from the tokenizer at build time
TINY_MODEL = {**load_preset("micro"), "num_layers": 1, "moe_intermediate_size": 32, "max_position_embeddings": 512}


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untrained tiny MoE checkpoint with a tokenizer trained on the synthetic suite."""
    import torch
    from codemoe.core.models import build_model, save_pretrained
    from codemoe.core.tokenizer import train_tokenizer
    from codemoe.evals.synthetic import SyntheticSuite

    torch.set_num_threads(1)
    torch.manual_seed(0)
    tasks = SyntheticSuite().tasks("train")
    tokenizer = train_tokenizer([t.prompt + t.reference_solution for t in tasks], vocab_size=384)
    model = build_model(TINY_MODEL, vocab_size=len(tokenizer))
    return save_pretrained(model, tokenizer, tmp_path_factory.mktemp("tiny") / "checkpoint")


@dataclass
class TargetTask:
    """A prompt (token ids) whose reward is the share of completion tokens equal to ``target``."""

    id: str
    prompt: list[int]
    target: int


def target_score(tasks: list[TargetTask], outputs: list[Any]) -> list[Any]:
    """The share of each sample's tokens equal to its task's target (passed when all are)."""
    from codemoe.rl.rollout import Score

    out = []
    for task, output in zip(tasks, outputs, strict=True):
        for sample in output.samples:
            hits = sum(t == task.target for t in sample.token_ids) / max(len(sample.token_ids), 1)
            out.append(Score(reward=hits, passed=hits == 1.0))
    return out


@pytest.fixture
def served_policy(tmp_path: Path) -> Any:
    """A tiny codemoe MoE policy saved for servers to load, with its tokenizer and four target tasks:
    ``.policy``, ``.tokenizer``, ``.folder``, ``.tasks``, ``.score`` (for RL against remote engines)."""
    from types import SimpleNamespace

    import torch
    from codemoe.core.models import build_model, save_pretrained
    from codemoe.core.tokenizer import train_tokenizer

    corpus = ["def add(a, b):\n    return a + b\n", "for i in range(10):\n    print(i * i)\n"] * 8
    spec = {
        "name": "qwen3_moe", "hidden_size": 64, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2, "head_dim": 16,
        "num_experts": 8, "moe_intermediate_size": 64, "router": {"name": "softmax_topk", "top_k": 2},
        "experts": {"name": "grouped"}, "max_position_embeddings": 512,
    }
    torch.set_num_threads(1)
    tokenizer = train_tokenizer(corpus, vocab_size=320)
    torch.manual_seed(0)
    policy = build_model(spec, vocab_size=len(tokenizer))
    tasks = [TargetTask(f"t{i}", list(tokenizer.encode(text)), target=40 + i)
             for i, text in enumerate(["def f(x):", "for i in", "print(", "return a"])]
    return SimpleNamespace(policy=policy, tokenizer=tokenizer, folder=save_pretrained(policy, tokenizer, tmp_path / "policy"),
                           tasks=tasks, score=target_score)


@pytest.fixture(scope="session")
def agentic_repos_short() -> list[str]:
    """Overrides that shorten the ``agentic-repos`` pipeline to seconds of work: 4 train tasks and 2
    held out, 2 SFT steps, 1 RL step, episodes of 2 actions of 16 tokens, 2 held-out tasks x 1 sample
    per evaluation; the group size is left to the caller (the samples ablation varies it)."""
    evals = [f"stages.{s}.{k}" for s in ("eval_sft", "eval_rl") for k in ("max_tasks=2", "samples=1", "max_turns=2", "max_new_tokens=16")]
    return [
        "suite_spec.train_tasks=4",  # every stage's suite (the pipeline sets it once)
        "suite_spec.heldout_tasks=2",
        "stages.trajectories.agent.imitate_fraction=1.0",
        "stages.sft.phases=[{phase: all, steps: 2, lr: 0.003}]",
        "stages.sft.batch_size=4",
        "stages.rl.steps=1",
        "stages.rl.max_turns=2",
        "stages.rl.max_new_tokens=16",
        *evals,
        "stages.report.print_report=false",
    ]
