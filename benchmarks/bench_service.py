"""The sandbox service on FastAPI + uvicorn against the standard-library server it replaced, same run.

    python benchmarks/bench_service.py [--workers N] [--clients C] [--bursts K] [--json PATH]

Each server runs in a process of its own, as ``codemoe sandbox serve`` does, with a
``LocalExecutor`` of ``--workers`` warm workers (warmed before timing); the anchor is the old
``ThreadingHTTPServer`` service, loaded from ``packages/sandbox/src/codemoe/sandbox/service.py`` at
commit :data:`STDLIB_COMMIT` (the last one that changed it before the port). Both servers are up at
once and driven by the same client in this process (the ``remote`` executor, one connection per
call as it does), in short bursts that alternate between them, so the load other jobs put on the
machine falls on both alike; each figure is the median over ``--bursts``. Cases (ratio: how many
times better codemoe is, higher is better):

- ``/batch, P programs in chunks of B, C clients``: executions/s of small programs (an asserts
  check of a one-line function), ``P`` per burst cut into chunks of ``B`` sent by ``C`` threads;
- ``/run, C concurrent clients``: executions/s of the same programs, one per call, ``C`` threads;
- ``service CPU per /run call``: CPU ms of the service's own process (its threads; not the
  workers, which are the same on both sides) per call in those bursts: the HTTP layer's cost, which
  hardly depends on what else the machine runs;
- ``/run with an instant executor, C concurrent clients``: calls/s when the executor answers at
  once, the HTTP layer's own ceiling (what it would cost on a machine with many more workers);
- ``/health overhead (median)``: ms per call, one at a time.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from codemoe.sandbox import ExecutionRequest, ExecutionResult, LocalExecutor, RemoteExecutor, function_task_request
from codemoe.sandbox.local import default_workers
from codemoe.sandbox.service import SandboxService

REPO = Path(__file__).resolve().parents[1]
STDLIB_COMMIT = "c3d2f4a5716bf59828ce4041b830825209ac16a7"
STDLIB_PATH = "packages/sandbox/src/codemoe/sandbox/service.py"
TOKEN = "bench-service"
UNITS = {"/health overhead (median)": "ms per call", "service CPU per /run call": "CPU ms per call"}


def stdlib_service_class() -> type:
    """``SandboxService`` of the standard-library server, from the commit before the port."""
    source = subprocess.run(["git", "-C", str(REPO), "show", f"{STDLIB_COMMIT}:{STDLIB_PATH}"],
                            capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp(prefix="codemoe-bench-service-")) / "stdlib_service.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("codemoe_stdlib_service", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SandboxService


class InstantExecutor:
    """Answers every request at once: what is left is the HTTP layer's own cost."""

    size = 1

    def run(self, request: ExecutionRequest) -> ExecutionResult:
        return ExecutionResult(status="passed", exit_code=0, id=request.id)

    def run_batch(self, requests: list[ExecutionRequest]) -> list[ExecutionResult]:
        return [self.run(r) for r in requests]


def programs(count: int) -> list[ExecutionRequest]:
    return [function_task_request(f"def f(x):\n    return x + {i}\n", f"def check(c):\n    assert c(1) == {1 + i}\n",
                                  "f", id=f"p{i}") for i in range(count)]


def _batch_rate(url: str, requests: list[ExecutionRequest], chunk: int, clients: int) -> float:
    client = RemoteExecutor(url, token=TOKEN, batch_size=chunk)
    chunks = [requests[s:s + chunk] for s in range(0, len(requests), chunk)]
    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        results = [r for part in pool.map(client.run_batch, chunks) for r in part]
    seconds = time.perf_counter() - started
    assert all(r.passed for r in results), [r.status for r in results if not r.passed][:4]
    return len(results) / seconds


def _post_run(url: str, request: ExecutionRequest) -> ExecutionResult:
    """One ``POST /run``, one connection, as the ``remote`` client makes its calls (its own ``run``
    sends a one-request ``/batch``)."""
    call = urllib.request.Request(url + "/run", data=json.dumps(request.to_dict()).encode(), method="POST",
                                  headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    with urllib.request.urlopen(call, timeout=60) as response:
        return ExecutionResult.from_dict(json.loads(response.read()))


def _run_rate(url: str, requests: list[ExecutionRequest], clients: int) -> float:
    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(functools.partial(_post_run, url), requests))
    seconds = time.perf_counter() - started
    assert all(r.passed for r in results), [r.status for r in results if not r.passed][:4]
    return len(results) / seconds


def _health_ms(url: str, calls: int) -> float:
    client = RemoteExecutor(url, token=TOKEN)
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        client.health()
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


