"""The executor contract: JSON round trips, validation messages, the HumanEval helper."""

from __future__ import annotations

import json
import subprocess
import sys

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
        ({"command": ["true"], "limits": {"timeout_s": float("nan")}}, "limits.timeout_s"),
        ({"command": ["true"], "limits": {"memory_mb": 2.5}}, "whole number"),
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


# --- limits at the edge: finite, bounded, refused before they reach a worker ---------------------

_INF, _NAN = float("inf"), float("nan")


@pytest.mark.parametrize(
    ("field", "value", "shown"),
    [
        ("timeout_s", _INF, "got inf"),
        ("timeout_s", _NAN, "got nan"),
        ("timeout_s", -_INF, "got -inf"),
        ("timeout_s", 1e300, "got 1e+300"),
        ("timeout_s", 86_400.5, "got 86400.5"),
        ("cpu_s", 0, "got 0"),
        ("cpu_s", -1.0, "got -1.0"),
        ("cpu_s", True, "got True"),
        ("memory_mb", 512.0, "got 512.0"),
        ("memory_mb", (4 << 20) + 1, "got 4194305"),
        pytest.param("memory_mb", 10 ** 400, "an integer of 1329 bits", id="memory_mb-10**400"),
        ("max_processes", 0, "got 0"),
        ("max_processes", False, "got False"),
        ("max_file_mb", "16", "got '16'"),
        ("max_output_bytes", None, "got None"),
        ("max_open_files", [256], "got a list"),
        ("disk_mb", -256, "got -256"),
        ("disk_mb", _NAN, "got nan"),
    ],
)
def test_limits_out_of_range_are_refused_naming_the_field_the_value_and_the_range(field, value, shown):
    with pytest.raises(ValueError, match=rf"limits\.{field} must be a positive.* at most \d+") as info:
        Limits(**{field: value})
    assert shown in str(info.value)
    # the same through the request's JSON form, as the service gets it
    with pytest.raises(ValueError, match=rf"limits\.{field}"):
        ExecutionRequest.from_dict({"command": ["true"], "limits": {field: value}})


def test_limits_at_their_bounds_are_taken():
    top = Limits(timeout_s=86_400, cpu_s=86_400.0, memory_mb=4 << 20, max_processes=1 << 16, max_file_mb=1 << 20,
                 max_output_bytes=1 << 30, max_open_files=1 << 20, disk_mb=1 << 20, network=True)
    assert Limits.from_dict(json.loads(json.dumps(top.to_dict()))) == top
    assert Limits(timeout_s=0.001, cpu_s=1, memory_mb=1).timeout_s == 0.001


def test_limits_changed_after_construction_are_refused_before_a_worker_and_workers_keep_serving(executor):
    from codemoe.sandbox import wire

    pids = list(executor.worker_pids)
    for field, value in [("timeout_s", 1e300), ("timeout_s", _INF), ("cpu_s", _NAN), ("disk_mb", 0)]:
        request = ExecutionRequest(command=["true"], id="bad")
        setattr(request.limits, field, value)  # past the constructor's check
        with pytest.raises(ValueError, match=rf"limits\.{field}"):
            executor.run(request)
        with pytest.raises(ValueError, match=rf"limits\.{field}"):
            executor.run_batch([ExecutionRequest(command=["true"]), request])
    # a message straight to a worker (what a client bypassing the checks would send) is refused
    # there with a reason, and the same worker serves the next request
    worker = executor._idle.get()
    try:
        bad = ExecutionRequest(command=["true"], id="raw").to_dict()
        bad["limits"]["cpu_s"] = _NAN
        wire.send(worker.process.stdin.fileno(), bad)
        answer = ExecutionResult.from_dict(wire.receive(worker.process.stdout.fileno()))
        assert answer.status == "error" and "limits.cpu_s" in answer.reason and answer.id == "raw"
        wire.send(worker.process.stdin.fileno(), ExecutionRequest(command=["python", "-c", "print(5)"]).to_dict())
        again = worker.answer()
        assert again.status == "passed" and again.stdout == "5\n"
    finally:
        executor._idle.put(worker)
    assert executor.run(ExecutionRequest(command=["python", "-c", "print(6)"])).stdout == "6\n"
    assert executor.worker_pids == pids  # no worker died or was replaced


