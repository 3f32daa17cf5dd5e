"""Asynchronous RL on the toy task under ``torchrun``: ``python async_toy_run.py OUT CASE``.

CASE ``k0``: a synchronous run, then the same run with ``max_staleness: 0``, with dynamic-sampling
refills (so the producer's refill collective runs); each writes ``OUT/<run>/metrics-rank<R>.jsonl``
and the whole final state dict, ``OUT/<run>/params-rank<R>.pt``.

CASE ``k1``: ``max_staleness: 1``; ``OUT/k1/weights-rank<R>.pt`` holds, per batch, the lm_head
weights each engine call of this rank's engine sampled with, and, per step, the trainer's whole
lm_head weights after it (step 0: before training).

CASE ``free``: ``max_staleness: 1`` with a free-running producer, ``stale_groups`` drop and then
keep, refills on, each trainer step slowed down (rank 1's more) so the producers run ahead;
``OUT/<policy>/`` gets the metrics and the weights as in ``k1``.

CASE ``abort``: ``in_flight: abort`` (``stale_groups: wait``) without and with refill rounds; rank
0's engine holds batch 3's first call until its trainer's step-2 sync aborts it, while rank 1 makes
its part of batch 3 during step 2, before that sync; ``OUT/<run>/calls-rank<R>.json`` holds each
rank's engine calls per batch, ``OUT/<run>/weights-rank<R>.pt`` the weights as in ``k1``.

CASE ``refused``: builds the trainer with each setting that is refused under torchrun (a
free-running or aborting producer with one engine behind every rank, an engine on a sharded copy
of the policy) and writes the errors' messages to ``OUT/refused-rank<R>.json``.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import torch
from codemoe.core import build_plugin_manager, build_registry
from codemoe.core.errors import ConfigError
from codemoe.rl.distributed import Dist, init_distributed, shard_model
from codemoe.rl.trainer import RLConfig, RLTrainer
from rl_toy import ToyEngine, tiny_policy, toy_scorer, toy_tasks
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

ALGO = {"kl_coef": 0.05, "epochs": 2, "minibatches": 2, "dynamic_sampling": {"drop": True, "refill_rounds": 1}}
# settings a free-running or aborting producer cannot agree on across ranks with one server behind them all
REFUSED = {"drop": {"stale_groups": "drop"}, "keep": {"stale_groups": "keep"}, "abort": {"in_flight": "abort"}}
NO_REFILLS = {**ALGO, "dynamic_sampling": {"drop": False, "refill_rounds": 0}}


class RecordingEngine(ToyEngine):
    """Records the lm_head weights of every call, by batch (``RLTrainer._seed``: seed 0, round r)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__(model)
        self.sampled_with: dict[int, list[torch.Tensor]] = {}

    def generate(self, prompts, params):
        self.sampled_with.setdefault(params.seed // 101, []).append(self.model.lm_head.weight.detach().clone())
        return super().generate(prompts, params)


def _trainer(registry, env: Dist, out: Path, engine_type: type = ToyEngine, algo=None, **options) -> RLTrainer:
    config = RLConfig(
        **{"steps": 3, "prompts_per_step": 4, "lr": 1e-2, "max_new_tokens": 4, "checkpoint_every": 1000, **options}
    )
    spec = {"name": "policy_gradient", "group_size": 8, **(algo or ALGO)}
    algorithm = registry.build("algorithm", spec, registry=registry)
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


def _record_weights(trainer: RLTrainer, out: Path, rank: int, pause: float = 0.0) -> dict[int, torch.Tensor]:
    """Record the metrics and, per step, the trainer's whole lm_head weights (step 0: before training);
    each step's rollouts hook sleeps ``pause`` s, so a free-running producer runs ahead."""
    _recorded(trainer, out, rank)
    trained = {0: trainer.policy.lm_head.weight.full_tensor().detach().clone()}
    record = trainer.on_step

    def on_step(step: int, metrics: dict[str, float]) -> None:
        record(step, metrics)
        trained[step] = trainer.policy.lm_head.weight.full_tensor().detach().clone()  # every rank gathers

    trainer.on_step = on_step
    trainer.on_rollouts = lambda step, rollouts: threading.Event().wait(pause)
    return trained


def run_k1(registry, env: Dist, out: Path) -> None:
    trainer = _trainer(registry, env, out / "k1", RecordingEngine, max_staleness=1, steps=4)
    trained = _record_weights(trainer, out / "k1", env.rank)
    trainer.fit()
    weights = {"sampled": trainer.engine.sampled_with, "trained": trained}
    torch.save(weights, out / "k1" / f"weights-rank{env.rank}.pt")


def run_free(registry, env: Dist, out: Path) -> None:
    for policy in ("drop", "keep"):
        trainer = _trainer(registry, env, out / policy, RecordingEngine, max_staleness=1, stale_groups=policy, steps=5)
        trained = _record_weights(trainer, out / policy, env.rank, pause=0.3 + 0.2 * env.rank)
        trainer.fit()
        weights = {"sampled": trainer.engine.sampled_with, "trained": trained}
        torch.save(weights, out / policy / f"weights-rank{env.rank}.pt")


class HeldEngine(RecordingEngine):
    """On rank 0, batch 3's first call stays in flight until the trainer's sync of step 2 aborts it
    (``abort()``); rank 1's engine just records."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__(model)
        self.trainer: RLTrainer | None = None
        self.calls_per_batch: dict[int, int] = {}
        self._released = threading.Event()

    def abort(self) -> None:
        self._released.set()

    def generate(self, prompts, params):
        batch = params.seed // 101
        self.calls_per_batch[batch] = self.calls_per_batch.get(batch, 0) + 1
        if batch == 3 and self.calls_per_batch[batch] == 1 and self.trainer.env.rank == 0:
            producer = self.trainer._producer
            with producer._cond:  # the trainer took batch 2 and trains on it; its sync comes next
                producer._cond.wait_for(lambda: producer.taken >= 2, timeout=30)
            self._released.clear()
            self._released.wait(timeout=30)
        return super().generate(prompts, params)


def run_abort(registry, env: Dist, out: Path) -> None:
    for name, algo in (("abort", NO_REFILLS), ("abort_refills", ALGO)):
        trainer = _trainer(registry, env, out / name, HeldEngine, algo, max_staleness=1, in_flight="abort", steps=4)
        trainer.engine.trainer = trainer
        trained = _record_weights(trainer, out / name, env.rank, pause=0.3)
        trainer.fit()
        (out / name / f"calls-rank{env.rank}.json").write_text(json.dumps(trainer.engine.calls_per_batch))
        weights = {"sampled": trainer.engine.sampled_with, "trained": trained}
        torch.save(weights, out / name / f"weights-rank{env.rank}.pt")


class ShardedEngine(ToyEngine):
    """An engine on an FSDP2-sharded copy of the policy: each of its forwards would be a collective."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__(model)
        shard_model(self.model, init_distributed())


class ServerEngine(ToyEngine):
    """Stands for one server behind every rank's client (``serves_every_rank``, as remote engines)."""

    serves_every_rank = True


def run_refused(registry, env: Dist, out: Path) -> None:
    messages = {}
    cases = [(name, ServerEngine, options) for name, options in REFUSED.items()]
    cases.append(("sharded_engine", ShardedEngine, {}))
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
    cases = {"k0": run_k0, "k1": run_k1, "free": run_free, "abort": run_abort, "refused": run_refused}
    cases[case](registry, env, out)
    env.close()


if __name__ == "__main__":
    main()
