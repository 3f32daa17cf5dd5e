"""Experiment tracking on a real short pipeline (SFT, then GRPO with the local sandbox and the
``seed2-weighted`` recipe): what TensorBoard's event files and the offline W&B run hold, read back
with TensorBoard's own reader and from the W&B run file, is what ``metrics.jsonl`` holds."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from codemoe.core import Hooks, build_plugin_manager, build_registry, compose, run_pipeline

REGISTRY = Path(__file__).resolve().parents[1] / "registry"

PIPELINE = """
run:
  name: tracked
  dir: {run_dir}
  seed: 0
  loggers:
    - tensorboard
    - {{name: wandb, project: codemoe-tests, mode: offline}}
stages:
  sft:
    model: {{name: qwen3_moe, hidden_size: 32, num_layers: 2, num_heads: 2, num_kv_heads: 1, head_dim: 16,
             num_experts: 4, moe_intermediate_size: 32, router: {{name: softmax_topk, top_k: 2}},
             max_position_embeddings: 512}}
    vocab_size: 320
    suite: {{name: synthetic, train_tasks: 8}}
    batch_size: 4
    phases: [{{phase: router, steps: 2, lr: 0.003}}, {{phase: all, steps: 2, lr: 0.001}}]
  rl:
    checkpoint_from: sft
    suite: {{name: synthetic, train_tasks: 8}}
    algo: grpo
    steps: 2
    prompts_per_step: 2
    max_new_tokens: 8
    reward: seed2-weighted
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    folder = tmp_path_factory.mktemp("tracking")
    (folder / "p.yaml").write_text(PIPELINE.format(run_dir=folder / "runs"))
    pm = build_plugin_manager()
    cfg = compose(folder / "p.yaml", ["stages.rl.algo.group_size=2"], registry_dir=REGISTRY)
    ctx = run_pipeline(cfg, build_registry(pm), Hooks(pm), show_progress=False)
    records = [json.loads(line) for line in (ctx.run_dir / "metrics.jsonl").read_text().splitlines()]
    return ctx.run_dir, records


def _numbers(record: dict) -> dict[str, float]:
    return {k: float(v) for k, v in record.items() if k not in ("stage", "step", "time") and isinstance(v, (int, float))}


@pytest.mark.slow
def test_tensorboard_event_files_hold_every_metric_of_metrics_jsonl(run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir, records = run
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})  # 0: keep every point
    events.Reload()
    tags = set(events.Tags()["scalars"])
    expected = {(f"{r['stage']}/{key}", r["step"] or 0): value for r in records for key, value in _numbers(r).items()}
    assert {tag for tag, _ in expected} == tags
    logged = {(tag, e.step): e.value for tag in tags for e in events.Scalars(tag)}
    assert logged.keys() == expected.keys()
    for key, value in expected.items():
        assert logged[key] == pytest.approx(value, rel=1e-6, abs=1e-30), key  # event files store float32
    # what a user watches: SFT's learning rate and throughput, RL's reward parts and time split
    assert [logged[("sft/lr", s)] for s in (1, 2, 3, 4)] == pytest.approx([0.003, 0.003, 0.001, 0.001])
    assert {"sft/tokens_per_s", "sft/expert_load/1/3", "rl/reward/test_pass_rate", "rl/reward/hack_penalty"} <= tags
    assert {"rl/reward/hacked", "rl/score_seconds"} <= tags  # the recipe flags a hack apart from its components
    assert {"rl/generate_seconds", "rl/train_seconds", "rl/sync_seconds", "rl/stage_seconds"} <= tags


def _wandb_records(path: Path) -> list:
    """The protobuf records of a W&B run file: a 7-byte header, then LevelDB-log blocks of 32 KiB
    whose chunks (checksum, length, type: full/first/middle/last) carry each record."""
    from wandb.proto import wandb_internal_pb2

    data, block, pos = path.read_bytes(), 32768, 7
    assert data[:4] == b":W&B", path
    out, pending = [], b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # full, last
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            out.append(record)
            pending = b""
    return out


def _key(item) -> str:
    """A W&B item's metric name: a name with slashes ('rl/loss') is stored as its parts."""
    return item.key or "/".join(item.nested_key)


@pytest.mark.slow
def test_the_offline_wandb_run_holds_every_stepped_metric_and_the_stage_summaries(run):
    run_dir, records = run
    (run_file,) = (run_dir / "wandb").glob("offline-run-*/run-*.wandb")
    saved = _wandb_records(run_file)
    history = []
    for record in saved:
        if record.WhichOneof("record_type") == "history":
            history.append({_key(item): json.loads(item.value_json) for item in record.history.item})
    for stage in ("sft", "rl"):
        rows = {row[f"{stage}/step"]: row for row in history if f"{stage}/step" in row}
        stepped = [r for r in records if r["stage"] == stage and r["step"] is not None]
        assert sorted(rows) == [r["step"] for r in stepped]
        for r in stepped:
            for key, value in _numbers(r).items():
                assert rows[r["step"]][f"{stage}/{key}"] == pytest.approx(value, rel=1e-12), (stage, r["step"], key)
    summary = {}
    for record in saved:
        if record.WhichOneof("record_type") == "summary":
            summary.update({_key(item): json.loads(item.value_json) for item in record.summary.update})
    finished = {r["stage"]: r["stage_seconds"] for r in records if "stage_seconds" in r}
    assert {stage: summary[f"{stage}/stage_seconds"] for stage in finished} == finished


def test_the_readme_tracking_example_runs_as_written(run_root: Path):
    """The first command of the README's 'Tracking a run' block, run through codemoe's CLI."""
    import re
    import shlex

    from codemoe.core.cli import main
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = re.search(r"## Tracking a run\n.*?```bash\n(.*?)```", text, re.S).group(1)
    command = shlex.split(block.splitlines()[0].split("#")[0])
    assert command[:2] == [".venv/bin/codemoe", "run"]
    assert main([*command[1:2], "--no-progress", *command[2:]]) == 0
    (run_dir,) = (run_root / "runs").iterdir()
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    threads = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])["torch_threads"]
    assert [e.value for e in events.Scalars("environment/torch_threads")] == [threads]
