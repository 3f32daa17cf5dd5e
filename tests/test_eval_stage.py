"""The ``eval`` stage end to end on a tiny checkpoint: engine samples, sandbox grades, files land."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from codemoe.core import compose, run_pipeline
from codemoe.core.errors import ConfigError

PIPELINE = """
run: {name: evalstage, dir: %(runs)s}
stages:
  first:
    name: eval
    checkpoint: %(ckpt)s
    suite: {name: synthetic, heldout_tasks: 6}
    samples: 3
    ks: [1, 3]
    max_new_tokens: 12
    review_fraction: 0.1
  second:
    name: eval
    checkpoint: %(ckpt)s
    suite: {name: synthetic, heldout_tasks: 6}
    samples: 3
    max_new_tokens: 12
    baseline: first
  report: {name: report, print_report: false}
"""


@pytest.mark.slow
def test_eval_stage_samples_grades_and_reports(tiny_checkpoint: Path, spine, write_pipeline, tmp_path, registry_dir):
    _, registry, hooks = spine
    text = PIPELINE % {"runs": tmp_path / "runs", "ckpt": tiny_checkpoint}
    ctx = run_pipeline(compose(write_pipeline(text), registry_dir=registry_dir), registry, hooks, show_progress=False)
    first = ctx.results["first"]
    assert first["kind"] == "eval" and first["tasks"] == 6 and first["samples_per_task"] == 3
    summary = json.loads(Path(first["summary"]).read_text())
    assert set(summary["overall"]) == {"pass@1", "pass@3"}
    load = summary["expert_load"]  # [layers][experts] from the engine's routing decisions
    assert len(load) == 1 and len(load[0]) <= 4 and sum(load[0]) == pytest.approx(1.0)
    assert summary["samples"] == 18 and len(summary["per_task"]) == 6
    samples = [json.loads(line) for line in (ctx.run_dir / "first" / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 18
    assert {s["status"] for s in samples} <= {"passed", "failed", "error", "timeout"}
    assert first["review_samples"] >= 1 and Path(first["review"]).is_file()
    # the same checkpoint and seed give the same samples: the comparison is exactly zero
    second = ctx.results["second"]
    assert second["comparison"]["absolute"]["value"] == 0.0 and second["comparison"]["paired"]
    assert json.loads(Path(second["summary"]).read_text())["per_task"] == summary["per_task"]
    metrics = [json.loads(line) for line in (ctx.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any(m["stage"] == "first" and "pass@1" in m and "pass@1_low" in m for m in metrics)
    assert "## Evaluation (hidden tests)" in (ctx.run_dir / "report.md").read_text()


def test_eval_stage_needs_a_checkpoint(spine, write_pipeline, tmp_path, registry_dir):
    _, registry, hooks = spine
    text = f"run: {{name: x, dir: {tmp_path}}}\nstages:\n  ev: {{name: eval, checkpoint_from: sft}}\n"
    with pytest.raises(ConfigError, match="no earlier stage 'sft'"):
        run_pipeline(compose(write_pipeline(text), registry_dir=registry_dir), registry, hooks, show_progress=False)
