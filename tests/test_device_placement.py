"""The ``device`` option of every stage that holds a model (sft, rl, eval, the engine) through real
pipelines: a bad value is refused naming its key, and a run stays on the device it resolved;
and the RL stage's engine samples the trainer's own parameters, with no copy of them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from codemoe.core import ConfigError, Hooks, build_plugin_manager, build_registry, compose, hookimpl, run_pipeline
from codemoe.core.config import validate_pipeline

REGISTRY = Path(__file__).resolve().parents[1] / "registry"

PIPELINE = """
run: {{name: dev, dir: {run_dir}, seed: 0}}
stages:
  sft:
    model: {{name: qwen3_moe, hidden_size: 32, num_layers: 2, num_heads: 2, num_kv_heads: 1, head_dim: 16,
             num_experts: 4, moe_intermediate_size: 32, router: {{name: softmax_topk, top_k: 2}},
             experts: {{name: grouped}}, max_position_embeddings: 512}}
    vocab_size: 320
    suite: {{name: synthetic, train_tasks: 8}}
    batch_size: 4
    phases: [{{phase: all, steps: 1, lr: 0.003}}]
  rl:
    checkpoint_from: sft
    suite: {{name: synthetic, train_tasks: 8}}
    algo: grpo
    steps: 1
    prompts_per_step: 2
    max_new_tokens: 8
    reward: seed2-weighted
  eval:
    checkpoint_from: rl
    suite: {{name: synthetic, train_tasks: 8}}
    max_tasks: 2
    samples: 1
    max_new_tokens: 8
"""


def _config(tmp_path: Path, overrides: list[str]):
    (tmp_path / "p.yaml").write_text(PIPELINE.format(run_dir=tmp_path / "runs"))
    return compose(tmp_path / "p.yaml", ["stages.rl.algo.group_size=2", *overrides], registry_dir=REGISTRY)


@pytest.mark.parametrize("key", ["stages.sft.device", "stages.rl.device", "stages.eval.device", "stages.rl.engine.device"])
def test_a_misspelled_device_stops_the_pipeline_naming_its_key(tmp_path, key):
    registry = build_registry(build_plugin_manager())
    cfg = _config(tmp_path, [f"{key}=cdua"])
    with pytest.raises(ConfigError, match=rf"^'{key}': 'cdua' is not a device \(did you mean 'cuda'\?\)"):
        validate_pipeline(cfg, registry)


def test_an_unknown_sharded_generation_is_refused_naming_its_key(tmp_path):
    registry = build_registry(build_plugin_manager())
    cfg = _config(tmp_path, ["stages.rl.engine.sharded_generation=layers"])
    with pytest.raises(ConfigError, match=r"^'stages.rl.engine.sharded_generation': 'layers' is not one of per_block, whole"):
        validate_pipeline(cfg, registry)


def test_cuda_on_a_machine_without_it_is_refused_before_training(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    pm = build_plugin_manager()
    cfg = _config(tmp_path, ["stages.sft.device=cuda"])
    with pytest.raises(ConfigError, match=r"^'stages.sft.device': 'cuda' needs CUDA, which this machine does not have"):
        run_pipeline(cfg, build_registry(pm), Hooks(pm), show_progress=False)


class _Batches:
    """Records where each rollout batch's tensors are."""

    def __init__(self) -> None:
        self.devices: set[str] = set()

    @hookimpl
    def codemoe_after_rollout_batch(self, ctx, stage, step, batch) -> None:
        tensors = [batch.completions, batch.mask, batch.engine_logp, batch.rewards, batch.passed, *(batch.routes or [])]
        self.devices |= {str(t.device) for t in tensors}


