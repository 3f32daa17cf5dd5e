"""Run the RL trainer on the toy task and append each step's metrics to ``<out>/metrics.jsonl``.

Started by the tests as a subprocess (to be SIGKILLed mid-run) and under ``torchrun`` (to compare
ranks): ``python rl_toy_run.py OUT STEPS [ALGO_JSON] [CHECKPOINT_EVERY] [PROMPT_LEN]``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from codemoe.core import build_plugin_manager, build_registry
from codemoe.rl.distributed import init_distributed
from codemoe.rl.trainer import RLConfig, RLTrainer
from rl_toy import ToyEngine, tiny_policy, toy_scorer, toy_tasks


def main() -> None:
    out, steps = Path(sys.argv[1]), int(sys.argv[2])
    algo = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    every = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    prompt_len = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    torch.set_num_threads(1)
    env = init_distributed()
    registry = build_registry(build_plugin_manager())
    config = RLConfig(steps=steps, prompts_per_step=4, lr=1e-2, max_new_tokens=4, checkpoint_every=every)
    algorithm = registry.build("algorithm", {"name": "policy_gradient", "group_size": 8, **algo}, registry=registry)
    policy = tiny_policy()
    out.mkdir(parents=True, exist_ok=True)
    metrics_file = out / f"metrics-rank{env.rank}.jsonl"

    def record(step: int, metrics: dict[str, float]) -> None:
        with metrics_file.open("a") as fh:
            fh.write(json.dumps({"step": step, **metrics}) + "\n")

    trainer = RLTrainer(
        config,
        algorithm,
        policy,
        ToyEngine(policy),
        toy_scorer,
        toy_tasks(prompt_len=prompt_len),
        pad_id=0,
        checkpoint_dir=out / "ckpt",
        env=env,
        on_step=record,
    )
    trainer.fit()
    if env.enabled:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
