"""Executions are cloned by a fork server that never holds a request or a result
(:mod:`codemoe.sandbox.forkserver`): what earlier executions of other tasks sent or produced is not
in a later execution's memory."""

from __future__ import annotations

import os
import secrets
import signal

from codemoe.sandbox import ExecutionRequest, Limits, LocalExecutor, function_task_request

# Runs inside the sandbox: every string of the execution's own writable memory that holds MARKED.
SCAN = '''
import ctypes, re

def scan(pattern):
    found = set()
    for line in open("/proc/self/maps"):
        parts = line.split()
        if not parts[1].startswith("rw") or (len(parts) > 5 and parts[5] != "[heap]"):
            continue
        low, high = (int(x, 16) for x in parts[0].split("-"))
        if high - low < 1 << 30:
            found.update(m.group(0) for m in re.finditer(pattern, ctypes.string_at(low, high - low)))
    return found

print(sorted(m.decode() for m in scan(rb"MARKED_[0-9a-f]{16}") - {MINE}))
'''


def _scanner(mine: str) -> str:
    return f"MINE = b'MARKED_{mine}'\n" + SCAN + "\ndef add(a, b):\n    return a + b\n"


def test_an_execution_holds_nothing_of_the_tasks_run_before_it_on_its_worker():
    """Hidden checks, hidden test files and what earlier executions printed, of other tasks run on
    the same worker, in both runners: the executions were forks of the worker (and of the pytest
    zygote), whose freed heap held them."""
    marks = [secrets.token_hex(8) for _ in range(4)]
    hidden = f"def check(f):\n    # MARKED_{marks[0]}\n    assert f([3, 1]) == [3, 1]\n"
    noisy = f"print('MARKED_{marks[1]}')\n\ndef keep(x):\n    return x\n"
    graded = {"calc.py": f"def mul(a, b):\n    return a * b  # MARKED_{marks[2]}\n",
              "tests/test_hidden.py": f"from calc import mul\n\n\ndef test_mul():\n    assert mul(6, 7) == 42  # MARKED_{marks[3]}\n"}
    mine = secrets.token_hex(8)
    with LocalExecutor(workers=1) as ex:
        earlier = [ex.run(function_task_request(noisy, hidden, "keep")),
                   ex.run(ExecutionRequest(files=graded, runner="pytest", graded=True, trusted=["tests/test_hidden.py"],
                                           limits=Limits(timeout_s=30.0)))]
        assert [r.status for r in earlier] == ["passed", "passed"], earlier
        asserts = ex.run(function_task_request(_scanner(mine), "def check(f):\n    assert f(1, 2) == 3\n", "add",
                                               limits=Limits(timeout_s=30.0)))
        tests = {"sol.py": _scanner(mine), "tests/test_add.py": "from sol import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"}
        pytest_run = ex.run(ExecutionRequest(files=tests, runner="pytest", command=["-s"], graded=True,
                                             trusted=["tests/test_add.py"], limits=Limits(timeout_s=30.0)))
    assert asserts.passed and asserts.stdout == "[]\n", asserts
    assert pytest_run.passed and "[]\n" in pytest_run.stdout, pytest_run
    assert not any(m in pytest_run.stdout for m in marks)


def test_a_worker_whose_fork_server_died_is_replaced_and_loses_no_request(python_request):
    """No fork of a worker that has read requests replaces its fork server: the worker answers
    every request as not cloned, and its executor sends it to a fresh worker; no request is lost
    (an execution can make its fork server the OOM killer's choice where it may lower its own
    score: the next two requests failed)."""
    with LocalExecutor(workers=1) as ex:
        assert ex.run(python_request("print('up')\n")).stdout == "up\n"
        (worker,) = ex.worker_pids
        (server,) = [pid for pid in _children(worker) if not _children(pid) and _holds_a_socket(pid)]
        os.kill(server, signal.SIGKILL)
        results = [ex.run(python_request("print('again')\n")) for _ in range(3)]
    assert [r.stdout for r in results] == ["again\n"] * 3, results


def test_a_batch_on_a_worker_whose_fork_server_died_loses_no_request(python_request):
    """The same within one batch: the requests answered as not cloned run on a fresh worker."""
    with LocalExecutor(workers=2) as ex:
        assert [r.stdout for r in ex.run_batch([python_request("print('up')\n")] * 2)] == ["up\n"] * 2
        worker = ex.worker_pids[0]
        (server,) = [pid for pid in _children(worker) if not _children(pid) and _holds_a_socket(pid)]
        os.kill(server, signal.SIGKILL)
        results = ex.run_batch([python_request(f"print({n})\n") for n in range(6)])
        assert worker not in ex.worker_pids
    assert [r.stdout for r in results] == [f"{n}\n" for n in range(6)], results


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(c) for c in f.read().split()]


def _holds_a_socket(pid: int) -> bool:
    """The worker's children: the pytest zygote (with a fork server of its own under it), the
    checker (pipes only) and the fork server (its socket), which has no child between executions."""
    return any(os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:") for fd in os.listdir(f"/proc/{pid}/fd"))
