"""What the environment check (``codemoe.sandbox.pristine``) costs a graded pytest run.

    python benchmarks/bench_pristine.py [--tasks N] [--rounds N] [--json PATH]

Workload: the gold patches of the first ``--tasks`` train tasks of the ``synthetic-repos`` suite
(files the project generates; no model output runs here), graded the way ``grading_request`` lays
them out: visible and hidden tests, the task's trusted files. This process warms up as the sandbox's
pytest fork server does (``worker._warm_up``, then the module index and the snapshot, then
``gc.freeze``), and for every session forks a child that runs pytest with the runner's reporter,
alternating two sides, task by task:

- codemoe: the reporter with the snapshot (what every pytest execution runs);
- anchor: the same reporter without it (the runner before the check).

The sandbox's isolation is left out on both sides, so the difference is the check's alone: the
whole-run figures (with isolation, on warm workers) are ``bench_pytest_runs.py``'s, whose
run-to-run spread (several CPU ms) is larger than this difference.

Cases (medians over tasks and rounds; ratio: anchor over codemoe, so below 1 is the cost):
``CPU time per graded session`` (user + system CPU ms of the child) and ``page faults per graded
session`` (minor faults: pages of the server the child copied). Every session must pass, and with
the check no name may be reported replaced.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import sys
import tempfile
from pathlib import Path

from codemoe.core import build_plugin_manager, build_registry
from codemoe.core.contracts import repository_task
from codemoe.sandbox import Limits, pristine, worker
from codemoe.sandbox.agent.environment import grading_request
from codemoe.sandbox.pytest_report import Reporter


class _Quiet(Reporter):
    """The runner's reporter, its report kept instead of written to the result channel."""

    def send(self, message: dict) -> None:
        self.report = message


def _session(folder: str, args: list[str], trusted: frozenset[str], snapshot: pristine.Snapshot | None) -> tuple:
    """(CPU ms, minor faults, pytest exit code, names reported replaced) of one session in a fork."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one pytest session, as the runner runs it
        os.close(read)
        import pytest
        from codemoe.sandbox import honest

        os.chdir(folder)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        honest.reseed()
        reporter = _Quiet("bench", graded=True, trusted=trusted, pristine=snapshot)
        code = pytest.main(["-q", "-p", "no:cacheprovider", "--rootdir", folder, *args], plugins=[reporter])
        usage = resource.getrusage(resource.RUSAGE_SELF)
        out = [1000 * (usage.ru_utime + usage.ru_stime), usage.ru_minflt, int(code),
               getattr(reporter, "report", {}).get("tampered", [])]
        os.write(write, json.dumps(out).encode())
        os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 65536):
        data += chunk
    os.close(read)
    os.waitpid(pid, 0)
    return tuple(json.loads(data))


def run(tasks_n: int, rounds: int) -> list[dict]:
    registry = build_registry(build_plugin_manager())
    suite = registry.build("suite", {"name": "synthetic-repos", "train_tasks": tasks_n, "heldout_tasks": 0})
    tasks = [repository_task(t) for t in suite.tasks("train")[:tasks_n]]
    with tempfile.TemporaryDirectory(prefix="codemoe-bench-pristine-") as root:
        sessions = []
        for i, task in enumerate(tasks):
            request = grading_request(task, task.gold_files(), Limits(), "gold")
            folder = os.path.join(root, f"t{i}")
            for path, text in request.files.items():
                target = Path(folder, path)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
            sessions.append((task.id, folder, list(request.command or []), frozenset(request.trusted)))
        worker._warm_up()
        worker._index_and_snapshot()
        gc.collect()
        gc.freeze()
        snapshot = pristine.taken()
        measured: dict[bool, list[tuple]] = {True: [], False: []}
        for r in range(rounds):
            for j, (task_id, folder, args, trusted) in enumerate(sessions):
                for check in ((True, False) if (r + j) % 2 == 0 else (False, True)):
                    cpu, faults, code, tampered = _session(folder, args, trusted, snapshot if check else None)
                    if code != 0 or tampered:
                        raise SystemExit(f"{task_id}: pytest exit {code}, replaced {tampered} (check {check})")
                    measured[check].append((cpu, faults))
    cases = []
    for index, (case, units) in enumerate((("CPU time per graded session", "CPU ms per session"),
                                           ("page faults per graded session", "minor faults per session"))):
        ours = statistics.median(m[index] for m in measured[True])
        theirs = statistics.median(m[index] for m in measured[False])
        cases.append({"case": case, "codemoe": ours, "anchor": theirs, "ratio": theirs / ours, "units": units})
    return cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=45, help="synthetic-repos train tasks (5 of each family)")
    parser.add_argument("--rounds", type=int, default=3, help="sessions of each task on each side")
    parser.add_argument("--json", type=Path, help="write the cases as JSON here")
    args = parser.parse_args(argv)
    cases = run(args.tasks, args.rounds)
    print(f"{'case':<40} {'codemoe':>9} {'anchor':>9} {'ratio':>7}  units")
    for c in cases:
        print(f"{c['case']:<40} {c['codemoe']:>9.2f} {c['anchor']:>9.2f} {c['ratio']:>6.3f}x  {c['units']}")
    if args.json:
        args.json.write_text(json.dumps({"tasks": args.tasks, "rounds": args.rounds, "cases": cases}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
