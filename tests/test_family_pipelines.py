"""Every model family through ``codemoe run``: a short SFT then an RL step with the embedded engine
and the sandbox; and RL on a plain ``transformers`` MoE checkpoint, whose own MoE block trains."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from codemoe.core.cli import main

ROOT = Path(__file__).resolve().parents[1]

PIPELINE = """
run: {{name: family, dir: {runs}, seed: 0}}
stages:
  sft:
    model: {model}
    vocab_size: 320
    suite: {{name: synthetic, train_tasks: 4}}
    batch_size: 4
    phases: [{{phase: all, steps: 2, lr: 0.003}}]
  rl:
    checkpoint_from: sft
    suite: {{name: synthetic, train_tasks: 4}}
    algo: {{name: policy_gradient, group_size: 2}}
    executor: {{name: local, workers: 1}}
    steps: 1
    prompts_per_step: 2
    max_new_tokens: 8
"""

# family -> whether its MoE layers are codemoe blocks that report expert loads
FAMILIES = {
    "mixtral": True,
    "qwen2_moe": True,
    "olmoe": True,
    "deepseek_v3": True,
    "gpt_oss": False,  # transformers' own block: its balance loss, no codemoe routing statistics
    "qwen3": False,
    "llama": False,
}


@pytest.fixture(autouse=True)
def _registry(monkeypatch):
    monkeypatch.setenv("CODEMOE_REGISTRY", str(ROOT / "registry"))


def _records(run_dir: Path, stage: str) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["stage"] == stage and r.get("step") is not None]


def _run(tmp_path: Path, model: str, *extra: str) -> Path:
    pipeline = tmp_path / "family.yaml"
    pipeline.write_text(PIPELINE.format(runs=tmp_path / "runs", model=model))
    assert main(["run", str(pipeline), "--no-progress", *extra]) == 0
    (run_dir,) = (tmp_path / "runs").iterdir()
    return run_dir


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_sft_then_rl_through_codemoe_run(family, tmp_path):
    run_dir = _run(tmp_path, f"tiny_{family}")
    state = json.loads((run_dir / "state.json").read_text())["finished"]
    assert state["sft"]["steps"] == 2 and state["rl"]["steps"] == 1
    config = json.loads((Path(state["rl"]["checkpoint"]) / "config.json").read_text())
    assert config["model_type"] == family and config["codemoe"]["name"] == family
    (step,) = _records(run_dir, "rl")
    # the engine's sampling log-probs and the trainer's forward of the same policy: fp32, a few ulps
    assert abs(step["logp_mismatch_mean"]) < 1e-4 and step["logp_mismatch_max"] < 1e-4
    assert ("moe/max_over_mean" in step) is FAMILIES[family]


@pytest.mark.slow
def test_rl_trains_a_plain_transformers_moe_checkpoint_without_codemoe_blocks(tmp_path):
    """A Mixtral folder from outside codemoe, handed to the rl stage as the finished sft stage's
    checkpoint: transformers' MoE block trains (its router moves under the balance loss) and the
    step's metrics carry transformers' balance loss, no codemoe expert loads."""
    from codemoe.core.tokenizer import train_tokenizer
    from safetensors.torch import load_file
    from transformers import MixtralConfig, MixtralForCausalLM

    tokenizer = train_tokenizer(["def add(a, b):\n    return a + b\n"] * 20, vocab_size=300)
    torch.manual_seed(0)
    config = MixtralConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        num_local_experts=4,
        max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    plain = tmp_path / "plain-mixtral"
    MixtralForCausalLM(config).save_pretrained(plain)
    tokenizer.save_pretrained(plain)
    run_dir = tmp_path / "runs" / "plain"
    run_dir.mkdir(parents=True)
    (run_dir / "state.json").write_text(json.dumps({"finished": {"sft": {"checkpoint": str(plain)}}}))

    _run(tmp_path, "tiny_mixtral", "--resume", str(run_dir))  # sft is finished: only rl runs
    (step,) = _records(run_dir, "rl")
    assert step["balance_loss"] > 0 and not any(key.startswith(("moe/", "expert_load/")) for key in step)
    assert abs(step["logp_mismatch_mean"]) < 1e-4
    trained = Path(json.loads((run_dir / "state.json").read_text())["finished"]["rl"]["checkpoint"])
    assert json.loads((trained / "config.json").read_text())["model_type"] == "mixtral"
    before, after = load_file(str(plain / "model.safetensors")), load_file(str(trained / "model.safetensors"))
    router = "model.layers.0.block_sparse_moe.gate.weight"
    assert router in after and not torch.equal(before[router], after[router])
