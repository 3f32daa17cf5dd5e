"""Repository test runs through the sandbox's pytest runner against a fresh ``python -m pytest`` per run.

    python benchmarks/bench_pytest_runs.py [--tasks N] [--workers N] [--rounds N] [--json PATH]

Workload: the first ``--tasks`` train tasks of the ``synthetic-repos`` suite (generated repositories
of nine families, as the ``agentic-repos`` pipeline trains on them), each run twice the way an agent
episode runs it: the visible tests on the repository as it comes (``run_tests`` of an episode's first
turn: the failing tests' tracebacks are formatted), and the visible and hidden tests on the gold patch
(the grading run: everything passes). Both sides run in the same sandbox, with the same files,
arguments, environment and protections, on ``--workers`` warm workers:

- codemoe: ``runner="pytest"`` (pytest run in a fork of a zygote that loaded and warmed it once);
- anchor: ``python -m pytest`` in a fresh interpreter per run (``runner=None``), what a harness that
  runs a task's test command in its container does.

Cases (medians over ``--rounds``; ratio: how many times better codemoe is):

- ``failing runs (run_tests on the unfixed repositories)``, ``passing runs (grading the gold patch)``:
  executions per second.
- ``CPU time per execution``: CPU ms of the workers and of every process under them (zygotes,
  checkers, the executions), and of this process, per execution, over both kinds of runs. Unlike
  throughput it hardly depends on what else the machine runs.

Every run's outcome is checked on both sides (the unfixed repositories fail, the gold patches pass),
so both did the same work.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from bench_sandbox import _own_cpu, _workers_cpu
from codemoe.core import build_plugin_manager, build_registry
from codemoe.core.contracts import repository_task
from codemoe.sandbox import ExecutionRequest, Limits, LocalExecutor
from codemoe.sandbox.agent.environment import grading_request, visible_tests_request
from codemoe.sandbox.local import default_workers

WARMUP = 8  # runs of each kind each side makes untimed first (a fresh pool's one-time costs)


def _requests(tasks: list) -> dict[str, list[ExecutionRequest]]:
    """{"failing": run_tests on each repository as it comes, "passing": each gold patch graded}."""
    limits = Limits(timeout_s=30.0, cpu_s=30.0)
    failing = [visible_tests_request(t, t.repo_files(), [], limits) for t in tasks]
    passing = [grading_request(t, t.gold_files(), limits, "gold") for t in tasks]
    return {"failing": failing, "passing": passing}


def _fresh(request: ExecutionRequest) -> ExecutionRequest:
    """The same run as a fresh ``python -m pytest`` process (the anchor)."""
    return ExecutionRequest(files=request.files, command=["python", "-m", "pytest", *request.command],
                            env=request.env, limits=request.limits, id=request.id)


def _check(kind: str, tasks: list, results: list, side: str) -> None:
    """Both sides must reach the same outcomes: the unfixed repository fails (a failing test or a
    collection error), the gold patch passes."""
    for task, result in zip(tasks, results, strict=True):
        if (result.status == "passed") != (kind == "passing") or result.status not in ("passed", "failed", "error"):
            raise SystemExit(f"{side}: {kind} run of {task.id} came out {result.status}: {result.reason}")


def _side(workers: int, tasks: list, requests: dict[str, list[ExecutionRequest]], fresh: bool) -> dict[str, float]:
    """Throughput of each kind and CPU ms per execution of one side, on a fresh pool."""
    side = "anchor" if fresh else "codemoe"
    out = {}
    batches = {kind: [_fresh(r) for r in batch] if fresh else batch for kind, batch in requests.items()}
    with LocalExecutor(workers=workers) as executor:
        for batch in batches.values():
            executor.run_batch(batch[:WARMUP])
        busy, own = _workers_cpu(executor), _own_cpu()
        for kind, batch in batches.items():
            started = time.perf_counter()
            results = executor.run_batch(batch)
            out[kind] = len(batch) / (time.perf_counter() - started)
            _check(kind, tasks, results, side)
        runs = sum(len(batch) for batch in batches.values())
        out["cpu"] = 1000 * (_workers_cpu(executor) - busy + _own_cpu() - own) / runs
    return out


CASES = {
    "failing": ("failing runs (run_tests on the unfixed repositories)", "executions/s"),
    "passing": ("passing runs (grading the gold patch)", "executions/s"),
    "cpu": ("CPU time per execution", "CPU ms per execution"),
}


def run(tasks_n: int, workers: int, rounds: int) -> list[dict]:
    registry = build_registry(build_plugin_manager())
    suite = registry.build("suite", {"name": "synthetic-repos", "train_tasks": tasks_n, "heldout_tasks": 0})
    tasks = [repository_task(t) for t in suite.tasks("train")[:tasks_n]]
    requests = _requests(tasks)
    measured = []
    for _ in range(rounds):  # the two sides alternate, each on a fresh pool
        measured.append((_side(workers, tasks, requests, fresh=False), _side(workers, tasks, requests, fresh=True)))
    cases = []
    for key, (case, units) in CASES.items():
        ours = statistics.median(m[0][key] for m in measured)
        theirs = statistics.median(m[1][key] for m in measured)
        ratio = ours / theirs if units == "executions/s" else theirs / ours
        cases.append({"case": case, "codemoe": ours, "anchor": theirs, "ratio": ratio, "units": units})
    return cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=45, help="synthetic-repos train tasks (5 of each family)")
    parser.add_argument("--workers", type=int, default=default_workers(), help="warm workers (default: CPUs)")
    parser.add_argument("--rounds", type=int, default=3, help="repeat every case; report medians")
    parser.add_argument("--json", type=Path, help="write the cases as JSON here")
    args = parser.parse_args(argv)
    cases = run(args.tasks, args.workers, args.rounds)
    print(f"{'case':<56} {'codemoe':>9} {'anchor':>9} {'ratio':>7}  units")
    for c in cases:
        print(f"{c['case']:<56} {c['codemoe']:>9.1f} {c['anchor']:>9.1f} {c['ratio']:>6.2f}x  {c['units']}")
    if args.json:
        args.json.write_text(json.dumps({"tasks": args.tasks, "workers": args.workers, "rounds": args.rounds,
                                         "cases": cases}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
