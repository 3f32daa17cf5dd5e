"""The executor contract: JSON round trips, validation messages, the HumanEval helper."""

from __future__ import annotations

import json

import pytest
from codemoe.sandbox import ExecutionRequest, ExecutionResult, Executor, Limits, LocalExecutor, function_task_request
from codemoe.sandbox.remote import RemoteExecutor


def test_request_round_trips_through_json_with_bytes():
    request = ExecutionRequest(
        files={"a.py": "print(1)\n", "blob.bin": b"\x00\xff\x10"},
        command=["python", "a.py"],
        limits=Limits(timeout_s=2.5, memory_mb=128),
        stdin=b"\xfe",
        env={"X": "1"},
        id="r1",
    )
    data = json.loads(json.dumps(request.to_dict()))
    assert data["files"]["blob.bin"] == {"base64": "AP8Q"}
    assert ExecutionRequest.from_dict(data) == request


def test_result_round_trips_and_rejects_unknown_status():
    result = ExecutionResult(status="timeout", tests={"t::a": "passed"}, stdout="x", duration_s=1.5, id="r")
    assert ExecutionResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result
    with pytest.raises(ValueError, match="unknown status"):
        ExecutionResult.from_dict({**result.to_dict(), "status": "great"})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"files": {}, "command": None}, "needs a command"),
        ({"command": "python a.py"}, "list of strings"),
        ({"runner": "unittest"}, "unknown runner"),
        ({"runner": "asserts", "files": {"program.py": ""}}, "checks.py"),
        ({"files": {"/etc/passwd": "x"}, "command": ["true"]}, "relative"),
        ({"files": {"a/../../x": "x"}, "command": ["true"]}, "inside the work dir"),
        ({"command": ["true"], "limits": {"timeout_s": -1}}, "positive"),
        ({"command": ["true"], "limits": {"timeout": 1}}, "unknown limits field"),
        ({"command": ["true"], "limits": {"network": "yes"}}, "true or false"),
        ({"command": ["true"], "files": {"a": {"base64": "!!"}}}, "invalid base64"),
        ({"command": ["true"], "env": {"A": 1}}, "'env'"),
    ],
)
def test_malformed_requests_are_rejected_with_a_reason(data, message):
    with pytest.raises(ValueError, match=message):
        ExecutionRequest.from_dict(data)


def test_function_task_request_builds_the_humaneval_program():
    request = function_task_request("def f():\n    return 1\n", "def check(c):\n    assert c() == 1\n", "f", id="t")
    assert request.runner == "asserts" and request.id == "t"
    assert request.files["program.py"] == "def f():\n    return 1\n"
    assert request.files["checks.py"].endswith("\n\ncheck(f)\n")
    assert len(request.nonce) == 32
    assert request.nonce != function_task_request("", "", "f").nonce
    assert request.nonce not in json.dumps(request.files)


def test_executors_satisfy_the_protocol():
    assert issubclass(LocalExecutor, Executor) and issubclass(RemoteExecutor, Executor)
