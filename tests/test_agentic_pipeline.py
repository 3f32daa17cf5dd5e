"""A shortened `codemoe run agentic`: oracle episodes -> SFT on them -> GRPO over episodes -> agent eval."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from codemoe.core.cli import main

SHORT = [
    "stages.trajectories.max_tasks=3",
    "stages.sft.phases=[{phase: all, steps: 3, lr: 0.003}]",
    "stages.sft.batch_size=4",
    "stages.rl.steps=1",
    "stages.rl.max_tasks=2",
    "stages.rl.algo.group_size=2",
    "stages.rl.max_turns=2",
    "stages.rl.max_new_tokens=24",
    "stages.rl.max_staleness=1",  # asynchronous: on CPU the embedded engine then runs in a child process
    "stages.eval_agent.max_tasks=2",
    "stages.eval_agent.samples=1",
    "stages.eval_agent.max_turns=2",
    "stages.eval_agent.max_new_tokens=24",
    "stages.report.print_report=false",
]


@pytest.mark.slow
def test_shortened_agentic_pipeline_runs_every_stage(run_root: Path) -> None:
    assert main(["run", "--no-progress", "agentic", *SHORT]) == 0
    (run_dir,) = (run_root / "runs").iterdir()
    state = json.loads((run_dir / "state.json").read_text())["finished"]
    assert list(state) == ["environment", "trajectories", "sft", "rl", "eval_agent", "report"]
    assert state["trajectories"] == {**state["trajectories"], "episodes": 3, "resolved": 3}  # the oracle solves them
    records = [json.loads(line) for line in Path(state["trajectories"]["trajectories"]).read_text().splitlines()]
    assert len(records) == 3 and all(r["messages"][0]["role"] == "system" for r in records)
    assert state["sft"]["examples"] == 3  # one example per recorded episode, every action learned
    assert state["rl"]["steps"] == 1
    assert state["eval_agent"]["tasks"] == 2 and state["eval_agent"]["split"] == "heldout"