WORKER_ERRORS = """
import json, os, sys
from codemoe.sandbox import worker
from codemoe.sandbox.api import ExecutionRequest
from codemoe.sandbox.isolation import IsolationPlan, prepare_worker, probe, release_worker

marker, kind = sys.argv[1:]
plan = probe() if kind == "namespaces" else IsolationPlan()  # one per process: the first enters namespaces

def mounts():
    with open("/proc/self/mountinfo") as f:
        return len(f.read().splitlines())

def children_left():
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return False
    return True

report = {}
state = prepare_worker(plan)
base = mounts()
for field, value in (("timeout_s", 1e300), ("timeout_s", float("inf")), ("cpu_s", float("nan"))):
    request = ExecutionRequest(command=["sh", "-c", f"sleep 1000.{marker} & exec sleep 1001.{marker}"])
    setattr(request.limits, field, value)  # past every check: execute itself must clean up
    try:
        worker.execute(request, plan, state)
        error = None
    except Exception as exc:
        error = type(exc).__name__
    left = os.listdir(state.fallback_root) if state.fallback_root else []
    report[f"{field}={value}"] = [error, children_left(), mounts() - base, left]
after = worker.execute(ExecutionRequest(command=["python", "-c", "print(7)"]), plan, state)
report["after"] = [after.status, after.stdout]
release_worker(state)
print(json.dumps(report))
"""


@pytest.mark.parametrize("kind", ["namespaces", "fallback"])
def test_worker_error_paths_kill_and_reap_the_child_and_drop_the_work_dir(kind, marker, processes_with):
    """Limits no check stopped: an oversized timeout fails supervision after the clone (it used to
    leave the child running, unreaped), NaN fails before it (it used to leak the execution's mounts).
    """
    done = subprocess.run([sys.executable, "-c", WORKER_ERRORS, marker, kind], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report.pop("after") == ["passed", "7\n"]  # the worker serves on
    assert len(report) == 3
    for case, (error, children_left, mounts_leaked, files_left) in report.items():
        assert error is not None, case  # the caller (the worker's loop) answers it as an error
        assert (children_left, mounts_leaked, files_left) == (False, 0, []), case
    assert processes_with(f"1000.{marker}") == [] and processes_with(f"1001.{marker}") == []


@pytest.mark.parametrize(("field", "value", "message"), [
    ("id", 3, "'id' must be a string"), ("nonce", ["x"], "'nonce' must be a string"),
    ("graded", "yes", "'graded' must be true or false"), ("trusted", "a.py", "'trusted' must be a list"),
])
def test_request_fields_of_the_wrong_type_are_refused_by_name(field, value, message):
    with pytest.raises(ValueError, match=message):
        ExecutionRequest.from_dict({"files": {}, "command": ["true"], field: value})


@pytest.mark.parametrize(("fields", "message"), [
    ({"files": {".": "x"}}, "file path '.' must name a file"),
    ({"files": {"a\0b": "x"}}, "must name a file: no NUL"),
    ({"files": {"a" * 256: "x"}}, "no part over 255 bytes"),
    ({"files": {"a": "x", "a/b": "y"}}, "file path 'a/b' needs 'a' to be a folder"),
    ({"files": {"a/b": "x", "a//b": "y"}}, "name the same file"),
    ({"files": {"a.py": "\udc80"}}, "file 'a.py': its text cannot be written as UTF-8"),
    ({"env": {"": "x"}}, "env '': a name must be non-empty"),
    ({"env": {"A=B": "x"}}, "without '='"),
    ({"env": {"A": "x\0"}}, "neither may hold a NUL"),
    ({"command": ["python", "a\0"]}, "'command' arguments may not hold a NUL"),
])
def test_requests_no_execution_could_run_are_refused_naming_what(fields, message):
    """They used to take a worker and come back as a sandbox fault (status error, 200 over HTTP)."""
    with pytest.raises(ValueError, match=message):
        ExecutionRequest.from_dict({"files": {}, "command": ["true"], **fields})
