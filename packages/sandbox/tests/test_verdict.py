"""Known answers for the verdict rules: what the worker saw -> status and reason."""

from __future__ import annotations

import hmac
import json
import signal

import pytest
from codemoe.sandbox.verdict import SIGNED, Observation, decide, opened


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
        ({"exit_code": 120, "messages": [{"kind": "setup-error", "message": "boom", "nonce": "n1"}]}, "error",
         "sandbox: boom"),
    ],
)
def test_command_verdicts(kwargs, status, reason):
    got_status, got_reason, *_ = decide(_obs(**kwargs))
    assert got_status == status
    assert reason in got_reason


def test_asserts_need_the_right_nonce_and_a_clean_exit():
    done = [{"kind": "done", "nonce": "n1"}]
    assert decide(_obs(runner="asserts", messages=done))[::2] == ("passed", {"checks.py": "passed"})
    assert decide(_obs(runner="asserts", messages=[{"kind": "done", "nonce": "n2"}]))[0] == "failed"
    assert decide(_obs(runner="asserts", messages=done, exit_code=1))[0] == "failed"
    assert decide(_obs(runner="asserts"))[1].endswith("no completion nonce")
    compile_error = [{"kind": "compile-error", "file": "program.py", "message": "SyntaxError: x", "nonce": "n1"}]
    assert decide(_obs(runner="asserts", exit_code=1, messages=compile_error))[:2] == (
        "error", "compile: program.py: SyntaxError: x")


def test_pytest_report_counts_only_with_the_nonce():
    report = {"kind": "pytest", "nonce": "n1", "tests": {"t::a": "passed", "t::b": "skipped"}, "exitstatus": 0}
    assert decide(_obs(runner="pytest", messages=[report]))[::2] == ("passed", {"t::a": "passed", "t::b": "skipped"})
    forged = {**report, "nonce": "guess"}
    status, reason, tests, _ = decide(_obs(runner="pytest", messages=[forged]))
    assert (status, tests) == ("failed", {}) and "no valid test report" in reason
    failing = {**report, "tests": {"t::a": "failed"}, "exitstatus": 1}
    assert decide(_obs(runner="pytest", exit_code=1, messages=[failing]))[0] == "failed"
    assert decide(_obs(runner="pytest", exit_code=5, messages=[{**report, "tests": {}, "exitstatus": 5}]))[:2] == (
        "error", "no tests collected")
    memory = {**report, "tests": {"t::a": "failed"}, "exitstatus": 1, "memory": True}
    assert decide(_obs(runner="pytest", exit_code=1, messages=[memory]))[0] == "memory"


def test_messages_without_the_nonce_count_for_nothing():
    """Every kind of message is authenticated, not only the completion: a "sandbox fault" or a
    memory report written without the nonce does not turn a failure into status error or memory.
    """
    for kind in ({"kind": "setup-error", "message": "boom"}, {"kind": "memory"}):
        status, reason, *_ = decide(_obs(exit_code=3, messages=[kind]))
        assert (status, reason) == ("failed", "exit code 3")
        assert decide(_obs(exit_code=3, messages=[{**kind, "nonce": "n1"}]))[0] in ("error", "memory")


def test_a_setup_error_after_the_runner_started_is_the_programs_not_the_sandboxs():
    start = {"kind": "start", "nonce": "n1"}
    fault = {"kind": "setup-error", "message": "worker crashed", "nonce": "n1"}
    assert decide(_obs(runner="pytest", exit_code=120, messages=[fault, start]))[:2] == (
        "error", "sandbox: worker crashed")
    status, reason, *_ = decide(_obs(runner="pytest", exit_code=120, messages=[start, fault]))
    assert status == "failed" and "no valid test report" in reason


CANARIES = {"tests/test_edge_case.py::test_round_trip": "passed",
            "tests/test_edge_case.py::test_split_keys": "failed"}


def _graded(tests: dict[str, str], exitstatus: int, exit_code: int, **kwargs) -> tuple[str, str, dict[str, str]]:
    report = {"kind": "pytest", "nonce": "n1", "tests": tests, "exitstatus": exitstatus, **kwargs}
    return decide(_obs(runner="pytest", exit_code=exit_code, messages=[report], canaries=CANARIES))[:3]


def test_graded_pytest_passes_when_only_the_failing_canary_failed_and_hides_the_canaries():
    honest = {"tests/test_a.py::test_x": "passed", **CANARIES}
    assert _graded(honest, 1, 1) == ("passed", "", {"tests/test_a.py::test_x": "passed"})
    failing = {"tests/test_a.py::test_x": "failed", **CANARIES}
    status, reason, tests = _graded(failing, 1, 1)
    assert (status, tests) == ("failed", {"tests/test_a.py::test_x": "failed"}) and "1 of 1" in reason


def _signed(message: dict, key: str) -> dict:
    body = json.dumps(message)
    return {"kind": SIGNED, "mac": hmac.digest(key.encode(), body.encode(), "sha256").hex(), "body": body}


