"""The ``sft`` and ``rl`` stages end to end with real components: the synthetic suite, a codemoe MoE
model, the embedded engine, the local sandbox and a reward recipe, all from the registry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from codemoe.core import Hooks, build_plugin_manager, compose, run_pipeline
from codemoe.core.models.presets import load_preset

REGISTRY = Path(__file__).resolve().parents[1] / "registry"


def _model(context: int) -> str:
    """A two-layer MoE spec as a YAML flow mapping, with ``context`` positions."""
    return (
        "{name: qwen3_moe, hidden_size: 32, num_layers: 2, num_heads: 2, num_kv_heads: 1, head_dim: 16, "
        "num_experts: 4, moe_intermediate_size: 32, router: {name: softmax_topk, top_k: 2}, "
        f"experts: {{name: grouped}}, max_position_embeddings: {context}}}"
    )


def _pipeline(template: str, run_dir: Path) -> str:
    return template.format(run_dir=run_dir, model=_model(512), long_model=_model(8192))

PIPELINE = """
run: {{name: t, dir: {run_dir}, seed: 0}}
stages:
  sft:
    name: sft
    model: {model}
    vocab_size: 320
    suite: {{name: synthetic, train_tasks: 8}}
    batch_size: 4
    phases: [{{phase: router, steps: 2, lr: 0.003}}, {{phase: experts, steps: 2}}, {{phase: all, steps: 2}}]
  rl:
    name: rl
    checkpoint_from: sft
    suite: {{name: synthetic, train_tasks: 8}}
    algo: grpo
    steps: 2
    prompts_per_step: 2
    max_new_tokens: 12
    lr: 1.0e-4
    checkpoint_every: 1
    reward: seed2-weighted
"""


@pytest.mark.slow
def test_sft_then_grpo_pipeline(tmp_path):
    from codemoe.core import build_registry
    from codemoe.core.models import load_pretrained

    (tmp_path / "p.yaml").write_text(_pipeline(PIPELINE, tmp_path / "runs"))
    overrides = ["stages.rl.algo.group_size=4", "stages.rl.algo.routing_replay=true"]
    cfg = compose(tmp_path / "p.yaml", overrides, registry_dir=REGISTRY)
    pm = build_plugin_manager()
    ctx = run_pipeline(cfg, build_registry(pm), Hooks(pm), show_progress=False)

    sft, rl = ctx.results["sft"], ctx.results["rl"]
    assert sft["steps"] == 6 and sft["loss_last"] < sft["loss_first"]
    assert rl["steps"] == 2
    model, tokenizer = load_pretrained(rl["checkpoint"])  # the next stage (eval) loads exactly this
    assert tokenizer is not None and model.config.num_hidden_layers == 2
    records = [json.loads(line) for line in (ctx.run_dir / "metrics.jsonl").read_text().splitlines()]
    rl_steps = [r for r in records if r["stage"] == "rl" and r["step"] is not None]
    assert [r["step"] for r in rl_steps] == [1, 2]
    for key in ("reward_mean", "pass_rate", "kl", "entropy", "is_ratio_mean", "moe/max_over_mean", "tokens_per_s"):
        assert key in rl_steps[0], key
    assert abs(rl_steps[0]["logp_mismatch_mean"]) < 1e-3  # the embedded engine and the trainer agree
    sft_phases = [r["phase"] for r in records if r["stage"] == "sft" and r["step"] is not None]
    assert sft_phases == ["router"] * 2 + ["experts"] * 2 + ["all"] * 2


def test_sft_stage_imitates_trajectories(tmp_path):
    from codemoe.core import build_registry

    episode = {
        "resolved": True,
        "messages": [
            {"role": "user", "content": "fix add()"},
            {"role": "assistant", "content": '{"tool": "submit"}'},
        ],
    }
    (tmp_path / "episodes.jsonl").write_text(json.dumps(episode) + "\n")
    model = {**load_preset("micro"), "num_layers": 1, "moe_intermediate_size": 32, "max_position_embeddings": 256}
    sft = {"name": "sft", "model": model, "vocab_size": 300, "batch_size": 2}
    sft.update(trajectories=str(tmp_path / "episodes.jsonl"), phases=[{"phase": "all", "steps": 3, "lr": 0.01}])
    pipeline = {"run": {"name": "t", "dir": str(tmp_path / "runs")}, "stages": {"sft": sft}}
    (tmp_path / "p.yaml").write_text(json.dumps(pipeline))  # JSON is YAML
    pm = build_plugin_manager()
    ctx = run_pipeline(
        compose(tmp_path / "p.yaml", registry_dir=REGISTRY), build_registry(pm), Hooks(pm), show_progress=False
    )
    assert ctx.results["sft"]["examples"] == 1 and ctx.results["sft"]["loss_last"] < ctx.results["sft"]["loss_first"]


AGENT_PIPELINE = """
run: {{name: agent, dir: {run_dir}, seed: 0}}
stages:
  sft:
    name: sft
    model: {long_model}
    vocab_size: 512
    suite: {{name: synthetic, train_tasks: 8}}
    batch_size: 4
    phases: [{{phase: all, steps: 2, lr: 0.003}}]
  rl:
    name: rl
    checkpoint_from: sft
    suite: {{name: agentic-core, heldout_percent: 0}}
    max_tasks: 2
    environment: repo
    max_turns: 2
    max_observation_tokens: 64
    algo: {{name: policy_gradient, group_size: 2}}
    steps: 1
    prompts_per_step: 2
    max_new_tokens: 16
    stop: []
    reward: seed1-stepwise
