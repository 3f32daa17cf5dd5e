"""SWE-bench-style instances as the field writes them: setup, env, test command and timeout per
instance, SWE-bench's judging rule, and real instances from public repositories' bug-fix commits.

The real instances (``data/swebench``, rebuilt by ``data/swebench/build_instances.py``):

- ``python-humanize__humanize-b1ee687`` and ``-33005e5``: a src-layout package whose ``__init__``
  reads its own installed version (``importlib.metadata.version("humanize")``), so nothing imports
  until the setup command installs it (``pip install --no-deps --no-build-isolation -e .``);
  ``tests/test_time.py`` and ``tests/test_i18n.py`` need ``freezegun``, which is not installed, and
  fail before and after the fix.
- ``tkem__cachetools-57d2e48``: a src-layout package run from its source folder (``PYTHONPATH=src``).

Every execution, setup included, runs in the sandbox: repository code never runs on the host.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
from pathlib import Path

import pytest
from codemoe.sandbox import LocalExecutor
from codemoe.sandbox.agent import (
    RepoEnvironment,
    TaskFormatError,
    ToolCall,
    load_swebench_jsonl,
    load_task,
    make_patch,
    validate_tasks,
)
from codemoe.sandbox.agent.cli import add_tasks_command
from codemoe.sandbox.agent.environment import grading_request
from codemoe.sandbox.agent.task_setup import PLUGIN, PLUGIN_FILE
from codemoe.sandbox.api import Limits

DATA = Path(__file__).resolve().parent / "data" / "swebench"
INSTANCES = DATA / "instances.jsonl"
SITE_PACKAGES = ["pytest", "pip", "setuptools"]  # the sandbox shows the build backend the setup installs with
INSTALL = "python -m pip install --no-deps --no-build-isolation -e ."
UNRELATED = ["tests/test_i18n.py", "tests/test_time.py"]  # humanize's modules that need freezegun


@pytest.fixture(scope="module")
def build_executor():
    with LocalExecutor(workers=2, site_packages=SITE_PACKAGES) as ex:
        yield ex


@pytest.fixture(scope="module")
def real_tasks(tmp_path_factory):
    tasks = load_swebench_jsonl(INSTANCES, DATA / "repos", tmp_path_factory.mktemp("checkouts"))
    return {task.id: task for task in tasks}


def _lines() -> list[dict]:
    return [json.loads(line) for line in INSTANCES.read_text().splitlines()]


# ---------------------------------------------------------------------------------------------
# the real instances
# ---------------------------------------------------------------------------------------------


def test_bundles_are_small_and_name_their_upstream_commits(real_tasks):
    assert sorted(real_tasks) == ["python-humanize__humanize-33005e5", "python-humanize__humanize-b1ee687",
                                  "tkem__cachetools-57d2e48"]
    for bundle in (DATA / "repos").glob("*.bundle"):
        assert bundle.stat().st_size < 100 * 1024, bundle
    humanize = real_tasks["python-humanize__humanize-b1ee687"]
    assert humanize.repo_files()["src/humanize/__init__.py"].count("importlib_metadata.version(__name__)") == 1
    assert "if value != 0 else 0" not in humanize.repo_files()["src/humanize/number.py"]  # the base: before the fix
    assert humanize.setup == [INSTALL] and humanize.test_command == ["python", "-m", "pytest", "-q", "tests"]
    assert real_tasks["tkem__cachetools-57d2e48"].env == {"PYTHONPATH": "src"}
    line = next(i for i in _lines() if i["instance_id"] == "tkem__cachetools-57d2e48")
    assert f"at {line['upstream_base_commit']}" in subprocess.run(
        ["git", "-C", str(real_tasks["tkem__cachetools-57d2e48"].repo.parent / "_bundles" / "tkem__cachetools.git"),
         "log", "-1", "--format=%s", line["base_commit"]], capture_output=True, text=True, check=True).stdout


def test_real_instances_validate_gold_resolves_base_does_not(real_tasks, build_executor):
    reports = validate_tasks(list(real_tasks.values()), build_executor)
    assert [(r.task_id, r.problems) for r in reports if not r.ok] == []
    for report in reports:
        task = real_tasks[report.task_id]
        assert all(report.tests_after[t] == "passed" for t in [*task.fail_to_pass, *task.pass_to_pass])
        assert all(report.tests_before.get(t) != "passed" for t in task.fail_to_pass)
        # the unrelated modules fail on both sides: reported, not judged (old rule: the instance was invalid)
        expected = UNRELATED if report.task_id.startswith("python-humanize") else []
        assert [w.split(" ", 1)[0] for w in report.warnings] == expected
        assert all("fails before and after the gold patch" in w for w in report.warnings)


def test_gold_resolves_and_base_does_not_in_an_episode(real_tasks, build_executor):
    task = real_tasks["python-humanize__humanize-b1ee687"]
    with RepoEnvironment(executor=build_executor) as env:
        env.reset(task)
        tests = env.step(ToolCall("run_tests", {"targets": ["tests/test_number.py"]}))
        assert tests.observation.startswith("status: passed")  # the setup installed the package first
        env.step(ToolCall("submit"))
        assert env.episode.resolved is False
        env.reset(task)
        fixed = task.gold_files()["src/humanize/number.py"]
        env.step(ToolCall("write_file", {"path": "src/humanize/number.py", "content": fixed}))
        env.step(ToolCall("submit"))
        assert env.episode.resolved is True  # although tests/test_time.py still errors (not judged)
        assert env.episode.hidden_after["tests/test_number.py::test_metric[[0]-0.00]"] == "passed"


def test_without_its_setup_the_package_that_reads_its_version_does_not_import(real_tasks, build_executor):
    # on the path but not installed: humanize/__init__.py's importlib.metadata.version("humanize") raises
    task = dataclasses.replace(real_tasks["python-humanize__humanize-b1ee687"], setup=[], env={"PYTHONPATH": "src"})
    limits = Limits(timeout_s=task.timeout_s, cpu_s=task.timeout_s)
    result = build_executor.run(grading_request(task, task.gold_files(), limits, "gold"))
    assert result.tests["tests/test_number.py"] == "error"
    assert result.reason.endswith("PackageNotFoundError: No package metadata was found for humanize")
    (report,) = validate_tasks([task], build_executor)
    assert "fail_to_pass tests/test_number.py::test_metric[[0]-0.00] is missing with the gold patch" in report.problems


def test_a_failing_setup_command_is_an_error_naming_the_instance_and_the_command(real_tasks, build_executor):
    command = "python -m pip install --no-deps --no-build-isolation -e ./not-here"
    broken = dataclasses.replace(real_tasks["tkem__cachetools-57d2e48"], setup=[command])
    (report,) = validate_tasks([broken], build_executor)
    (problem,) = report.problems
    assert problem.startswith(f"tkem__cachetools-57d2e48: task setup failed: {command!r} exited with status 1")
    assert problem.endswith("(before the gold patch)") and "not-here" in problem


def test_a_build_backend_the_sandbox_hides_is_named_with_the_way_to_show_it(real_tasks, executor):
    (report,) = validate_tasks([real_tasks["python-humanize__humanize-b1ee687"]], executor)  # pytest, pip, numpy only
    (problem,) = report.problems
    assert f"task setup failed: {INSTALL!r} exited with status 1" in problem
    assert "ModuleNotFoundError: No module named 'setuptools'" in problem and "--site-packages pytest,pip,setuptools" in problem


def test_the_timeout_bounds_setup_and_tests(real_tasks, build_executor):
    slow = dataclasses.replace(real_tasks["tkem__cachetools-57d2e48"], timeout_s=1.0,
                               setup=['python -c "import time; time.sleep(5)"'])
    request = grading_request(slow, slow.repo_files(), Limits(timeout_s=slow.timeout_s, cpu_s=1.0), "before")
    assert request.command[:2] == ["-p", PLUGIN] and PLUGIN_FILE in request.files
    (report,) = validate_tasks([slow], build_executor)
    assert any("status timeout" in p for p in report.problems), report.problems


# ---------------------------------------------------------------------------------------------
# the instance fields and SWE-bench's rule, on a small repository made here
# ---------------------------------------------------------------------------------------------


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def unrelated_failure(tmp_path) -> dict:
    """An instance over a repository with a test that fails before and after the fix (a missing
    dependency), in a src layout run with ``PYTHONPATH=src``."""
    repo = tmp_path / "repos" / "acme__calc"
    base_files = {
        "src/calc/__init__.py": "def sub(a, b):\n    return a + b\n",
        "tests/test_calc.py": "from calc import sub\n\n\ndef test_zero():\n    assert sub(0, 0) == 0\n",
        "tests/test_plot.py": "import not_installed_here\n\n\ndef test_plot():\n    pass\n",
    }
    for path, text in base_files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "base")
    tests_after = {"tests/test_calc.py": base_files["tests/test_calc.py"] + "\n\ndef test_sub():\n    assert sub(5, 3) == 2\n"}
    return {
        "instance_id": "acme__calc-2",
        "repo": "acme/calc",
        "base_commit": _git(repo, "rev-parse", "HEAD"),
        "problem_statement": "sub() adds.",
        "patch": make_patch(base_files, {**base_files, "src/calc/__init__.py": "def sub(a, b):\n    return a - b\n"}),
        "test_patch": make_patch(base_files, {**base_files, **tests_after}),
        "FAIL_TO_PASS": ["tests/test_calc.py::test_sub"],
        "PASS_TO_PASS": ["tests/test_calc.py::test_zero"],
        "env": {"PYTHONPATH": "src"},
        "test_command": "python -m pytest -q tests",
        "timeout_s": 20,
    }


def _write(tmp_path: Path, *instances: dict) -> Path:
    path = tmp_path / "instances.jsonl"
    path.write_text("".join(json.dumps(i) + "\n" for i in instances))
    return path


def test_only_fail_to_pass_and_pass_to_pass_are_judged(tmp_path, unrelated_failure, executor):
    (task,) = load_swebench_jsonl(_write(tmp_path, unrelated_failure), tmp_path / "repos")
    assert (task.judged_tests, task.timeout_s, task.test_command) == ("listed", 20.0, ["python", "-m", "pytest", "-q", "tests"])
    (report,) = validate_tasks([task], executor)
    assert report.problems == []
    assert report.warnings == ["tests/test_plot.py fails before and after the gold patch (error -> error); "
                               "not judged: not in fail_to_pass or pass_to_pass"]
    strict = dataclasses.replace(task, judged_tests="all")  # the task folders' rule refuses it
    (report,) = validate_tasks([strict], executor)
    assert "visible tests/test_plot.py is error with the gold patch" in report.problems


def test_tasks_validate_prints_warnings_and_takes_site_packages(tmp_path, unrelated_failure, capsys):
    parser = argparse.ArgumentParser(prog="codemoe")
    add_tasks_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["tasks", "validate", str(_write(tmp_path, unrelated_failure)), "--workers", "1",
                              "--site-packages", "pytest, pip", "--json"])
    assert args.handler(args) == 0
    (report,) = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["warnings"][0].startswith("tests/test_plot.py fails before and after")


def test_instance_defaults_are_todays_and_bad_fields_name_the_instance(tmp_path, unrelated_failure):
    plain = {k: v for k, v in unrelated_failure.items() if k not in ("env", "test_command", "timeout_s")}
    (task,) = load_swebench_jsonl(_write(tmp_path, plain), tmp_path / "repos")
    assert (task.setup, task.env, task.timeout_s) == ([], {}, 30.0)
    assert task.test_command == ["python", "-m", "pytest", "-q", "."]
    assert task.setup_args() == [] and task.setup_files() == {}  # nothing extra in a run without setup
    for key, value, message in (("setup", 5, "setup must be a shell command or a list of them"),
                                ("timeout_s", -1, "timeout_s must be a number of seconds"),
                                ("env", {"PYTHONPATH": 1}, "env must map variable names to strings"),
                                ("judged_tests", "some", "judged_tests must be one of all, listed")):
        path = _write(tmp_path, {**plain, key: value})
        with pytest.raises(TaskFormatError, match=rf"instances.jsonl:1 \(acme__calc-2\): {message}"):
            load_swebench_jsonl(path, tmp_path / "repos")


def test_a_task_folder_takes_setup_and_env(tmp_path):
    folder = tmp_path / "task"
    for part in ("repo/src/calc", "hidden_tests"):
        (folder / part).mkdir(parents=True)
    (folder / "gold.patch").write_text("")
    (folder / "task.yaml").write_text(
        "id: t\ntype: test-driven-bug-fix\nstatement: s\ntest_command: python -m pytest -q\n"
        "fail_to_pass: [hidden_tests/test_x.py::test_x]\nsetup: pip install --no-deps -e .\nenv: {PYTHONPATH: src}\n")
    task = load_task(folder)
    assert (task.setup, task.env, task.judged_tests) == (["pip install --no-deps -e ."], {"PYTHONPATH": "src"}, "all")
    assert json.loads(task.execution_env()["CODEMOE_TASK_SETUP"]) == ["pip install --no-deps -e ."]
