"""The oracle's reference trajectories: small exact edits, the decoy-then-correction loop, variety, fractions."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest
from codemoe.sandbox.agent import RepoEnvironment, load_task, load_tasks, make_patch, run_episode, validate_tasks
from codemoe.sandbox.agent.policies import OracleConfig, OraclePolicy, build_oracle, edit_calls, imitated, plan_episode

SUITE = Path(__file__).resolve().parents[3] / "registry" / "suites" / "agentic-core"
OBVIOUS = "def is_newer(candidate, current):\n    return tuple(map(int, candidate.split('.'))) > tuple(map(int, current.split('.')))\n"


def _replay(text: str, calls) -> str:
    """What the environment's ``edit`` tool does with each call, in order."""
    for call in calls:
        if call.tool == "write_file":
            text = call.args["content"]
            continue
        assert text.count(call.args["old"]) == 1, call.args  # the tool refuses anything else
        text = text.replace(call.args["old"], call.args["new"], 1)
    return text


def test_edit_calls_change_one_line_with_just_that_line():
    old = "def f(x):\n    return x + 1\n\n\ndef g(x):\n    return x * 2\n"
    new = old.replace("x + 1", "x - 1")
    (call,) = edit_calls("m.py", old, new)
    assert (call.tool, call.args) == ("edit", {"path": "m.py", "old": "    return x + 1\n", "new": "    return x - 1\n"})


def test_edit_calls_widen_a_repeated_line_until_it_is_unique():
    old = "def f(x):\n    return x\n\n\ndef g(x):\n    return x\n"
    new = old[: old.rindex("return x")] + "return -x\n"
    (call,) = edit_calls("m.py", old, new)
    assert call.args["old"] == "def g(x):\n    return x\n" and call.args["new"] == "def g(x):\n    return -x\n"


def test_edit_calls_insert_at_the_top_and_write_new_files():
    old = '"""Doc."""\n\n\ndef f(x):\n    return round(x)\n'
    new = '"""Doc."""\n\nimport math\n\n\ndef f(x):\n    return math.floor(x)\n'
    calls = edit_calls("m.py", old, new)
    assert [c.tool for c in calls] == ["edit", "edit"] and _replay(old, calls) == new
    assert calls[0].args == {"path": "m.py", "old": '"""Doc."""\n', "new": '"""Doc."""\n\nimport math\n'}
    assert [(c.tool, c.args["content"]) for c in edit_calls("new.py", "", "x = 1\n")] == [("write_file", "x = 1\n")]


def test_edit_calls_reproduce_every_agentic_core_gold_file():
    for task in load_tasks(SUITE):
        before, after = task.repo_files(), task.gold_files()
        for path in sorted(p for p in after if before.get(p) != after[p]):
            calls = edit_calls(path, before.get(path, ""), after[path])
            assert _replay(before.get(path, ""), calls) == after[path], (task.id, path)
            if path in before:
                assert all(c.tool == "edit" for c in calls), (task.id, path)


def _with_decoy(tmp_path: Path, text: str) -> Path:
    folder = tmp_path / "multiround-version-compare"
    shutil.copytree(SUITE / folder.name, folder)
    task = load_task(folder)
    (folder / "decoy.patch").write_text(make_patch(task.repo_files(), {**task.repo_files(), "releases/versions.py": text}))
    return folder


def test_the_oracle_plays_the_decoy_sees_it_fail_and_corrects_it(executor, tmp_path):
    task = load_task(_with_decoy(tmp_path, OBVIOUS))
    env = RepoEnvironment(executor=executor)
    episode = run_episode(env, task, OraclePolicy(task))
    env.close_workspace()
    tools = [r.tool for r in episode.log]
    runs = [r.data["status"] for r in episode.log if r.tool == "run_tests"]
    assert episode.resolved and episode.format_errors == 0 and all(r.ok for r in episode.log)
    assert runs == ["failed", "failed", "passed"]  # before, after the obvious fix, after the correction
    first_edit = next(r for r in episode.log if r.tool == "edit")
    assert OBVIOUS.splitlines()[1] in first_edit.args["new"]
    assert tools.index("edit") < [i for i, t in enumerate(tools) if t == "run_tests"][1]


def test_validation_refuses_a_decoy_that_solves_the_task_or_that_no_visible_test_refutes(executor, tmp_path):
    gold = load_task(SUITE / "multiround-version-compare").gold_files()["releases/versions.py"]
    (good,) = validate_tasks([load_task(_with_decoy(tmp_path / "a", OBVIOUS))], executor)
    (solving,) = validate_tasks([load_task(_with_decoy(tmp_path / "b", gold + "\n"))], executor)
    assert good.ok, good.problems
    assert "the decoy patch solves the task" in solving.problems
    assert any("no visible test fails with the decoy patch" in p for p in solving.problems)
    folder = _with_decoy(tmp_path / "c", OBVIOUS)
    (folder / "decoy.patch").write_text((folder / "decoy.patch").read_text().replace("-", "+", 3))
    (broken,) = validate_tasks([load_task(folder)], executor)
    assert any(p.startswith("the decoy patch does not apply") for p in broken.problems)


def test_reference_trajectories_vary_with_the_seed_and_the_task():
    tasks = load_tasks(SUITE)
    paths = {task.id: {tuple((c.tool, c.args.get("path", "")) for c in plan_episode(task, random.Random(f"{seed}:{task.id}")))
                       for seed in range(6)} for task in tasks}
    varied = [task_id for task_id, seen in paths.items() if len(seen) > 1]
    assert len(varied) >= len(tasks) // 2, paths  # most tasks are played along more than one path
    assert plan_episode(tasks[0], random.Random(1)) == plan_episode(tasks[0], random.Random(1))  # and reproducibly


def test_imitate_fraction_plays_that_share_of_tasks_and_submits_the_rest():
    ids = [f"task-{i}" for i in range(2000)]
    share = sum(imitated(i, 0, 0.25) for i in ids) / len(ids)
    # a hash picks each task with probability 0.25: the share of 2000 has a standard error of
    # sqrt(0.25 * 0.75 / 2000) ~ 0.0097, so 0.25 +- 0.04 is a four-sigma band
    assert abs(share - 0.25) < 0.04
    assert all(imitated(i, 0, 1.0) for i in ids) and not any(imitated(i, 0, 0.0) for i in ids)
    task = load_task(SUITE / "bugfix-median-even")
    oracle = build_oracle(OracleConfig(imitate_fraction=0.0), task=task)
    skipped = [oracle.act(""), oracle.act("")]  # submits, and would submit again
    assert all('"submit"' in a and "not imitated" in a for a in skipped)
    with pytest.raises(ValueError, match="imitate_fraction must be between 0 and 1"):
        OracleConfig(imitate_fraction=1.5)