@pytest.mark.slow
def test_device_cpu_on_a_gpu_machine_keeps_the_run_on_the_cpu(tmp_path, monkeypatch):
    """With CUDA reported available to codemoe's code, ``device: cpu`` must be what every stage
    uses: a model or a tensor sent to the GPU (which this machine does not have) would fail the
    run. torch's own code (DCP's writer asks too) is told the truth."""
    real = torch.cuda.is_available

    def available() -> bool:
        return sys._getframe(1).f_globals.get("__name__", "").startswith("codemoe.") or real()

    monkeypatch.setattr(torch.cuda, "is_available", available)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    pm = build_plugin_manager()
    batches = _Batches()
    pm.register(batches, name="batches")
    devices = [f"stages.{s}.device=cpu" for s in ("sft", "rl", "eval")]
    ctx = run_pipeline(_config(tmp_path, devices), build_registry(pm), Hooks(pm), show_progress=False)
    assert set(ctx.results) == {"sft", "rl", "eval"}
    assert batches.devices == {"cpu"}


def test_the_engine_samples_the_trainers_parameters_without_a_copy(tmp_path):
    """An embedded engine built on the policy (as the rl stage builds it) shares its storage; after
    each update it samples the new weights, so its log-probs are the trainer's at every step."""
    from codemoe.core.models import build_model
    from codemoe.core.models.presets import load_preset
    from codemoe.rl.rollout import Score
    from codemoe.rl.trainer import RLConfig, RLTrainer

    registry = build_registry(build_plugin_manager())
    torch.manual_seed(0)
    policy = build_model({**load_preset("micro"), "max_position_embeddings": 64}, registry=registry)
    engine = registry.build("engine", "embedded", model=policy, tokenizer=None)
    tasks = [type("Task", (), {"prompt": [3 + i, 9, 4]})() for i in range(4)]

    def scorer(tasks, outputs):  # the share of even tokens: varies within every group
        return [Score(sum(t % 2 == 0 for t in s.token_ids) / len(s.token_ids)) for o in outputs for s in o.samples]

    algorithm = registry.build("algorithm", {"name": "policy_gradient", "group_size": 4, "kl_coef": 0.1}, registry=registry)
    config = RLConfig(steps=3, prompts_per_step=2, lr=3e-2, max_new_tokens=6, checkpoint_every=1000, device="cpu")
    history = []
    trainer = RLTrainer(config, algorithm, policy, engine, scorer, tasks, pad_id=0, checkpoint_dir=tmp_path,
                        on_step=lambda step, metrics: history.append(metrics))
    before = [p.detach().clone() for p in policy.parameters()]
    trainer.fit()
    assert engine.model is trainer.policy
    assert {p.data_ptr() for p in engine.model.parameters()} == {p.data_ptr() for p in trainer.policy.parameters()}
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.parameters()))  # the steps changed the weights
    assert engine.weights_version == 1 + config.steps  # told at the start and after every step
    for metrics in history:
        # engine decode (lean, fp32) against the trainer's forward (fp32) on the same weights: a few
        # ulp of a log-softmax over 64 logits; weights one update old would differ by ~lr
        assert metrics["logp_mismatch_max"] < 1e-4, metrics


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("mode", ["per_block", "whole"])
def test_under_torchrun_the_engine_runs_the_sharded_policy_and_the_reference_is_sharded_alike(tmp_path, mode):
    import json
    import os
    import subprocess

    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    script = Path(__file__).parent / "rl_sharded_run.py"
    subprocess.run([*torchrun, str(script), str(tmp_path), mode], env=env, check=True, timeout=300)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for r in ranks:
        assert r["engine_is_policy"] and r["device"] == "cpu"
        assert set(r["policy"].values()) != {"whole"}
        assert r["reference"] == r["policy"]  # every parameter on the same mesh with the same placement
        assert [m["kl"] >= 0 for m in r["metrics"]] == [True, True]
        for metrics in r["metrics"]:
            # the engine sampled the live sharded weights: its log-probs are the trainer's (a few
            # ulp of fp32 log-softmax over 64 logits; weights one update old would differ by ~lr)
            assert metrics["logp_mismatch_max"] < 1e-4, metrics
    own = {"gen_seconds", "step_seconds", "cpu_seconds", "tokens_per_s", "balance_loss"}  # each rank's clocks and MoE balance
    own |= {"generate_seconds", "score_seconds", "train_seconds", "sync_seconds"}
    same = [{k: v for k, v in m.items() if k not in own} for m in ranks[0]["metrics"]]
    assert same == [{k: v for k, v in m.items() if k not in own} for m in ranks[1]["metrics"]]  # the job's
