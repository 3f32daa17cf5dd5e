"""Run the RL trainer on the toy task and append each step's metrics to ``<out>/metrics.jsonl``.

Started by the tests as a subprocess (to be SIGKILLed mid-run) and under ``torchrun`` (to compare
ranks): ``python rl_toy_run.py OUT STEPS [ALGO_JSON] [CHECKPOINT_EVERY] [PROMPT_LEN] [DTYPE]``.

With ``TOY_SHARED_ENGINE=PREFIX`` in the environment the engine stands for one server behind
every rank (:class:`rl_toy.SharedToyEngine`, logging to ``PREFIX-rank<R>.txt``). With
``CODEMOE_TEST_MICRO_BATCH=N`` the updates run in forwards of N rows (``micro_batch_size``).

``DTYPE`` (``float32`` by default) is the policy's parameter dtype: the rank comparison runs in
``float64`` so that the ranks' other summation order stays a rounding difference, not a drift.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
from codemoe.core import build_plugin_manager, build_registry
from codemoe.rl import trainer as trainer_module
from codemoe.rl.critic import Critic
from codemoe.rl.distributed import init_distributed
from codemoe.rl.logprobs import token_stats
from codemoe.rl.trainer import RLConfig, RLTrainer
from rl_toy import SharedToyEngine, ToyEngine, tiny_policy, toy_scorer, toy_tasks


class _SameDtypeCritic(Critic):
    """The critic with its value head in the body's dtype instead of float32: FSDP2 shards the
    head with the body's embeddings and needs one dtype there (a float64 body beside a float32
    head is refused). The head starts at zero, so the cast changes no value."""

    def __init__(self, policy: torch.nn.Module, hidden_size: int) -> None:
        super().__init__(policy, hidden_size)
        self.head.to(next(policy.parameters()).dtype)

    def forward(self, prompt_ids, completions, pad_id):
        stats = token_stats(self.body, prompt_ids, completions, pad_id=pad_id, hidden=True)
        return self.head(stats.hidden.to(self.head.weight.dtype)).sum(-1)


def main() -> None:
    out, steps = Path(sys.argv[1]), int(sys.argv[2])
    algo = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    every = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    prompt_len = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    dtype = getattr(torch, sys.argv[6]) if len(sys.argv) > 6 else torch.float32
    if dtype != torch.float32:
        trainer_module.Critic = _SameDtypeCritic
    torch.set_num_threads(1)
    env = init_distributed()
    registry = build_registry(build_plugin_manager())
    micro = int(os.environ.get("CODEMOE_TEST_MICRO_BATCH", "0"))  # rows per training forward (0: one)
    config = RLConfig(steps=steps, prompts_per_step=4, lr=1e-2, max_new_tokens=4, checkpoint_every=every,
                      micro_batch_size=micro)
    algorithm = registry.build("algorithm", {"name": "policy_gradient", "group_size": 8, **algo}, registry=registry)
    policy = tiny_policy().to(dtype)
    out.mkdir(parents=True, exist_ok=True)
    metrics_file = out / f"metrics-rank{env.rank}.jsonl"

    def record(step: int, metrics: dict[str, float]) -> None:
        with metrics_file.open("a") as fh:
            fh.write(json.dumps({"step": step, **metrics}) + "\n")

    trainer = RLTrainer(
        config,
        algorithm,
        policy,
        SharedToyEngine(policy, os.environ["TOY_SHARED_ENGINE"], env.rank) if "TOY_SHARED_ENGINE" in os.environ
        else ToyEngine(policy),
        toy_scorer,
        toy_tasks(prompt_len=prompt_len),
        pad_id=0,
        checkpoint_dir=out / "ckpt",
        env=env,
        on_step=record,
    )
    trainer.fit()
    env.close()


if __name__ == "__main__":
    main()
