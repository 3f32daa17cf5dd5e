"""Task format, loaders (folders and SWE-bench JSONL), patches, and ``tasks validate``."""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from codemoe.sandbox.agent import (
    TASK_TYPES,
    PatchError,
    TaskFormatError,
    apply_patch,
    load_swebench_jsonl,
    load_task,
    load_tasks,
    make_patch,
    validate_tasks,
)
from codemoe.sandbox.agent.cli import add_tasks_command
from codemoe.sandbox.agent.environment import grading_request
from codemoe.sandbox.api import ExecutionRequest, Limits

SUITE = Path(__file__).resolve().parents[3] / "registry" / "suites" / "agentic-core"


# ---------------------------------------------------------------------------------------------
# patches
# ---------------------------------------------------------------------------------------------


def test_make_and_apply_patch_round_trip():
    before = {"a.py": "x = 1\ny = 2\nz = 3\n", "gone.py": "old\n", "same.py": "s\n"}
    after = {"a.py": "x = 1\ny = 20\nz = 3\nw = 4\n", "new/b.py": "b\n", "same.py": "s\n"}
    patch = make_patch(before, after)
    assert "--- a/a.py\n+++ b/a.py\n" in patch and "--- /dev/null\n+++ b/new/b.py\n" in patch
    assert "+++ /dev/null" in patch and "same.py" not in patch
    assert apply_patch(before, patch) == after


def test_patch_that_does_not_match_exactly_is_refused():
    patch = make_patch({"a.py": "x = 1\n"}, {"a.py": "x = 2\n"})
    with pytest.raises(PatchError, match="does not apply at line 1"):
        apply_patch({"a.py": "x = 9\n"}, patch)
    with pytest.raises(PatchError, match="does not exist"):
        apply_patch({}, patch)
    with pytest.raises(PatchError, match="no file changes"):
        apply_patch({"a.py": ""}, "just words\n")


# ---------------------------------------------------------------------------------------------
# the folder format
# ---------------------------------------------------------------------------------------------


def test_suite_has_twenty_tasks_two_of_each_type():
    tasks = load_tasks(SUITE)
    assert len(tasks) >= 20
    counts = collections.Counter(task.type for task in tasks)
    assert set(counts) == set(TASK_TYPES)
    assert min(counts.values()) >= 2
    assert len({task.id for task in tasks}) == len(tasks)
    for task in tasks:
        assert Path(task.source).name == task.id
        assert task.fail_to_pass and task.hidden_files and "tests/*" in task.readonly
        assert not any(path.startswith("hidden_tests/") for path in task.repo_files())
    clarify = [t for t in tasks if t.type == "clarification-needed"]
    assert all(t.clarification for t in clarify)


def test_loader_names_the_problem(tmp_path):
    folder = tmp_path / "t1"
    shutil.copytree(SUITE / "bugfix-median-even", folder)
    spec = folder / "task.yaml"
    spec.write_text(spec.read_text().replace("type: test-driven-bug-fix", "type: bug"))
    with pytest.raises(TaskFormatError, match="type 'bug' is not one of"):
        load_task(folder)
    spec.write_text("id: x\nstatement: s\nsurprise: 1\n")
    with pytest.raises(TaskFormatError, match=r"missing keys \['type', 'test_command', 'fail_to_pass'\], unknown keys \['surprise'\]"):
        load_task(folder)
    with pytest.raises(TaskFormatError, match="neither a task folder"):
        load_tasks(tmp_path / "nothing")


# ---------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_every_suite_task_validates(executor):
    reports = validate_tasks(load_tasks(SUITE), executor)
    assert [(r.task_id, r.problems) for r in reports if not r.ok] == []
    assert len(reports) >= 20


def _broken_task(tmp_path: Path) -> Path:
    folder = tmp_path / "broken"
    shutil.copytree(SUITE / "bugfix-median-even", folder)
    # a gold patch that fixes nothing: the fail_to_pass test still fails, the hidden tests too
    (folder / "gold.patch").write_text(make_patch({"stats/__init__.py": (folder / "repo/stats/__init__.py").read_text()},
                                                  {"stats/__init__.py": (folder / "repo/stats/__init__.py").read_text() + "\n"}))
    return folder


def test_validation_catches_a_gold_patch_that_does_not_solve(executor, tmp_path):
    (report,) = validate_tasks([load_task(_broken_task(tmp_path))], executor)
    assert not report.ok
    assert "fail_to_pass tests/test_stats.py::test_median_even_length is failed with the gold patch" in report.problems
    assert "hidden hidden_tests/test_median_hidden.py::test_two_values is failed with the gold patch" in report.problems


def test_validation_catches_a_patch_that_does_not_apply(executor, tmp_path):
    folder = _broken_task(tmp_path)
    (folder / "gold.patch").write_text(make_patch({"stats/core.py": "nothing like it\n"}, {"stats/core.py": "x\n"}))
    (report,) = validate_tasks([load_task(folder)], executor)
    assert len(report.problems) == 1 and report.problems[0].startswith("the gold patch does not apply")


