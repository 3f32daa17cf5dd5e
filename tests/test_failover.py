"""An RL run whose engine has two servers, one killed during the run, completes its steps.

Two ``codemoe serve`` servers (in process) of the saved policy sit behind one ``sglang`` engine; after
the first step one of them is shut down. The next rollouts go to the other one, the weight push
reaches only it (the dead one is marked stale, so it could never serve old weights), and the run
finishes every step on the survivor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
import torch
from codemoe.rl.rollout import Score

CORPUS = ["def add(a, b):\n    return a + b\n", "for i in range(10):\n    print(i * i)\n"] * 8
SPEC = {
    "name": "qwen3_moe", "hidden_size": 64, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2, "head_dim": 16,
    "num_experts": 8, "moe_intermediate_size": 64, "router": {"name": "softmax_topk", "top_k": 2},
    "experts": {"name": "grouped"}, "max_position_embeddings": 256,
}


@dataclass
class Task:
    id: str
    prompt: list[int]
    target: int


def _score(tasks, outputs) -> list[Score]:
    """The share of completion tokens equal to the task's target."""
    out = []
    for task, output in zip(tasks, outputs, strict=True):
        for sample in output.samples:
            hits = sum(t == task.target for t in sample.token_ids) / max(len(sample.token_ids), 1)
            out.append(Score(reward=hits, passed=hits == 1.0))
    return out


def test_rl_run_completes_its_steps_when_one_of_two_servers_dies(registry, tmp_path):
    from codemoe.core.models import build_model, save_pretrained
    from codemoe.core.tokenizer import train_tokenizer
    from codemoe.rl.trainer import RLConfig, RLTrainer
    from codemoe.serving.embedded import EmbeddedEngineConfig, build_embedded_engine
    from codemoe.serving.handlers import ServingApp
    from codemoe.serving.server import ApiServer

    torch.set_num_threads(1)
    tokenizer = train_tokenizer(CORPUS, vocab_size=320)
    torch.manual_seed(0)
    policy = build_model(SPEC, vocab_size=len(tokenizer))
    folder = save_pretrained(policy, tokenizer, tmp_path / "policy")
    servers = [
        ApiServer(ServingApp(build_embedded_engine(EmbeddedEngineConfig(model_dir=str(folder))), "p", str(folder)),
                  "127.0.0.1", 0).start()
        for _ in range(2)
    ]
    survivor, victim = servers
    tasks = [Task(f"t{i}", list(tokenizer.encode(text)), target=40 + i)
             for i, text in enumerate(["def f(x):", "for i in", "print(", "return a"])]
    engine = registry.build(
        "engine",
        {"name": "sglang", "base_url": [s.url for s in servers], "sync_dir": str(tmp_path / "sync")},
        model=policy,
        tokenizer=tokenizer,
    )
    algorithm = registry.build("algorithm", {"name": "policy_gradient", "group_size": 4}, registry=registry)
    steps = []

    def on_step(step: int, metrics: dict) -> None:
        steps.append(metrics)
        if step == 1:  # killed after the first step's weight push: it holds those weights, then is gone
            victim.httpd.shutdown()
            victim.httpd.server_close()

    trainer = RLTrainer(
        RLConfig(steps=3, prompts_per_step=4, lr=1e-2, max_new_tokens=6, checkpoint_every=10),
        algorithm, policy, engine, _score, tasks, pad_id=tokenizer.pad_token_id,
        checkpoint_dir=tmp_path / "ckpt", on_step=on_step,
    )
    try:
        with pytest.warns(RuntimeWarning) as caught:
            trainer.fit()
        health = engine.health()
    finally:
        survivor.httpd.shutdown()
        survivor.httpd.server_close()
    assert len(steps) == 3 and all(m["tokens"] > 0 for m in steps)
    messages = [str(w.message) for w in caught]
    assert any(re.search(rf"{re.escape(victim.url)}.*failed.*go to {re.escape(survivor.url)}", m) for m in messages)
    assert any(f"did not reach {victim.url}" in m for m in messages)  # step 2's push: the victim is stale
    assert engine.weight_version is not None  # every sample was checked against the weights pushed last
    assert [s["status"] for s in health["servers"]] == ["ok", "unreachable"] and "stale" in health["servers"][1]
