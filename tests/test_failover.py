"""An RL run whose engine has two servers, one killed during the run, completes its steps.

Two ``codemoe serve`` servers (in process) of the saved policy sit behind one ``sglang`` engine; after
the first step one of them is shut down. The next rollouts go to the other one, the weight push
reaches only it (the dead one is marked stale, so it could never serve old weights), and the run
finishes every step on the survivor.
"""

from __future__ import annotations

import re

import pytest


def test_rl_run_completes_its_steps_when_one_of_two_servers_dies(registry, served_policy, tmp_path):
    from codemoe.rl.trainer import RLConfig, RLTrainer
    from codemoe.serving.embedded import EmbeddedEngineConfig, build_embedded_engine
    from codemoe.serving.handlers import ServingApp
    from codemoe.serving.server import ApiServer

    policy, tokenizer, folder, tasks = served_policy.policy, served_policy.tokenizer, served_policy.folder, served_policy.tasks
    servers = [
        ApiServer(ServingApp(build_embedded_engine(EmbeddedEngineConfig(model_dir=str(folder))), "p", str(folder)),
                  "127.0.0.1", 0).start()
        for _ in range(2)
    ]
    survivor, victim = servers
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
        algorithm, policy, engine, served_policy.score, tasks, pad_id=tokenizer.pad_token_id,
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
