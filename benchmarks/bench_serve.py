"""``codemoe serve``'s two HTTP transports, and the standard-library one before its fixes, same run.

All sides serve the same ``ServingApp`` code over their own embedded engine on the same checkpoint
(the ``tiny`` MoE preset, random weights, a tokenizer trained here); only the HTTP layer differs:

- ``stdlib``: ``codemoe.serving.server.ApiServer``, the default (threaded standard-library server);
- ``fastapi``: ``codemoe.serving.server_fastapi.FastApiServer`` (FastAPI + uvicorn, httptools);
- ``before``: ``server.py`` as it was at ``--anchor-rev``, loaded from git (no ``TCP_NODELAY``, so a
  keep-alive response's body waited for the client's delayed ACK; a listen backlog of 5);
- ``unfair``: ``stdlib`` over an engine whose lock is a plain ``threading.RLock``, as the engine's
  was before :class:`codemoe.serving.embedded.FairRLock` (a request thread driving the engine took
  the lock back step after step while other requests waited to submit their prompts).

Ratios: fastapi / stdlib (the issue's rule: FastAPI unless it costs more than 10% of throughput),
stdlib / before (what the two fixes are worth) and stdlib / unfair (what the fair lock is worth). Sides alternate, each keeps its best of ``--repeats``
runs. Cases:

- ``completions``: ``--clients`` threads, each on its own keep-alive connection, send completion
  requests (a 16-token prompt, 16 new tokens, end-of-sequence ignored) until ``--requests`` are
  done: generated tokens per wall second;
- ``streaming``: the same with ``stream: true`` (server-sent events, one per token);
- ``health``: one connection, ``GET /health`` back to back: requests per second (the transport's
  own cost per request, nothing generated).

    python benchmarks/bench_serve.py --repeats 3 --json runs/bench_serve.json
"""

from __future__ import annotations

import argparse
import http.client
import importlib.util
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
SERVER = "packages/serving/src/codemoe/serving/server.py"
CORPUS = ["def add(a, b):\n    return a + b\n", "class Stack:\n    def push(self, x):\n        self.items.append(x)\n"] * 20


def anchor_module(rev: str):
    """The serving transport as it was at ``rev`` (its ``ApiServer``), imported from git."""
    source = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:{SERVER}"], capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "anchor_server.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("anchor_server", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def checkpoint(folder: Path) -> Path:
    from codemoe.core.models import build_model, load_preset, save_pretrained
    from codemoe.core.tokenizer import train_tokenizer

    tokenizer = train_tokenizer(CORPUS, vocab_size=320)
    torch.manual_seed(0)
    model = build_model(load_preset("tiny"), vocab_size=len(tokenizer)).eval()
    return save_pretrained(model, tokenizer, folder / "tiny")


def serve(server_cls, model_dir: Path, unfair: bool = False):
    from codemoe.serving.embedded import EmbeddedEngineConfig, build_embedded_engine
    from codemoe.serving.handlers import ServingApp

    engine = build_embedded_engine(EmbeddedEngineConfig(model_dir=str(model_dir), fair_lock=not unfair))
    return server_cls(ServingApp(engine, "tiny", str(model_dir)), "127.0.0.1", 0).start()


def _connect(host: str, port: int, timeout: float) -> http.client.HTTPConnection:
    """A keep-alive connection with Nagle off (else small requests wait out the peer's delayed ACK)."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    conn.connect()
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


def drive(url: str, clients: int, requests: int, stream: bool, new_tokens: int) -> tuple[float, int]:
    """(wall seconds, tokens generated) of ``requests`` completions over ``clients`` connections."""
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps({"model": "tiny", "prompt": list(range(5, 21)), "max_tokens": new_tokens, "temperature": 1.0,
                       "ignore_eos": True, "stream": stream, "seed": 0})
    left = [requests]
    lock = threading.Lock()
    tokens = [0]

    def client() -> None:
        conn = _connect(host, int(port), 120)
        while True:
            with lock:
                if left[0] == 0:
                    break
                left[0] -= 1
            conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
            assert resp.status == 200, data[:200]
            if stream:
                events = [line for line in data.decode().split("\n\n") if line.startswith("data: ")]
                assert events[-1] == "data: [DONE]", events[-1:]
                got = len(events) - 1
            else:
                got = json.loads(data)["usage"]["completion_tokens"]
            with lock:
                tokens[0] += got
        conn.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start, tokens[0]


def health(url: str, count: int) -> float:
    host, port = url.removeprefix("http://").split(":")
    conn = _connect(host, int(port), 60)
    start = time.perf_counter()
    for _ in range(count):
        conn.request("GET", "/health")
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 200
    elapsed = time.perf_counter() - start
    conn.close()
    return count / elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--anchor-rev", default="20d168a", help="git revision of the standard-library transport")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--requests", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--health-requests", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    from codemoe.serving.server import ApiServer
    from codemoe.serving.server_fastapi import FastApiServer

    sides = {"stdlib": ApiServer, "fastapi": FastApiServer, "before": anchor_module(args.anchor_rev).ApiServer,
             "unfair": ApiServer}
    best: dict[str, dict[str, float]] = {side: {} for side in sides}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = checkpoint(Path(tmp))
        servers = {side: serve(cls, model_dir, unfair=side == "unfair") for side, cls in sides.items()}
        try:
            for server in servers.values():  # warm-up: compile paths, fill the engine's caches
                drive(server.url, args.clients, args.clients, False, args.new_tokens)
            for _ in range(args.repeats):
                for side, server in servers.items():
                    for case, stream in (("completions", False), ("streaming", True)):
                        wall, tokens = drive(server.url, args.clients, args.requests, stream, args.new_tokens)
                        best[side][case] = max(best[side].get(case, 0.0), tokens / wall)
                    best[side]["health"] = max(best[side].get("health", 0.0), health(server.url, args.health_requests))
        finally:
            for server in servers.values():
                server.stop()

    units = {"completions": "generated tokens/s", "streaming": "generated tokens/s (SSE)", "health": "requests/s"}
    rows = []
    print(f"{'case':<12} {'fastapi':>9} {'stdlib':>9} {'ratio':>6} {'before':>9} {'ratio':>6} {'unfair':>9} {'ratio':>6}  units")
    for case, unit in units.items():
        fast, ours, before, unfair = (best[side][case] for side in ("fastapi", "stdlib", "before", "unfair"))
        rows.append({"case": case, "codemoe": round(fast, 1), "anchor": round(ours, 1), "ratio": round(fast / ours, 3),
                     "stdlib_before": round(before, 1), "ratio_stdlib_vs_before": round(ours / before, 3),
                     "stdlib_unfair_lock": round(unfair, 1), "ratio_stdlib_vs_unfair_lock": round(ours / unfair, 3),
                     "units": unit})
        print(f"{case:<12} {fast:>9.1f} {ours:>9.1f} {fast / ours:>5.2f}x {before:>9.1f} {ours / before:>5.2f}x "
              f"{unfair:>9.1f} {ours / unfair:>5.2f}x  {unit}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"benchmark": "bench_serve", "codemoe": "fastapi transport", "anchor": "stdlib transport",
                                         "before": f"stdlib server at {args.anchor_rev}",
                                         "unfair": "stdlib server, engine lock a plain RLock",
                                         "clients": args.clients, "requests": args.requests, "cases": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
