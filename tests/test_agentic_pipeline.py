"""A shortened `codemoe run agentic`: oracle episodes -> SFT on them -> GRPO over episodes -> agent eval."""

from __future__ import annotations

import json
import re
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


def test_trajectories_recorded_concurrently_are_the_file_one_environment_writes(run_root: Path, write_pipeline) -> None:
    """Episodes at once (each in its own environment on the shared executor) give the same file, in
    task order, as one at a time: SFT reads it in that order, so the run stays reproducible."""
    files = {}
    for concurrency in (1, 3):
        path = write_pipeline(f"""
run: {{name: traj{concurrency}}}
stages:
  trajectories:
    suite: {{name: agentic-core, heldout_percent: 50}}
    max_tasks: 7
    concurrency: {concurrency}
""", name=f"traj{concurrency}")
        assert main(["run", "--no-progress", str(path)]) == 0
        (run_dir,) = (run_root / "runs").glob(f"traj{concurrency}-*")
        state = json.loads((run_dir / "state.json").read_text())["finished"]["trajectories"]
        assert (state["episodes"], state["resolved"]) == (7, 7)
        folder = Path(state["trajectories"]).parent
        assert [p.name for p in folder.iterdir() if p.suffix == ".jsonl"] == ["trajectories.jsonl"]  # no shard left
        # a failing test's output may show an object's address, which differs from run to run
        files[concurrency] = re.sub(r"0x[0-9a-f]+", "0x?", Path(state["trajectories"]).read_text())
    records = [json.loads(line) for line in files[3].splitlines()]
    assert len(records) == 7 and len({r["task_id"] for r in records}) == 7
    assert files[3] == files[1]


def test_a_negative_trajectory_concurrency_is_refused_before_any_stage_runs(run_root: Path, write_pipeline,
                                                                            capsys) -> None:
    path = write_pipeline("stages:\n  trajectories: {suite: {name: agentic-core}, concurrency: -1}\n")
    assert main(["run", "--no-progress", str(path)]) != 0
    err = " ".join(capsys.readouterr().err.split())
    assert "'stages.trajectories': concurrency: -1 is negative" in err
    assert not (run_root / "runs").exists()
