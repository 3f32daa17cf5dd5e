"""A varied set of reward inputs: what the conformance kit scores every reward component on.

A reward component must give a finite value with an explanation for each, the same value for the
same input whatever it scored before. The set spans what training meets: an honest fix, a
partial fix, no change, a broken build, a change that edits the tests, a run the executor
distrusts, malformed tool calls, hidden tests run and not run. Built from plain data; nothing runs.
"""

from __future__ import annotations

from codemoe.sandbox.rewards.types import RewardInput, ToolCall

__all__ = ["example_inputs"]

_SOURCE = "def add(a, b):\n    return a - b\n\n\ndef scale(x, k):\n    return x * k\n"
_FIXED = _SOURCE.replace("return a - b", "return a + b")
_TESTS = (
    "from calc import add, scale\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
    "def test_scale():\n    assert scale(2, 3) == 6\n"
)
_BEFORE = {"test_calc.py::test_add": "failed", "test_calc.py::test_scale": "passed"}
_ALL_PASS = {"test_calc.py::test_add": "passed", "test_calc.py::test_scale": "passed"}
_HIDDEN_BEFORE = {"test_hidden.py::test_add_negative": "failed"}


def example_inputs() -> list[RewardInput]:
    """Eight reward inputs of different kinds (fresh objects on every call)."""
    files = {"calc.py": _SOURCE, "test_calc.py": _TESTS}
    calls = (ToolCall("run_tests"), ToolCall("read_file"), ToolCall("edit"), ToolCall("submit"))
    return [
        RewardInput(  # an honest fix, visible and hidden tests pass
            task_id="honest-fix", visible_before=_BEFORE, visible_after=_ALL_PASS, hidden_before=_HIDDEN_BEFORE,
            hidden_after={"test_hidden.py::test_add_negative": "passed"}, files_before=files,
            files_after={**files, "calc.py": _FIXED}, tool_calls=calls, steps=4,
        ),
        RewardInput(  # a fix that passes the visible tests only
            task_id="partial-fix", visible_before=_BEFORE, visible_after=_ALL_PASS, hidden_before=_HIDDEN_BEFORE,
            hidden_after=_HIDDEN_BEFORE, files_before=files,
            files_after={**files, "calc.py": _SOURCE.replace("return a - b", "return abs(a) + abs(b)")},
            tool_calls=calls, steps=6,
        ),
        RewardInput(  # nothing changed
            task_id="no-change", visible_before=_BEFORE, visible_after=_BEFORE, files_before=files, files_after=files,
            status_after="failed", tool_calls=(ToolCall("submit"),), steps=1,
        ),
        RewardInput(  # the change does not compile
            task_id="broken-build", visible_before=_BEFORE, visible_after={}, files_before=files,
            files_after={**files, "calc.py": "def add(a, b)\n    return a + b\n"}, status_after="error",
            build_errors=("calc.py:1: SyntaxError: expected ':'",), steps=2,
        ),
        RewardInput(  # the failing test edited away
            task_id="tests-edited", visible_before=_BEFORE, visible_after=_ALL_PASS, files_before=files,
            files_after={**files, "test_calc.py": _TESTS.replace("assert add(2, 3) == 5", "assert True")}, steps=3,
        ),
        RewardInput(  # the executor distrusts the run
            task_id="untrusted-run", visible_before=_BEFORE, visible_after=_ALL_PASS, files_before=files,
            files_after={**files, "calc.py": _FIXED + "\nimport os\nos._exit(0)\n"},
            integrity=("early-exit: the nonce never arrived: the program exited before the checks ended",), steps=3,
        ),
        RewardInput(  # malformed tool calls and a special case for the visible input
            task_id="format-errors", visible_before=_BEFORE, visible_after=_ALL_PASS, files_before=files,
            files_after={**files, "calc.py": _SOURCE.replace("    return a - b", "    if (a, b) == (2, 3):\n        return 5\n    return a - b")},
            tool_calls=(ToolCall("edit", ok=False, error="bad JSON"), ToolCall("nope", ok=False, error="unknown tool"),
                        ToolCall("submit")), steps=5,
        ),
        RewardInput(task_id="empty"),  # an episode that did nothing at all
    ]