def test_signed_messages_open_with_the_nonce_and_unsigned_reports_count_for_nothing():
    report = {"kind": "pytest", "tests": {"t::a": "passed"}, "exitstatus": 0}
    start = {"kind": "start", "nonce": "n1"}
    assert opened([start, _signed(report, "n1")], "n1") == [start, {**report, "nonce": "n1"}]
    changed = _signed(report, "n1") | {"body": json.dumps({**report, "tests": {"t::a": "failed"}})}
    assert opened([changed, _signed(report, "guess"), {**report, "nonce": "n1"}], "n1") == []  # edited, wrong key, clear
    nested = _signed(_signed(report, "n1"), "n1")
    assert opened([nested, _signed(report, "n1") | {"mac": 7}, {"kind": SIGNED, "body": "{"}], "n1") == []


def test_a_second_report_of_the_execution_is_forged_whichever_came_first():
    passing = {"kind": "pytest", "nonce": "n1", "tests": {"t::a": "passed"}, "exitstatus": 0}
    failing = {**passing, "tests": {"t::a": "failed"}, "exitstatus": 1}
    for messages in ([passing, failing], [failing, passing], [passing, passing]):
        status, reason, tests, integrity = decide(_obs(runner="pytest", messages=messages))
        assert (status, integrity) == ("failed", "forged-report") and "2 reports" in reason
        assert tests == {"t::a": "failed"}
    assert decide(_obs(runner="pytest", messages=[passing, {**passing, "nonce": "other"}]))[0] == "passed"


def test_a_graded_test_skipped_while_it_ran_is_not_passed_and_a_marked_skip_is():
    tests = {"tests/test_a.py::test_x": "passed", "tests/test_a.py::test_y": "skipped", **CANARIES}
    assert _graded(tests, 1, 1)[0] == "passed"  # skipped by its mark: not in unmarked_skips
    status, reason, shown = _graded(tests, 1, 1, unmarked_skips=["tests/test_a.py::test_y"])
    assert status == "failed" and reason.startswith("1 of 2 tests skipped while they ran") and "test_y" in reason
    assert shown == {"tests/test_a.py::test_x": "passed", "tests/test_a.py::test_y": "skipped"}
    assert _graded(tests, 1, 1, unmarked_skips=["tests/test_a.py::not_a_test_of_the_run"])[0] == "passed"
    ungraded = {"kind": "pytest", "nonce": "n1", "tests": {"t::a": "skipped"}, "exitstatus": 0, "unmarked_skips": ["t::a"]}
    assert decide(_obs(runner="pytest", messages=[ungraded]))[0] == "passed"  # pytest's own rule outside grading


def test_a_report_whose_failing_canary_passed_or_that_lost_the_canaries_is_forged():
    blanket = {"tests/test_a.py::test_x": "passed", "tests/test_a.py::test_y": "passed",
               **dict.fromkeys(CANARIES, "passed")}
    status, reason, tests = _graded(blanket, 0, 0)
    assert status == "failed" and reason.startswith("forged test report: canary test")
    assert tests == {"tests/test_a.py::test_x": "failed", "tests/test_a.py::test_y": "failed"}
    dropped = {"tests/test_a.py::test_x": "passed"}  # failures (the canary among them) left out
    status, reason, tests = _graded(dropped, 0, 0)
    assert (status, tests) == ("failed", {"tests/test_a.py::test_x": "failed"}) and "missing" in reason


def test_canaries_may_be_missing_when_collection_failed_or_options_deselect_them():
    broken = {"tests/test_a.py": "error"}
    status, reason, _ = _graded(broken, 2, 2, collect_errors=["ImportError: x"])
    assert status == "error" and not reason.startswith("forged")
    report = {"kind": "pytest", "nonce": "n1", "tests": {"tests/test_a.py::test_x": "passed"}, "exitstatus": 0}
    assert decide(_obs(runner="pytest", messages=[report], canaries=CANARIES, canaries_required=False))[0] == "passed"


def test_a_test_failed_by_a_lying_comparison_makes_the_verdict_a_forged_comparison():
    """The report names the tests ``ForgedComparison`` failed; the failing canary's own lie is not one."""
    tests = {"tests/test_a.py::test_x": "failed", "tests/test_a.py::test_y": "passed", **CANARIES}
    status, reason, out = _graded(tests, 1, 1, forged_comparisons=["tests/test_a.py::test_x", *CANARIES])
    assert status == "failed" and reason.startswith("forged comparison in tests/test_a.py::test_x: ")
    assert out == {"tests/test_a.py::test_x": "failed", "tests/test_a.py::test_y": "failed"}  # a forged run's outcomes count for nothing
    only_canary = {"tests/test_a.py::test_x": "passed", **CANARIES}
    assert _graded(only_canary, 1, 1, forged_comparisons=list(CANARIES)) == (
        "passed", "", {"tests/test_a.py::test_x": "passed"})
    assert _graded(only_canary, 1, 1, forged_comparisons="tests/test_a.py::test_x")[0] == "passed"  # not a list


