"""Asynchronous RL on the toy task under ``torchrun``: ``python async_toy_run.py OUT CASE``.

CASE ``k0``: a synchronous run, then the same run with ``max_staleness: 0``, with dynamic-sampling
refills (so the producer's refill collective runs); each writes ``OUT/<run>/metrics-rank<R>.jsonl``
and the whole final state dict, ``OUT/<run>/params-rank<R>.pt``.

CASE ``k1``: ``max_staleness: 1``; ``OUT/k1/weights-rank<R>.pt`` holds, per batch, the lm_head
weights each engine call of this rank's engine sampled with, and, per step, the trainer's whole
lm_head weights after it (step 0: before training).

CASE ``refused``: builds the trainer with each setting that is refused under torchrun (and with an
engine on a sharded copy of the policy) and writes the errors' messages to
``OUT/refused-rank<R>.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from codemoe.core import build_plugin_manager, build_registry
from codemoe.core.errors import ConfigError
from codemoe.rl.distributed import Dist, init_distributed, shard_model
from codemoe.rl.trainer import RLConfig, RLTrainer
from rl_toy import ToyEngine, tiny_policy, toy_scorer, toy_tasks
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

ALGO = {"kl_coef": 0.05, "epochs": 2, "minibatches": 2, "dynamic_sampling": {"drop": True, "refill_rounds": 1}}
# settings a free-running or aborting producer needs, one trainer each
REFUSED = {"drop": {"stale_groups": "drop"}, "keep": {"stale_groups": "keep"}, "abort": {"in_flight": "abort"}}


class RecordingEngine(ToyEngine):
    """Records the lm_head weights of every call, by batch (``RLTrainer._seed``: seed 0, round r)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__(model)
        self.sampled_with: dict[int, list[torch.Tensor]] = {}

    def generate(self, prompts, params):
        self.sampled_with.setdefault(params.seed // 101, []).append(self.model.lm_head.weight.detach().clone())
        return super().generate(prompts, params)


def _trainer(registry, env: Dist, out: Path, engine_type: type = ToyEngine, **options) -> RLTrainer:
    config = RLConfig(
        **{"steps": 3, "prompts_per_step": 4, "lr": 1e-2, "max_new_tokens": 4, "checkpoint_every": 1000, **options}
    )
    algorithm = registry.build("algorithm", {"name": "policy_gradient", "group_size": 8, **ALGO}, registry=registry)
    policy = tiny_policy()
    return RLTrainer(
        config,
        algorithm,
        policy,
        engine_type(policy),  # each rank's engine on a whole copy, taken before the trainer shards the policy
        toy_scorer,
        toy_tasks(),
        pad_id=0,
        checkpoint_dir=out / "ckpt",
        env=env,
    )


def _recorded(trainer: RLTrainer, out: Path, rank: int) -> None:
    out.mkdir(parents=True, exist_ok=True)

    def record(step: int, metrics: dict[str, float]) -> None:
        with (out / f"metrics-rank{rank}.jsonl").open("a") as fh:
            fh.write(json.dumps({"step": step, **metrics}) + "\n")

    trainer.on_step = record


def run_k0(registry, env: Dist, out: Path) -> None:
    for name, k in (("sync", None), ("k0", 0)):
        trainer = _trainer(registry, env, out / name, max_staleness=k)
        _recorded(trainer, out / name, env.rank)
        trainer.fit()
        state = get_model_state_dict(trainer.policy, options=StateDictOptions(full_state_dict=True))
        torch.save(state, out / name / f"params-rank{env.rank}.pt")


def run_k1(registry, env: Dist, out: Path) -> None:
    trainer = _trainer(registry, env, out / "k1", RecordingEngine, max_staleness=1, steps=4)
    _recorded(trainer, out / "k1", env.rank)
    trained = {0: trainer.policy.lm_head.weight.full_tensor().detach().clone()}
    record = trainer.on_step

    def on_step(step: int, metrics: dict[str, float]) -> None:
        record(step, metrics)
        trained[step] = trainer.policy.lm_head.weight.full_tensor().detach().clone()  # every rank gathers

    trainer.on_step = on_step
    trainer.fit()
    weights = {"sampled": trainer.engine.sampled_with, "trained": trained}
    torch.save(weights, out / "k1" / f"weights-rank{env.rank}.pt")


class ShardedEngine(ToyEngine):
    """An engine on an FSDP2-sharded copy of the policy: each of its forwards would be a collective."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__(model)
        shard_model(self.model, init_distributed())


def run_refused(registry, env: Dist, out: Path) -> None:
    messages = {}
    cases = [(name, ToyEngine, options) for name, options in REFUSED.items()] + [("sharded_engine", ShardedEngine, {})]
    for name, engine_type, options in cases:
        try:
            _trainer(registry, env, out / name, engine_type, max_staleness=1, **options)
        except ConfigError as exc:
            messages[name] = str(exc)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"refused-rank{env.rank}.json").write_text(json.dumps(messages))


def main() -> None:
    out, case = Path(sys.argv[1]), sys.argv[2]
    torch.set_num_threads(1)
    env = init_distributed()
    registry = build_registry(build_plugin_manager())
    {"k0": run_k0, "k1": run_k1, "refused": run_refused}[case](registry, env, out)
    env.close()


if __name__ == "__main__":
    main()
