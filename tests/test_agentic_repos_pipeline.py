"""A shortened `codemoe run agentic-repos`: oracle episodes on generated repositories -> SFT -> GRPO
over episodes -> agent evaluation of both checkpoints on held-out repositories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from codemoe.core.cli import main


@pytest.mark.slow
def test_shortened_agentic_repos_pipeline_runs_every_stage(
    run_root: Path, monkeypatch: pytest.MonkeyPatch, agentic_repos_short: list[str]
) -> None:
    monkeypatch.setenv("CODEMOE_CACHE_DIR", str(run_root / "cache"))  # the generated task folders
    short = [*agentic_repos_short, "stages.rl.algo.group_size=2"]
    assert main(["run", "--no-progress", "agentic-repos", *short]) == 0
    (run_dir,) = (run_root / "runs").iterdir()
    state = json.loads((run_dir / "state.json").read_text())["finished"]
    assert list(state) == ["environment", "trajectories", "sft", "rl", "eval_sft", "eval_rl", "report"]
    assert state["trajectories"] == {**state["trajectories"], "episodes": 4, "resolved": 4}  # the oracle solves them
    records = [json.loads(line) for line in Path(state["trajectories"]["trajectories"]).read_text().splitlines()]
    tools = [[json.loads(m["content"].split("\n")[1])["tool"] for m in r["messages"] if m["role"] == "assistant"]
             for r in records]
    assert all(t[0] in ("run_tests", "ask_clarification") and t[-2:] == ["run_tests", "submit"] and "edit" in t
               for t in tools)
    assert state["sft"]["examples"] == len(records)  # one example per recorded episode, every action learned
    assert state["eval_rl"]["tasks"] == 2 and state["eval_rl"]["split"] == "heldout"
    heldout = {p.name for p in (run_root / "cache" / "synthetic-repos").glob("*/heldout/*")}
    assert heldout and not heldout & {r["task_id"] for r in records}