def _cli(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="codemoe")
    add_tasks_command(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def test_tasks_validate_command(tmp_path, capsys):
    good = tmp_path / "suite"
    shutil.copytree(SUITE / "multiround-version-compare", good / "multiround-version-compare")
    args = _cli(["tasks", "validate", str(good), "--workers", "1"])
    assert args.handler(args) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "1/1 tasks valid"
    args = _cli(["tasks", "validate", str(_broken_task(tmp_path)), "--json", "--workers", "1"])
    assert args.handler(args) == 1
    (report,) = json.loads(capsys.readouterr().out)
    assert report["task"] == "bugfix-median-even" and not report["ok"]


# ---------------------------------------------------------------------------------------------
# SWE-bench instances with a local repository
# ---------------------------------------------------------------------------------------------


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def swebench_file(tmp_path) -> Path:
    """A one-instance JSONL over a git repository under ``repos/acme__calc`` with a later unrelated commit."""
    repo = tmp_path / "repos" / "acme__calc"
    (repo / "calc").mkdir(parents=True)
    (repo / "tests").mkdir()
    base_files = {
        "pyproject.toml": '[tool.pytest.ini_options]\npythonpath = ["."]\n',
        "calc/__init__.py": "",
        "calc/ops.py": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a + b\n",
        "tests/test_ops.py": "from calc.ops import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
    }
    for path, text in base_files.items():
        (repo / path).write_text(text)
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "base")
    base = _git(repo, "rev-parse", "HEAD")
    (repo / "calc" / "ops.py").write_text("# later history the task must not see\n")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "later")
    fixed = dict(base_files, **{"calc/ops.py": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"})
    tests_after = dict(base_files, **{"tests/test_ops.py": base_files["tests/test_ops.py"].replace(
        "import add", "import add, sub") + "\n\ndef test_sub():\n    assert sub(5, 3) == 2\n"})
    instance = {
        "instance_id": "acme__calc-1",
        "repo": "acme/calc",
        "base_commit": base,
        "problem_statement": "sub() adds instead of subtracting.",
        "patch": make_patch(base_files, fixed),
        "test_patch": make_patch(base_files, tests_after),
        "FAIL_TO_PASS": json.dumps(["tests/test_ops.py::test_sub"]),
        "PASS_TO_PASS": json.dumps(["tests/test_ops.py::test_add"]),
        "hints_text": "",
    }
    path = tmp_path / "instances.jsonl"
    path.write_text(json.dumps(instance) + "\n")
    return path


def test_swebench_instance_loads_at_its_base_commit_and_validates(swebench_file, executor):
    (task,) = load_tasks(swebench_file)
    assert (task.id, task.type, task.statement) == ("acme__calc-1", "swe-bench", "sub() adds instead of subtracting.")
    assert "def sub" in task.repo_files()["calc/ops.py"]  # the base commit, not the later one
    assert task.hidden_targets == ["tests/test_ops.py"] and "test_sub" in task.hidden_files["tests/test_ops.py"]
    assert "test_sub" not in task.repo_files()["tests/test_ops.py"]
    assert task.clarification is None
    (report,) = validate_tasks([task], executor)
    assert report.problems == []
    assert report.tests_before["tests/test_ops.py::test_add"] == "passed"


def test_swebench_errors_name_the_line(swebench_file, tmp_path):
    with pytest.raises(TaskFormatError, match=r"repository 'acme/calc' not found under"):
        load_swebench_jsonl(swebench_file, tmp_path / "elsewhere")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n" + '{"instance_id": "x"}\n')
    with pytest.raises(TaskFormatError, match=r"bad.jsonl:2: KeyError"):
        load_swebench_jsonl(bad, tmp_path / "repos")


# ---------------------------------------------------------------------------------------------
# the task types do what their names promise
# ---------------------------------------------------------------------------------------------


def _grade(executor, task, files):
    return executor.run(grading_request(task, files, Limits(timeout_s=30, cpu_s=30), "probe")).tests


def test_multi_round_task_obvious_fix_breaks_another_test(executor):
    task = load_task(SUITE / "multiround-version-compare")
    obvious = "def is_newer(candidate, current):\n    return tuple(map(int, candidate.split('.'))) > tuple(map(int, current.split('.')))\n"
    tests = _grade(executor, task, {**task.repo_files(), "releases/versions.py": obvious})
    assert tests["tests/test_versions.py::test_numeric_components"] == "passed"
    assert tests["tests/test_versions.py::test_prerelease_of_next_major"] == "failed"


def test_debugging_task_needs_several_runs(executor):
    task = load_task(SUITE / "debug-inventory-restock")
    files = task.repo_files()
    first_fix = {**files, "inventory/stock.py": task.gold_files()["inventory/stock.py"]}  # the first of three bugs
    before = executor.run(_probe(task, files)).stdout
    after_first = executor.run(_probe(task, first_fix)).stdout
    assert "assert 5 == 15" in before
    assert "assert 5 == 15" not in after_first and "assert ['apple', 'plum'] == ['plum']" in after_first


def _probe(task, files):
    return ExecutionRequest(files=files, command=["tests/test_inventory.py::test_restock_cycle"], runner="pytest",
                            limits=Limits(timeout_s=30, cpu_s=30))