"""


@pytest.mark.slow
def test_rl_stage_runs_multi_step_repository_episodes(tmp_path):
    """The rl stage with an environment: two-action episodes on agentic-core tasks in the sandbox,
    scored by seed 1's step-wise recipe (an untrained policy only pays the step cost)."""
    from codemoe.core import build_registry

    (tmp_path / "p.yaml").write_text(_pipeline(AGENT_PIPELINE, tmp_path / "runs"))
    cfg = compose(tmp_path / "p.yaml", [], registry_dir=REGISTRY)
    pm = build_plugin_manager()
    ctx = run_pipeline(cfg, build_registry(pm), Hooks(pm), show_progress=False)
    last = ctx.results["rl"]["last"]
    assert ctx.results["rl"]["steps"] == 1 and last["pass_rate"] == 0.0
    assert last["reward_mean"] < 0  # the step cost of its actions, nothing resolved
    assert 0 < last["response_len"] <= 2 * 16  # two actions of at most 16 tokens; observations do not count


SFT_ONLY = """
run: {{name: sftd, dir: {run_dir}, seed: 0}}
stages:
  sft:
    name: sft
    model: {model}
    vocab_size: 320
    suite: {{name: synthetic, train_tasks: 8}}
    batch_size: 4
    balance_coef: 0.0  # a per-rank statistic: off, so 2 ranks train exactly as 1 process
    phases: [{{phase: router, steps: 2, lr: 0.003}}, {{phase: all, steps: 2}}]
  eval:
    name: eval
    checkpoint_from: sft
    suite: {{name: synthetic, train_tasks: 8}}
    split: heldout
    max_tasks: 3
    samples: 1
    max_new_tokens: 8
"""


@pytest.mark.slow
@pytest.mark.distributed
def test_sft_stage_under_torchrun_writes_one_run_and_a_whole_checkpoint(tmp_path):
    import os
    import subprocess
    import sys

    from codemoe.core.models import load_pretrained

    (tmp_path / "p.yaml").write_text(_pipeline(SFT_ONLY, tmp_path / "runs"))
    codemoe = str(Path(sys.executable).parent / "codemoe")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([*torchrun, codemoe, "run", str(tmp_path / "p.yaml")], env=env, check=True, cwd=REGISTRY.parent)
    (run,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]  # both ranks in one run directory
    assert (run / "run.log").exists() and (run / "run-rank1.log").exists()
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    sft_steps = [r["step"] for r in records if r["stage"] == "sft" and r["step"] is not None]
    assert sft_steps == [1, 2, 3, 4]  # rank 0 writes, once
    state = json.loads((run / "state.json").read_text())
    assert "pass@1" in state["finished"]["eval"]  # evaluated once, by rank 0
    model, tokenizer = load_pretrained(state["finished"]["sft"]["checkpoint"])  # gathered from both ranks' shards
    assert model.config.num_hidden_layers == 2 and tokenizer is not None
    # the same stage in one process trains the same weights
    (tmp_path / "one.yaml").write_text(_pipeline(SFT_ONLY, tmp_path / "one"))
    cfg = compose(tmp_path / "one.yaml", [], registry_dir=REGISTRY)
    pm = build_plugin_manager()
    from codemoe.core import build_registry

    ctx = run_pipeline(cfg, build_registry(pm), Hooks(pm), show_progress=False)
    single, _ = load_pretrained(ctx.results["sft"]["checkpoint"])
    for (name, a), b in zip(single.state_dict().items(), model.state_dict().values(), strict=True):
        assert torch.allclose(a, b, atol=1e-5), name


def test_episodes_on_a_suite_without_repositories_are_a_config_error(tmp_path):
    from codemoe.core import build_registry
    from codemoe.core.errors import ConfigError

    text = _pipeline(AGENT_PIPELINE, tmp_path / "runs").replace(
        "suite: {name: agentic-core, heldout_percent: 0}", "suite: {name: synthetic, train_tasks: 8}"
    )
    (tmp_path / "p.yaml").write_text(text)
    pm = build_plugin_manager()
    with pytest.raises(ConfigError, match=r"stages.rl.environment': episodes need repository tasks"):
        run_pipeline(
            compose(tmp_path / "p.yaml", [], registry_dir=REGISTRY), build_registry(pm), Hooks(pm), show_progress=False
        )


def test_sft_trajectories_from_names_a_stage_that_recorded_them():
    from types import SimpleNamespace

    from codemoe.core.errors import ConfigError
    from codemoe.rl.stages import _recorded

    ctx = SimpleNamespace(results={"record": {"trajectories": "/x/t.jsonl"}, "sft0": {"checkpoint": "/c"}})
    stage = SimpleNamespace(id="sft")
    assert _recorded(ctx, stage, "record") == "/x/t.jsonl" and _recorded(ctx, stage, "") == ""
    with pytest.raises(ConfigError, match=r"stages.sft.trajectories_from': no earlier stage 'sft0'"):
        _recorded(ctx, stage, "sft0")


