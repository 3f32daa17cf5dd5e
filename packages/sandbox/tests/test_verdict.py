"""Known answers for the verdict rules: what the worker saw -> status and reason."""

from __future__ import annotations

import signal

import pytest
from codemoe.sandbox.verdict import Observation, decide


def _obs(**kwargs) -> Observation:
    base = {"runner": None, "nonce": "n1", "exit_code": 0, "signal": None, "wall_timeout": False,
            "output_limit": False, "cpu_s": 0.1, "cpu_limit_s": 10.0, "max_file_mb": 16, "stderr_tail": ""}
    return Observation(**{**base, **kwargs})


@pytest.mark.parametrize(
    ("kwargs", "status", "reason"),
    [
        ({}, "passed", ""),
        ({"exit_code": 2}, "failed", "exit code 2"),
        ({"exit_code": None, "signal": 9, "wall_timeout": True}, "timeout", "wall-clock"),
        ({"exit_code": None, "signal": 9, "cpu_s": 9.9}, "timeout", "CPU-time"),
        ({"exit_code": None, "signal": int(signal.SIGXCPU), "cpu_s": 2.0}, "timeout", "CPU-time"),
        ({"exit_code": None, "signal": 9, "cpu_s": 0.2}, "killed", "SIGKILL"),
        ({"exit_code": None, "signal": 11}, "killed", "SIGSEGV"),
        ({"exit_code": None, "signal": 9, "output_limit": True}, "output-limit", "max_output_bytes"),
        ({"exit_code": 1, "stderr_tail": "Traceback ...\nMemoryError\n"}, "memory", "memory"),
        ({"exit_code": 1, "stderr_tail": "OSError: [Errno 27] File too large\n"}, "failed", "file-size limit"),
        ({"exit_code": 120, "messages": [{"kind": "setup-error", "message": "boom"}]}, "error", "sandbox: boom"),
    ],
)
def test_command_verdicts(kwargs, status, reason):
    got_status, got_reason, _ = decide(_obs(**kwargs))
    assert got_status == status
    assert reason in got_reason


def test_asserts_need_the_right_nonce_and_a_clean_exit():
    done = [{"kind": "done", "nonce": "n1"}]
    assert decide(_obs(runner="asserts", messages=done))[::2] == ("passed", {"checks.py": "passed"})
    assert decide(_obs(runner="asserts", messages=[{"kind": "done", "nonce": "n2"}]))[0] == "failed"
    assert decide(_obs(runner="asserts", messages=done, exit_code=1))[0] == "failed"
    assert decide(_obs(runner="asserts"))[1].endswith("no completion nonce")
    compile_error = [{"kind": "compile-error", "file": "program.py", "message": "SyntaxError: x"}]
    assert decide(_obs(runner="asserts", exit_code=1, messages=compile_error))[:2] == (
        "error", "compile: program.py: SyntaxError: x")


def test_pytest_report_counts_only_with_the_nonce():
    report = {"kind": "pytest", "nonce": "n1", "tests": {"t::a": "passed", "t::b": "skipped"}, "exitstatus": 0}
    assert decide(_obs(runner="pytest", messages=[report]))[::2] == ("passed", {"t::a": "passed", "t::b": "skipped"})
    forged = {**report, "nonce": "guess"}
    status, reason, tests = decide(_obs(runner="pytest", messages=[forged]))
    assert (status, tests) == ("failed", {}) and "no valid test report" in reason
    failing = {**report, "tests": {"t::a": "failed"}, "exitstatus": 1}
    assert decide(_obs(runner="pytest", exit_code=1, messages=[failing]))[0] == "failed"
    assert decide(_obs(runner="pytest", exit_code=5, messages=[{**report, "tests": {}, "exitstatus": 5}]))[:2] == (
        "error", "no tests collected")
    memory = {**report, "tests": {"t::a": "failed"}, "exitstatus": 1, "memory": True}
    assert decide(_obs(runner="pytest", exit_code=1, messages=[memory]))[0] == "memory"
