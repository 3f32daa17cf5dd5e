"""The agent's tools: behaviour, confinement to the workspace, hidden tests out of reach, shell quoting."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from codemoe.sandbox.agent import RepoEnvironment, ToolCall, load_task

SUITE = Path(__file__).resolve().parents[3] / "registry" / "suites" / "agentic-core"
HIDDEN_MARKER = "test_even_unsorted_floats"  # a name only the hidden tests of bugfix-median-even contain


@pytest.fixture(scope="module")
def task():
    return load_task(SUITE / "bugfix-median-even")


@pytest.fixture
def env(executor, task):
    environment = RepoEnvironment(executor=executor)
    environment.reset(task)
    yield environment
    environment.close_workspace()


def call(env, tool, **args):
    """Step with a tool call; returns (observation, step record)."""
    result = env.step(ToolCall(tool, args))
    return result.observation, env.episode.log[-1]


def test_list_and_read_with_line_range(env):
    listing, _ = call(env, "list_files")
    assert listing.splitlines() == ["pyproject.toml", "stats/__init__.py", "stats/core.py", "tests/test_stats.py"]
    text, record = call(env, "read_file", path="stats/core.py", start=13, end=14)
    assert record.ok
    assert text.splitlines() == ["   13|     if not values:", '   14|         raise ValueError("median of an empty sequence")']


def test_long_files_are_read_in_pages(env):
    call(env, "write_file", path="big.txt", content="".join(f"line {n}\n" for n in range(1, 1001)))
    text, record = call(env, "read_file", path="big.txt")
    lines = text.splitlines()
    assert record.ok and record.data["lines"] == 1000 and len(lines) == 401
    assert lines[-2] == "  400| line 400" and lines[-1] == "... 600 more lines: read from line 401"
    text, _ = call(env, "read_file", path="big.txt", start=999)
    assert text.splitlines() == ["  999| line 999", " 1000| line 1000"]


def test_search_plain_and_regex(env):
    text, _ = call(env, "search", pattern="def median")
    assert text == "stats/core.py:12: def median(values: Sequence[float]) -> float:"
    text, _ = call(env, "search", pattern=r"def (mean|median)\(", regex=True, path="stats")
    assert [line.split(":")[1] for line in text.splitlines()] == ["6", "12"]
    _, record = call(env, "search", pattern="(", regex=True)
    assert (record.ok, record.error_kind, record.format_error) == (False, "bad_pattern", False)


def test_edit_must_match_exactly_once(env):
    _, record = call(env, "edit", path="stats/core.py", old="return ordered[middle]", new="x")
    assert (record.ok, record.error_kind) == (False, "multiple_matches")
    _, record = call(env, "edit", path="stats/core.py", old="no such text", new="x")
    assert (record.ok, record.error_kind) == (False, "no_match")
    old = "        return ordered[middle]\n    return ordered[middle]\n"
    new = "        return ordered[middle]\n    return (ordered[middle - 1] + ordered[middle]) / 2\n"
    _, record = call(env, "edit", path="stats/core.py", old=old, new=new)
    assert record.ok
    assert (env.workspace.root / "stats/core.py").read_text().endswith(new)


def test_run_tests_reports_each_test(env):
    text, record = call(env, "run_tests")
    assert record.ok and record.data["status"] == "failed"
    assert "FAILED  tests/test_stats.py::test_median_even_length" in text
    assert "PASSED  tests/test_stats.py::test_mean" in text
    text, _ = call(env, "run_tests", targets=["tests/test_stats.py::test_mean"])
    assert text.splitlines() == ["status: passed (1 passed)", "PASSED  tests/test_stats.py::test_mean"]


def test_run_tests_takes_a_file_named_like_an_option_as_a_path_not_a_plugin(env):
    plugin = ("import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
              "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n")
    _, record = call(env, "write_file", path="-pevil.py", content=plugin)
    assert record.ok
    text, record = call(env, "run_tests", targets=["-pevil.py", "tests/test_stats.py"])
    assert record.ok and record.data["status"] == "failed"
    assert "FAILED  tests/test_stats.py::test_median_even_length" in text


def test_read_only_files_behave_like_production(env):
    text, record = call(env, "write_file", path="tests/test_stats.py", content="")
    assert (record.ok, record.error_kind) == (False, "permission_denied")
    assert "Permission denied: 'tests/test_stats.py'" in text
    _, record = call(env, "edit", path="tests/test_stats.py", old="def test_mean", new="def test_x")
    assert record.error_kind == "permission_denied"
    _, record = call(env, "write_file", path="stats/new.py", content="X = 1\n")
    assert record.ok and (env.workspace.root / "stats/new.py").read_text() == "X = 1\n"


def test_clarification_without_one(env):
    text, record = call(env, "ask_clarification", question="Which median?")
    assert record.ok and text.startswith("No further information")


# ---------------------------------------------------------------------------------------------
# hidden tests are unreachable
# ---------------------------------------------------------------------------------------------


def _hidden_dir(task) -> Path:
    return Path(task.source) / "hidden_tests"


@pytest.mark.parametrize(
    "path",
    [
        "../hidden_tests/test_median_hidden.py",
        "../../agentic-core/bugfix-median-even/hidden_tests/test_median_hidden.py",
        "stats/../../hidden_tests/test_median_hidden.py",
        "hidden_tests/test_median_hidden.py",
        "/etc/passwd",
        "~/.bashrc",
    ],
)
def test_path_tricks_fail_for_every_file_tool(env, task, path):
    absolute = str(_hidden_dir(task) / "test_median_hidden.py")
    for target in (path, absolute):
        for tool, args in (("read_file", {"path": target}), ("list_files", {"path": target}),
                           ("search", {"pattern": "def", "path": target}),
                           ("write_file", {"path": target, "content": "x"})):
            text, record = call(env, tool, **args)
            assert not record.ok, (tool, target, text)
            assert record.error_kind in ("denied", "not_found") and not record.format_error
            assert HIDDEN_MARKER not in text


@pytest.mark.parametrize(
    "path",
    [
        "cinema/" + "o" * 5000,  # a policy that loops on one token: one component far above NAME_MAX
        "/".join(["abc"] * 600),  # short components, far too long in all
        "stats/__init__.py/inner.py",  # a file where a folder must be
        "loop/x.py",  # a symlink to itself
    ],
)
def test_paths_the_filesystem_refuses_are_tool_errors_and_the_episode_goes_on(env, path):
    os.symlink("loop", env.workspace.root / "loop")
    for tool, args in (("read_file", {"path": path}), ("list_files", {"path": path}),
                       ("search", {"pattern": "def", "path": path}),
                       ("write_file", {"path": path, "content": "x"}),
                       ("edit", {"path": path, "old": "a", "new": "b"})):
        text, record = call(env, tool, **args)
        assert not record.ok and not record.format_error, (tool, path, text)
        assert record.error_kind in ("invalid_path", "not_found", "os_error", "is_dir"), (tool, record.error_kind)
        assert len(record.message) < 400  # the message names the path without echoing 5000 characters
    assert not env.episode.done
    text, record = call(env, "read_file", path="stats/__init__.py")
    assert record.ok, text
    text, record = call(env, "list_files")  # the loop is in the listing's way
    assert record.ok and "stats/__init__.py" in text and "loop" not in text


def test_symlinks_out_of_the_workspace_are_dead_ends(env, task):
    root = env.workspace.root
    os.symlink(_hidden_dir(task), root / "leak")
    os.symlink(_hidden_dir(task) / "test_median_hidden.py", root / "stats" / "leak.py")
    for path in ("leak/test_median_hidden.py", "stats/leak.py", "leak"):
        _, record = call(env, "read_file", path=path)
        assert (record.ok, record.error_kind) == (False, "denied")
    listing, _ = call(env, "list_files")
    assert "leak" not in listing
    text, _ = call(env, "search", pattern=HIDDEN_MARKER)
    assert text == "no matches"
    text, _ = call(env, "shell", command="cat", args=["stats/leak.py"])
    assert HIDDEN_MARKER not in text and "exit code: 0" not in text


def test_shell_cannot_reach_hidden_tests(env, task):
    hidden = str(_hidden_dir(task))
    attempts = [
        ("cat", [hidden + "/test_median_hidden.py"]),
        ("cat", ["../hidden_tests/test_median_hidden.py"]),
        ("grep", ["-r", HIDDEN_MARKER, "/"]),
        ("grep", ["-r", HIDDEN_MARKER, "--include=../*", "."]),
        ("find", ["/", "-name", "test_median_hidden.py"]),
        ("ls", ["~"]),
        ("grep", ["-rn", HIDDEN_MARKER, "."]),
        ("find", [".", "-name", "*hidden*"]),
    ]
    for command, args in attempts:
        text, record = call(env, "shell", command=command, args=args)
        output = text.split("\n", 2)[2] if text.count("\n") >= 2 else ""  # after the command echo and exit code
        assert HIDDEN_MARKER not in output and "test_median_hidden" not in output, (command, args, text)
        assert record.error_kind == "denied" or record.data["exit_code"] != 0 or output == "", (command, args, text)


def test_shell_allow_list(env):
    text, record = call(env, "shell", command="bash", args=["-c", "cat /etc/passwd"])
    assert (record.ok, record.error_kind) == (False, "not_allowed")
    assert text.startswith("error (not_allowed): 'bash' is not allowed; allowed commands: cat, diff, echo")
    _, record = call(env, "shell", command="rm", args=["-rf", "."])
    assert record.error_kind == "not_allowed"
    assert (env.workspace.root / "stats" / "core.py").exists()


def test_shell_argument_with_spaces_quotes_and_semicolons_is_one_literal_argument(env):
    dangerous = """a b; rm -rf . && echo "pwned" 'q' $HOME `id` | cat > out.txt"""
    call(env, "write_file", path="show_args.py", content="import json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    text, record = call(env, "shell", command="python", args=["show_args.py", dangerous, "second"])
    assert record.ok and record.data["exit_code"] == 0
    assert json.loads(text.splitlines()[2]) == [dangerous, "second"]
    text, _ = call(env, "shell", command="echo", args=[dangerous])
    assert text.splitlines()[2] == dangerous
    assert sorted(p.name for p in env.workspace.root.iterdir()) == ["pyproject.toml", "show_args.py", "stats", "tests"]


def test_shell_changes_are_not_kept_and_pip_has_no_network(env):
    text, _ = call(env, "shell", command="python", args=["-m", "pip", "--version"])
    assert "exit code: 0" in text
    text, record = call(env, "shell", command="pip", args=["install", "--retries", "0", "--timeout", "3", "mdlite"])
    assert record.ok and record.data["exit_code"] not in (0, None)
    assert "mdlite" in text


# action texts a policy can emit that once raised out of step() (and so failed the episode, which the
# trainer masks out instead of penalising), froze every episode's thread, or broke the trajectory file
HOSTILE_ACTIONS = {
    "int over 4300 digits": '<tool_call>{"tool": "read_file", "args": {"path": "stats/core.py", "start": '
                            + "9" * 5000 + "}}</tool_call>",
    "JSON nested past the stack": '<tool_call>{"tool": "submit", "args": {"summary": ' + "[" * 100_000
                                  + "]" * 100_000 + "}}</tool_call>",
    "repetition count overflowing": '<tool_call>{"tool": "search", "args": {"pattern": "a{99999999999}", "regex": true}}'
                                    "</tool_call>",
    "lone surrogate in a path": '<tool_call>{"tool": "write_file", "args": {"path": "x\\ud800.py", "content": "x"}}'
                                "</tool_call>",
    "a byte smuggled as a surrogate": '<tool_call>{"tool": "write_file", "args": {"path": "x\\udcff.txt", '
                                      '"content": "x"}}</tool_call>',
    "lone surrogate in content": '<tool_call>{"tool": "write_file", "args": {"path": "y.py", "content": "\\udc80"}}'
                                 "</tool_call>",
    "NUL in a shell argument": '<tool_call>{"tool": "shell", "args": {"command": "echo", "args": ["a\\u0000b"]}}'
                               "</tool_call>",
    "NUL in a test target": '<tool_call>{"tool": "run_tests", "args": {"targets": ["tests/test_stats.py::t\\u0000"]}}'
                            "</tool_call>",
    "surrogate in a question": '<tool_call>{"tool": "ask_clarification", "args": {"question": "\\ud800?"}}'
                               "</tool_call>",
    "raw surrogate outside the call": "\ud800 <tool_call>{}</tool_call>",
}


def test_no_action_text_raises_and_every_episode_is_graded_and_written(executor, task, tmp_path):
    """Each hostile action is an error observation (a format error where the call is malformed);
    the episode goes on, ends, is graded, and its trajectory line reads back as one record, text
    with line separators (U+2028, U+0085) included."""
    from codemoe.sandbox.agent import RepoEnvironmentConfig
    from codemoe.sandbox.agent.trajectory import read_trajectories

    path = tmp_path / "t.jsonl"
    environment = RepoEnvironment(RepoEnvironmentConfig(trajectory_path=str(path), step_budget=len(HOSTILE_ACTIONS) + 2),
                                  executor=executor)
    environment.reset(task)
    for name, text in HOSTILE_ACTIONS.items():
        result = environment.step(text)
        record = environment.episode.log[-1]
        assert not record.ok and result.observation.startswith("error ("), (name, result.observation)
    result = environment.step(ToolCall("submit", {"summary": "line\u2028separated\u0085and\u2029more"}))
    assert result.done and environment.episode.hidden_after  # graded
    environment.close_workspace()
    records = read_trajectories(path)
    assert len(records) == 1 and records[0]["summary"] == "line\u2028separated\u0085and\u2029more"
    raw = path.read_bytes()
    raw.decode("utf-8")  # valid UTF-8 whatever the text held
    assert raw.count(b"\n") == 1


def test_a_pattern_that_backtracks_exponentially_is_stopped_in_its_time(env):
    """The pattern runs on the host: it gets ``SEARCH_SECONDS`` in all, not hours."""
    import time

    from codemoe.sandbox.agent.tools import SEARCH_SECONDS

    call(env, "write_file", path="redos.txt", content="a" * 60 + "!\n")
    start = time.monotonic()
    text, record = call(env, "search", pattern="^(a|aa)+$", regex=True, path="redos.txt")
    assert (record.ok, record.error_kind) == (False, "timeout"), text
    # the library checks its clock every so often: a loaded machine overruns the limit by a few seconds, not hours
    assert time.monotonic() - start < SEARCH_SECONDS + 30