def test_a_report_naming_a_replaced_name_is_a_forged_test_environment():
    tests = {"tests/test_a.py::test_x": "passed", **CANARIES}
    status, reason, out = _graded(tests, 1, 1, tampered=["math.isclose (changed by the end of collection)"])
    assert status == "failed" and reason.startswith("forged test environment: math.isclose (changed by the end")
    assert out == {"tests/test_a.py::test_x": "failed"}
    assert _graded(tests, 1, 1, tampered="math.isclose")[0] == "passed"  # not a list


def _with_replacement(tests: dict[str, str], tampered: list[str], **kwargs) -> tuple[str, str, dict[str, str]]:
    report = {"kind": "pytest", "nonce": "n1", "tests": tests, "exitstatus": 1, "tampered": tampered, **kwargs}
    return decide(_obs(runner="pytest", exit_code=1, messages=[report], canaries=CANARIES,
                       canary_replaced="textwrap.indent"))[:3]


def test_the_canary_modules_replacement_must_be_named_and_is_not_a_finding_itself():
    tests = {"tests/test_a.py::test_x": "passed", **CANARIES}
    named = ["textwrap.indent (changed by the end of collection)"]
    assert _with_replacement(tests, named)[:2] == ("passed", "")
    status, reason, _ = _with_replacement(tests, [])
    assert status == "failed" and reason.startswith("forged test report: the canary module's replacement of textwrap.indent")
    status, reason, _ = _with_replacement(tests, [*named, "builtins.len (changed by the end of the session)"])
    assert status == "failed" and reason.startswith("forged test environment: builtins.len")
    # collection failed before the canary module was imported: no canary test ran, nothing to name
    broken = {"tests/test_a.py": "error"}
    status, reason, _ = _with_replacement(broken, [], collect_errors=["ImportError: x"])
    assert status == "error" and not reason.startswith("forged")


def test_integrity_is_what_the_verdict_says_never_words_in_its_reason():
    """``integrity`` names the verdicts that distrust the run's own account; a reason that only
    quotes a test's name or the program's message holding such words is an ordinary failure."""
    report = {"kind": "pytest", "nonce": "n1", "exitstatus": 1}
    cases = [
        (_obs(runner="asserts"), "early-exit"),
        (_obs(runner="asserts", exit_code=1, messages=[{"kind": "exit", "file": "program.py", "code": "0", "nonce": "n1"}]),
         "early-exit"),
        (_obs(runner="pytest", exit_code=1), "no-report"),
        (_obs(runner="pytest", exit_code=1, messages=[{**report, "tests": {"t::a": "failed"}, "forged_comparisons": ["t::a"]}]),
         "forged-comparison"),
        (_obs(runner="pytest", exit_code=1, messages=[{**report, "tests": {"t::a": "passed"}, "tampered": ["math.isclose"]}]),
         "forged-environment"),
        (_obs(runner="pytest", exit_code=1, canaries={"c::x": "failed"},
              messages=[{**report, "tests": {"t::a": "passed", "c::x": "passed"}}]), "forged-report"),
        # ordinary failures whose reasons hold the words
        (_obs(runner="pytest", exit_code=1, messages=[{**report, "tests": {"tests/test_nonce.py::test_forged_token": "failed"}}]),
         ""),
        (_obs(runner="asserts", exit_code=1, messages=[{"kind": "exception", "file": "program.py",
                                                         "message": "ValueError: forged nonce, exited early", "nonce": "n1"}]), ""),
        (_obs(runner="pytest", exit_code=1, messages=[{**report, "tests": {}, "collect_errors": ["no valid test report"]}]), ""),
    ]
    for obs, kind in cases:
        status, reason, tests, integrity = decide(obs)
        assert status != "passed"
        assert integrity == kind, (reason, integrity)
        if kind.startswith("forged-"):  # no outcome of a forged run counts, the ones it reported passed included
            assert tests and set(tests.values()) == {"failed"}, tests


@pytest.mark.parametrize("kwargs", [{"output_limit": True}, {"wall_timeout": True}, {"signal": 9, "cpu_s": 9.9}],
                         ids=["output-limit", "deadline", "cpu"])
def test_an_asserts_run_that_did_not_pass_has_no_passed_check_whatever_its_channel_holds(kwargs):
    """A program that sent its own completion (its nonce read from memory) and then ran over a limit
    after its last line: its exit code may be 0, but only a passed run passes its checks."""
    obs = _obs(runner="asserts", messages=[{"kind": "done", "nonce": "n1"}], **kwargs)
    status, _, tests, _ = decide(obs)
    assert status != "passed" and tests == {"checks.py": "failed"}


def test_the_channel_keeps_json_lines_and_drops_what_would_cost_the_worker():
    from codemoe.sandbox.worker import _messages

    transcript = json.dumps({"kind": "transcript", "calls": list(range(1000))}).encode()
    raw = b"\n".join([transcript, b"[" * 100_000, b"[" + b"{}," * 70_000 + b"{}]", b"not json", b'{"kind": "done"}'])
    assert _messages(raw, memory_mb=1) == [json.loads(transcript), {"kind": "done"}]
    assert len(_messages(b"[" + b"{}," * 70_000 + b"{}]\n" + transcript, memory_mb=1024)) == 1  # a list is no message
