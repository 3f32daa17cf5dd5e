"""A shortened quickstart (the `make run` pipeline) end to end through the same code path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from codemoe.core.cli import main

SHORT = [
    "stages.environment.torch_threads=1",
    "stages.sft.phases=[{phase: router, steps: 2, lr: 0.003}, {phase: all, steps: 12, lr: 0.003}]",
    "stages.sft.batch_size=16",
    "stages.rl.steps=2",
    "stages.rl.prompts_per_step=4",
    "stages.rl.algo.group_size=4",
    "stages.rl.max_new_tokens=16",
    "stages.eval_sft.max_tasks=8",
    "stages.eval_sft.samples=2",
    "stages.eval_sft.max_new_tokens=16",
    "stages.eval_rl.max_tasks=8",
    "stages.eval_rl.samples=2",
    "stages.eval_rl.max_new_tokens=16",
    "stages.report.print_report=false",
]


@pytest.mark.slow
def test_shortened_quickstart_runs_every_stage_and_writes_the_report(run_root: Path) -> None:
    assert main(["run", "--no-progress", "quickstart", *SHORT]) == 0
    (run_dir,) = (run_root / "runs").iterdir()
    state = json.loads((run_dir / "state.json").read_text())["finished"]
    assert list(state) == ["environment", "sft", "rl", "eval_sft", "eval_rl", "report"]
    assert state["sft"]["steps"] == 14 and state["rl"]["steps"] == 2
    assert state["eval_sft"]["checkpoint"] == state["sft"]["checkpoint"]
    assert state["eval_rl"]["checkpoint"] == state["rl"]["checkpoint"]
    for stage in ("eval_sft", "eval_rl"):
        summary = json.loads(Path(state[stage]["summary"]).read_text())
        assert summary["tasks"] == 8 and summary["samples"] == 16
        low, high = state[stage]["pass@1_ci"]
        assert low <= state[stage]["pass@1"] <= high
    assert set(state["eval_rl"]["comparison"]) >= {"absolute", "relative", "paired"}
    report = (run_dir / "report.md").read_text()
    for section in ("## Evaluation (hidden tests)", "## Improvement", "## pass@1 per family", "## Training"):
        assert section in report
    assert sorted(p.name for p in (run_dir / "plots").iterdir()) == [
        "expert_load.png",
        "kl_entropy.png",
        "loss.png",
        "pass_at_1.png",
        "reward.png",
    ]
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert {m["step"] for m in metrics if m["stage"] == "rl" and m["step"] is not None} == {1, 2}
