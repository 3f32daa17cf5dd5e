"""Executions cannot see the host's files: the caller's checkout, its registry (hidden tests),
the caller's working directory, deployment-named directories; the interpreter and pytest still work.
"""

from __future__ import annotations

import ast
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from codemoe.sandbox import ExecutionRequest, LocalExecutor
from codemoe.sandbox.agent import RepoEnvironment, ToolCall, load_task
from codemoe.sandbox.doctor import diagnose
from codemoe.sandbox.isolation import checkout_root, interpreter_paths, probe

ROOT = Path(__file__).resolve().parents[3]
HIDDEN_TEST = ROOT / "registry/suites/agentic-core/bugfix-median-even/hidden_tests/test_median_hidden.py"

PEEK = """
import os, sys
for path in sys.argv[1:]:
    try:
        if os.path.isdir(path):
            print(path, "listed", sorted(os.listdir(path)))
        else:
            print(path, "read", open(path).read()[:40].replace("\\n", " "))
    except OSError as exc:
        print(path, type(exc).__name__)
"""


def _peek(executor, *paths: str) -> dict[str, str]:
    """What an execution sees at each path: 'read ...', 'listed [...]' or the error's name."""
    result = executor.run(ExecutionRequest(files={"peek.py": PEEK}, command=["python", "peek.py", *paths]))
    assert result.status == "passed", result.stderr
    return dict(line.split(" ", 1) for line in result.stdout.splitlines())


def _leading(folder: Path) -> set[str]:
    """The entries of ``folder`` on the way to the interpreter's paths inside it (wherever it lies)."""
    inside = (Path(p) for p in interpreter_paths())
    return {p.relative_to(folder).parts[0] for p in inside if folder in p.parents}


def test_the_checkout_its_registry_and_the_callers_cwd_are_invisible(executor):
    assert checkout_root() == str(ROOT)
    cwd_file = next(e.path for e in os.scandir(os.getcwd()) if e.is_file())
    assert HIDDEN_TEST.is_file() and os.path.isfile(cwd_file)  # there on the host
    seen = _peek(executor, str(HIDDEN_TEST), cwd_file, str(ROOT / "registry"), str(ROOT), "/opt")
    assert seen[str(HIDDEN_TEST)] == "FileNotFoundError"
    assert seen[cwd_file] == "FileNotFoundError"
    assert seen[str(ROOT / "registry")] == "FileNotFoundError"
    # the checkout root and other hidden dirs can be entered (the venv is inside) but not listed by
    # the execution's own user; as root of a user namespace it lists the folders leading to the
    # interpreter's paths, nothing else (a checkout under /tmp is not there at all: every execution
    # gets a fresh /tmp)
    leading = _leading(ROOT)
    assert leading and "registry" not in leading
    for path, visible in ((str(ROOT), leading), ("/opt", _leading(Path("/opt")))):
        listed = seen[path]
        if listed not in ("PermissionError", "FileNotFoundError"):
            assert set(ast.literal_eval(listed[len("listed "):])) <= visible, listed


def test_pytest_still_imports_in_a_fresh_interpreter_and_the_runner_works(executor):
    fresh = executor.run(ExecutionRequest(
        files={"test_one.py": "def test_one():\n    assert 1 + 1 == 2\n"},
        command=["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_one.py"]))
    assert fresh.status == "passed", fresh.stdout + fresh.stderr
    assert "1 passed" in fresh.stdout
    runner = executor.run(ExecutionRequest(files={"test_two.py": "def test_two():\n    assert [2] == [2]\n"},
                                           runner="pytest"))
    assert runner.status == "passed" and runner.tests == {"test_two.py::test_two": "passed"}, runner.reason


def test_agent_shell_cannot_open_the_hidden_test_by_absolute_path(executor):
    env = RepoEnvironment(executor=executor)
    try:
        env.reset(load_task(ROOT / "registry/suites/agentic-core/bugfix-median-even"))
        script = f"print(open({str(HIDDEN_TEST)!r}).read())\n"
        assert env.step(ToolCall("write_file", {"path": "peek.py", "content": script})).info.get("ok", True)
        observation = env.step(ToolCall("shell", {"command": "python", "args": ["peek.py"]})).observation
    finally:
        env.close_workspace()
    assert "FileNotFoundError" in observation, observation
    assert "def test_" not in observation and "from stats import" not in observation


@pytest.fixture
def host_dir():
    """A host folder outside /tmp (which every execution has a private one of)."""
    folder = Path(tempfile.mkdtemp(prefix="codemoe-hidden-", dir="/var/tmp"))
    folder.chmod(0o755)  # readable by the execution's own user
    for sub in ("shared", "secret", "cwd"):
        (folder / sub).mkdir()
        (folder / sub / "file.txt").write_text(f"{sub} content\n")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_expose_paths_and_hide_paths_layer_and_the_callers_cwd_wins(host_dir, monkeypatch):
    monkeypatch.chdir(host_dir / "cwd")
    files = [str(host_dir / sub / "file.txt") for sub in ("shared", "secret", "cwd")]
    with LocalExecutor(workers=1) as plain:
        before = _peek(plain, *files)
    (host_dir / "shared" / "key.txt").write_text("a key\n")
    hidden = [str(host_dir / "secret"), str(host_dir / "shared" / "key.txt")]
    with LocalExecutor(workers=1, expose_paths=[str(host_dir)], hide_paths=hidden) as ex:
        after = _peek(ex, *files, str(host_dir), hidden[1])
    # /var is hidden by default; exposing the folder shows it, except the hidden part and the cwd
    assert [before[f] for f in files] == ["FileNotFoundError"] * 3
    assert after[files[0]] == "read shared content "
    assert after[files[1]] == "FileNotFoundError" and after[files[2]] == "FileNotFoundError"
    assert after[hidden[1]] == "read "  # a hidden file reads empty
    listed = after[str(host_dir)]
    assert listed.startswith("listed ") and ast.literal_eval(listed[len("listed "):]) == ["cwd", "secret", "shared"]


def test_paths_that_hold_system_directories_are_refused_not_hidden():
    plan = probe(hide=["/", "/usr", "/tmp", "/no/such/dir"])
    assert plan.hidden_paths == []
    assert [r.split(" ")[0] for r in plan.refused] == ["/", "/no/such/dir", "/tmp", "/usr"]
    hiding = next(p for p in plan.protections if p.name == "hidden host files")
    assert hiding.active and "not hidden: /" in hiding.detail


def test_doctor_reports_hidden_host_files_and_checks_them_end_to_end():
    checks = {c.name: c for c in diagnose(live=True)}
    assert checks["hidden host files"].active, checks["hidden host files"].detail
    assert str(ROOT) in checks["hidden host files"].detail
    end_to_end = checks["end-to-end check"]
    assert end_to_end.active, end_to_end.detail
    assert "read 3 host files" in end_to_end.detail
    if checks["task files read-only"].active:  # and its own graded run could not open a task's test for writing
        assert "change a task's file in a graded pytest run" in end_to_end.detail