@pytest.mark.slow
@pytest.mark.distributed
def test_two_torchrun_nodes_run_sft_and_rl_in_one_run_directory(tmp_path):
    """Two torchrun agents as two nodes (``--nnodes 2``, c10d rendezvous on loopback), one rank each:
    the run directory's path reaches node 1 through the launch's store, SFT and RL steps run sharded
    over both, and rank 0 alone writes the run's files."""
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    (tmp_path / "p.yaml").write_text(_pipeline(PIPELINE, tmp_path / "runs"))
    codemoe = str(Path(sys.executable).parent / "codemoe")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    agents = [
        subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
             "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "two-nodes",
             "--node-rank", str(node), codemoe, "run", str(tmp_path / "p.yaml"), "stages.rl.steps=1"],
            env=env, cwd=REGISTRY.parent,
        )
        for node in (0, 1)
    ]
    assert [agent.wait(timeout=600) for agent in agents] == [0, 0]
    (run,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    assert (run / "run.log").exists() and (run / "run-rank1.log").exists()
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["stage"] == "sft" and r["step"] is not None] == [1, 2, 3, 4, 5, 6]
    assert [r["step"] for r in records if r["stage"] == "rl" and r["step"] is not None] == [1]
    assert set(json.loads((run / "state.json").read_text())["finished"]) == {"sft", "rl"}


# -- starting from a checkpoint folder (`checkpoint: PATH`, as the eval stage takes) --------------------

FROM_PATH = """
run: {{name: t, dir: {run_dir}, seed: 0}}
stages:
  rl:
    checkpoint: {checkpoint}
    suite: {{name: synthetic, train_tasks: 4}}
    algo: grpo
    steps: 1
    prompts_per_step: 2
    max_new_tokens: 8
    checkpoint_every: 1
    executor: {{name: local, workers: 1}}
  sft:
    checkpoint: {checkpoint}
    suite: {{name: synthetic, train_tasks: 4}}
    batch_size: 2
    phases: [{{phase: all, steps: 1}}]
"""


def test_sft_and_rl_start_from_a_checkpoint_path(tmp_path, tiny_checkpoint: Path):
    from codemoe.core import build_registry
    from codemoe.core.models import load_pretrained

    (tmp_path / "p.yaml").write_text(FROM_PATH.format(run_dir=tmp_path / "runs", checkpoint=tiny_checkpoint))
    pm = build_plugin_manager()
    # rl runs first, with no earlier stage: its default (checkpoint_from 'sft') would have nothing to load
    cfg = compose(tmp_path / "p.yaml", ["stages.rl.algo.group_size=2"], registry_dir=REGISTRY)
    ctx = run_pipeline(cfg, build_registry(pm), Hooks(pm), show_progress=False)
    source, source_tokenizer = load_pretrained(tiny_checkpoint)
    for stage_id in ("rl", "sft"):
        model, tokenizer = load_pretrained(ctx.results[stage_id]["checkpoint"])
        # the checkpoint's model and tokenizer (one layer, its 384-token vocabulary), not a fresh `model: tiny`
        assert model.config.num_hidden_layers == source.config.num_hidden_layers == 1, stage_id
        assert tokenizer.get_vocab() == source_tokenizer.get_vocab(), stage_id
    assert ctx.results["rl"]["steps"] == 1 and ctx.results["sft"]["steps"] == 1


@pytest.mark.parametrize("stage", ["sft", "rl"])
def test_checkpoint_and_checkpoint_from_together_is_an_error_naming_both(registry, stage: str):
    from codemoe.core.config import validate_component
    from codemoe.core.errors import ConfigError

    spec = {"name": stage, "checkpoint": "/ckpt", "checkpoint_from": "warmup"}
    with pytest.raises(ConfigError, match=rf"'stages.{stage}.checkpoint': checkpoint \(/ckpt\) and checkpoint_from "
                                          r"\(warmup\) are both set"):
        validate_component(registry, "stage", spec, where=f"stages.{stage}")


@pytest.mark.parametrize("stage", ["sft", "rl"])
def test_a_checkpoint_path_that_holds_no_checkpoint_stops_the_stage(tmp_path, stage: str):
    from codemoe.core import build_registry
    from codemoe.core.errors import ConfigError

    empty = tmp_path / "not-a-checkpoint"
    empty.mkdir()
    (tmp_path / "p.yaml").write_text(f"run: {{dir: {tmp_path / 'runs'}}}\nstages:\n  {stage}: {{checkpoint: {empty}}}\n")
    pm = build_plugin_manager()
    with pytest.raises(ConfigError, match=rf"'stages.{stage}.checkpoint': {empty} holds no checkpoint \(no config.json"):
        run_pipeline(compose(tmp_path / "p.yaml", registry_dir=REGISTRY), build_registry(pm), Hooks(pm),
                     show_progress=False)
