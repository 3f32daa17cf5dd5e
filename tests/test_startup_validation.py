"""A misspelled component name at any depth of a pipeline stops ``codemoe config show`` and
``codemoe run`` before any stage runs, naming its full key path; a reward part from an installed
plugin works inside a recipe in ``codemoe run``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from codemoe.core.cli import main

ROOT = Path(__file__).resolve().parents[1]

PIPELINE = """
run: {{name: nested, dir: {runs}, seed: 0}}
stages:
  sft:
    model: {{name: qwen3_moe, hidden_size: 32, num_layers: 1, num_heads: 2, num_kv_heads: 1, head_dim: 16,
             num_experts: 4, moe_intermediate_size: 32, max_position_embeddings: 512,
             router: {{name: softmax_topk, top_k: 2}}, experts: {{name: grouped, dispatcher: {{name: local}}}}}}
    vocab_size: 320
    suite: {{name: synthetic, train_tasks: 4}}
    batch_size: 4
    phases: [{{phase: all, steps: 2, lr: 0.003}}]
  rl:
    checkpoint_from: sft
    suite: {{name: synthetic, train_tasks: 4}}
    algo: {{name: policy_gradient, group_size: 2, advantage: {{name: grpo}}}}
    engine: {{name: embedded}}
    executor: {{name: local, workers: 1}}
    reward: {{name: weighted_sum, components: {{task_complete: {{weight: 1.0}}}}}}
    steps: 1
    prompts_per_step: 2
    max_new_tokens: 8
  episodes:
    name: trajectories
    suite: {{name: agentic-core, format: {{name: repo}}}}
    environment: {{name: repo}}
    agent: {{name: oracle}}
"""

# (override, the key path the error must name): one misspelling per nesting level
MISSPELLINGS = [
    ("stages.sft.name=sftt", "stages.sft"),
    ("stages.sft.model.name=qwen3_moee", "stages.sft.model"),
    ("stages.sft.model.router.name=softmax_topkk", "stages.sft.model.router"),
    ("stages.sft.model.experts.dispatcher.name=locall", "stages.sft.model.experts.dispatcher"),
    ("stages.sft.suite.name=synthetc", "stages.sft.suite"),
    ("stages.rl.algo.advantage.name=grpoo", "stages.rl.algo.advantage"),
    ("stages.rl.engine.name=embeded", "stages.rl.engine"),
    ("stages.rl.executor.name=locall", "stages.rl.executor"),
    ("+stages.rl.reward.components.tsk_complete.weight=1.0", "stages.rl.reward.components.tsk_complete"),
    ("stages.episodes.suite.format.name=rep", "stages.episodes.suite.format"),
    ("stages.episodes.environment.name=rpo", "stages.episodes.environment"),
    ("stages.episodes.agent.name=oracel", "stages.episodes.agent"),
]


@pytest.fixture
def pipeline(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("CODEMOE_REGISTRY", str(ROOT / "registry"))
    path = tmp_path / "nested.yaml"
    path.write_text(PIPELINE.format(runs=tmp_path / "runs"))
    return path


def test_the_pipeline_is_valid_as_written(pipeline, capsys):
    assert main(["config", "show", str(pipeline)]) == 0
    assert "task_complete" in capsys.readouterr().out


@pytest.mark.parametrize(("override", "key"), MISSPELLINGS, ids=[k for _, k in MISSPELLINGS])
def test_a_misspelling_at_any_depth_fails_before_any_stage(pipeline, tmp_path, capsys, override, key):
    bad = key.rsplit(".", 1)[1] if override.startswith("+") else override.rsplit("=", 1)[1]
    assert main(["config", "show", str(pipeline), override]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"'{key}'" in err and bad in err and "did you mean" in err, err
    assert main(["run", str(pipeline), override, "--no-progress"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"'{key}'" in err, err
    assert not (tmp_path / "runs").exists()  # no run directory: no stage started


@pytest.mark.slow
def test_a_reward_plugin_inside_a_recipe_scores_the_rl_stage_of_codemoe_run(pipeline, tmp_path):
    """The installed example plugin's ``concise`` part, alone in a weighted_sum recipe: every program
    adds fewer lines than max_lines, so every sample scores exactly its weight."""
    overrides = [
        "stages.rl.reward.components.task_complete=null",
        "+stages.rl.reward.components.concise.weight=0.5",
        "+stages.rl.reward.components.concise.max_lines=1000",
    ]
    sft_and_rl = tmp_path / "sft-rl.yaml"
    sft_and_rl.write_text(pipeline.read_text().split("  episodes:")[0])
    command = [sys.executable, "-m", "codemoe.core", "run", str(sft_and_rl), *overrides, "--no-progress"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    (step,) = [r for r in records if r["stage"] == "rl" and r.get("step") == 1]
    assert step["reward_mean"] == 0.5 and step["reward_std"] == 0.0


def test_a_bad_precision_is_refused_at_start_up_with_its_key_path(pipeline, capsys):
    assert main(["config", "show", str(pipeline), "+stages.sft.precision=bf17"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "'stages.sft.precision': 'bf17' is not one of fp32, bf16" in err, err


def test_a_bad_parallel_option_is_refused_at_start_up_with_its_nested_key_path(pipeline, capsys):
    assert main(["config", "show", str(pipeline), "+stages.rl.parallel.ep=0"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "'stages.rl.parallel.ep': 0 must be an integer of at least 1" in err, err
