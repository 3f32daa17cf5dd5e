"""One rank of the sharded RL test (started by ``torchrun`` from test_device_placement.py).

``python rl_sharded_run.py OUT MODE``: the RL trainer with the embedded engine built on its policy
(as the rl stage builds it, ``sharded_generation: MODE``), GRPO with a KL to the reference, dynamic sampling that refills on some
ranks only, two steps. Writes ``OUT/rank<R>.json``: the metrics and how the models are held.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from codemoe.core import build_plugin_manager, build_registry
from codemoe.core.models import build_model
from codemoe.core.models.presets import load_preset
from codemoe.rl.distributed import init_distributed
from codemoe.rl.rollout import Score
from codemoe.rl.trainer import RLConfig, RLTrainer
from torch.distributed.tensor import DTensor


class Task:
    def __init__(self, prompt: list[int]) -> None:
        self.prompt = prompt


def scorer(tasks, outputs) -> list[Score]:
    """Reward 1 for an even first token: groups often agree, so dynamic sampling refills."""
    return [Score(float(s.token_ids[0] % 2 == 0)) for o in outputs for s in o.samples]


def placements(module: torch.nn.Module) -> dict[str, str]:
    return {name: repr((p.device_mesh.mesh.tolist(), p.placements)) if isinstance(p, DTensor) else "whole"
            for name, p in module.named_parameters()}


def main() -> None:
    out, mode = Path(sys.argv[1]), sys.argv[2]
    torch.set_num_threads(1)
    env = init_distributed()
    registry = build_registry(build_plugin_manager())
    torch.manual_seed(0)
    policy = build_model({**load_preset("micro"), "max_position_embeddings": 64}, registry=registry)
    engine = registry.build("engine", {"name": "embedded", "sharded_generation": mode}, model=policy, tokenizer=None)
    algo = {"name": "policy_gradient", "group_size": 2, "kl_coef": 0.1, "dynamic_sampling": {"refill_rounds": 2}}
    algorithm = registry.build("algorithm", algo, registry=registry)
    config = RLConfig(steps=2, prompts_per_step=4, lr=1e-2, max_new_tokens=5, checkpoint_every=1000, device="auto")
    history = []
    tasks = [Task([3 + i, 7, 5 + i % 3]) for i in range(8)]
    trainer = RLTrainer(config, algorithm, policy, engine, scorer, tasks, pad_id=0, checkpoint_dir=out / "ckpt",
                        env=env, on_step=lambda step, metrics: history.append(metrics))
    trainer.fit()
    (out / f"rank{env.rank}.json").write_text(json.dumps({
        "metrics": history,
        "engine_is_policy": engine.model is trainer.policy,
        "policy": placements(trainer.policy.model.layers),
        "reference": placements(trainer.reference.model.layers),
        "device": str(trainer.device),
    }))
    env.close()


if __name__ == "__main__":
    main()