@contextlib.contextmanager
def served(kind: str, executor: str, workers: int) -> Iterator[tuple[str, int]]:
    """A service (``new`` or ``stdlib``) in a process of its own; yields its URL and pid."""
    command = [sys.executable, __file__, "--serve", kind, "--executor", executor, "--workers", str(workers)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        yield proc.stdout.readline().strip(), proc.pid
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def _serve(kind: str, executor: str, workers: int) -> int:
    """The ``--serve`` mode: serve until SIGTERM, the URL on stdout."""
    service_class = SandboxService if kind == "new" else stdlib_service_class()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.ExitStack() as stack:
        backend = InstantExecutor() if executor == "instant" else stack.enter_context(LocalExecutor(workers=workers))
        svc = stack.enter_context(service_class(backend, token=TOKEN))
        print(svc.url, flush=True)
        stop.wait()
    return 0


def _cpu_s(pid: int) -> float:
    """CPU seconds of process ``pid``'s own threads (not its children)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def _bursts(servers: dict[str, tuple[str, int]], bursts: int, case: Any) -> dict[str, list]:
    """``case(url, pid)`` on each server in turn, ``bursts`` times, the order alternating."""
    out: dict[str, list] = {kind: [] for kind in servers}
    for k in range(bursts):
        for kind in (list(servers) if k % 2 == 0 else list(servers)[::-1]):
            out[kind].append(case(*servers[kind]))
    return out


def run(args: argparse.Namespace) -> list[dict]:
    requests = programs(args.programs)
    chunk_case = f"/batch, {args.programs} programs in chunks of {args.chunk}, {args.clients} clients"
    measured: dict[str, dict[str, list[float]]] = {}
    with served("new", "local", args.workers) as new, served("stdlib", "local", args.workers) as old:
        servers = {"new": new, "stdlib": old}
        for url, _ in servers.values():
            _run_rate(url, requests[:64], args.clients)  # warm-up: workers, connections, code paths
        measured[chunk_case] = _bursts(servers, args.bursts,
                                       lambda url, pid: _batch_rate(url, requests, args.chunk, args.clients))

        def run_case(url: str, pid: int) -> tuple[float, float]:
            cpu = _cpu_s(pid)
            rate = _run_rate(url, requests, args.clients)
            return rate, 1000 * (_cpu_s(pid) - cpu) / len(requests)

        pairs = _bursts(servers, args.bursts, run_case)
        measured[f"/run, {args.clients} concurrent clients"] = {k: [p[0] for p in v] for k, v in pairs.items()}
        measured["service CPU per /run call"] = {k: [p[1] for p in v] for k, v in pairs.items()}
        measured["/health overhead (median)"] = _bursts(servers, args.bursts,
                                                        lambda url, pid: _health_ms(url, args.health_calls))
    with served("new", "instant", args.workers) as new, served("stdlib", "instant", args.workers) as old:
        servers = {"new": new, "stdlib": old}
        for url, _ in servers.values():
            _run_rate(url, requests[:64], args.clients)
        measured[f"/run with an instant executor, {args.clients} concurrent clients"] = _bursts(
            servers, args.bursts, lambda url, pid: _run_rate(url, requests, args.clients))
    cases = []
    for case, per_kind in measured.items():
        mine, anchor = statistics.median(per_kind["new"]), statistics.median(per_kind["stdlib"])
        units = UNITS.get(case, "calls/s" if "instant" in case else "executions/s")
        ratio = anchor / mine if "ms" in units else mine / anchor
        cases.append({"case": case, "codemoe": mine, "anchor": anchor, "ratio": ratio, "units": units})
    return cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=default_workers(), help="warm workers (default: CPUs)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent client threads")
    parser.add_argument("--programs", type=int, default=128, help="small programs per burst")
    parser.add_argument("--chunk", type=int, default=32, help="requests per /batch call")
    parser.add_argument("--health-calls", type=int, default=50, help="calls per burst for the median /health overhead")
    parser.add_argument("--bursts", type=int, default=15, help="bursts per case and server; report medians")
    parser.add_argument("--json", type=Path, help="write the cases as JSON here")
    parser.add_argument("--serve", choices=["new", "stdlib"], help=argparse.SUPPRESS)
    parser.add_argument("--executor", choices=["local", "instant"], default="local", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        return _serve(args.serve, args.executor, args.workers)
    cases = run(args)
    print(f"{'case':<62} {'codemoe':>9} {'anchor':>9} {'ratio':>7}  units")
    for c in cases:
        print(f"{c['case']:<62} {c['codemoe']:>9.1f} {c['anchor']:>9.1f} {c['ratio']:>6.2f}x  {c['units']}")
    if args.json:
        meta = {"workers": args.workers, "clients": args.clients, "bursts": args.bursts, "programs": args.programs,
                "anchor": f"{STDLIB_PATH} at {STDLIB_COMMIT} (ThreadingHTTPServer)"}
        args.json.write_text(json.dumps({**meta, "cases": cases}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
