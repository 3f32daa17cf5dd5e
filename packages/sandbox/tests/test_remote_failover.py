"""The ``remote`` executor over several sandbox services: a service killed mid-batch costs time, not verdicts."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from codemoe.sandbox import ExecutionRequest, Limits, RemoteError, RemoteExecutor, function_task_request
from codemoe.sandbox.service import TOKEN_ENV

TOKEN = "failover-token-9c2e"


def _launch() -> tuple[subprocess.Popen, str]:
    """``codemoe sandbox serve`` in its own process (its workers die with it: PR_SET_PDEATHSIG)."""
    command = [sys.executable, "-m", "codemoe.sandbox", "serve", "--port", "0", "--workers", "2"]
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env={**os.environ, TOKEN_ENV: TOKEN})
    url = re.search(r"http://[\d.]+:\d+", proc.stderr.readline()).group(0)
    return proc, url


@pytest.fixture
def two_services():
    launched = [_launch(), _launch()]
    yield launched
    for proc, _ in launched:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


def _requests() -> list[ExecutionRequest]:
    """Twelve programs of known verdict; each sleeps, so a chunk is still running when a service dies."""
    slow = "import time\ntime.sleep(0.3)\n"
    out = []
    for i in range(12):
        body = f"{slow}def f(x):\n    return x * {2 if i % 3 else 3}\n"
        out.append(function_task_request(body, "def check(c):\n    assert c(2) == 4\n", "f", id=f"r{i}",
                                         limits=Limits(timeout_s=10.0)))
    return out


def _verdicts(results) -> list[tuple[str, str]]:
    return [(r.id, r.status) for r in results]


def test_a_service_killed_mid_batch_costs_time_not_verdicts(two_services):
    (victim, first), (_, second) = two_services
    want = [(f"r{i}", "passed" if i % 3 else "failed") for i in range(12)]
    started = time.monotonic()
    healthy = RemoteExecutor([first, second], token=TOKEN, batch_size=2).run_batch(_requests())
    healthy_s = time.monotonic() - started
    assert _verdicts(healthy) == want

    client = RemoteExecutor([first, second], token=TOKEN, batch_size=2, timeout_s=30)
    # Each service's queue holds three chunks of ~0.3 s and more: at 0.5 s the victim is mid-queue.
    killer = threading.Timer(0.5, victim.kill)
    killer.start()
    started = time.monotonic()
    with pytest.warns(RuntimeWarning, match=re.escape(first)):
        got = client.run_batch(_requests())
    failover_s = time.monotonic() - started
    killer.join()
    print(f"12 requests of 0.3 s over two services: {healthy_s:.2f} s healthy, {failover_s:.2f} s with one killed")
    assert victim.wait(10) == -signal.SIGKILL
    assert _verdicts(got) == want  # every request answered once, in order, none lost
    health = client.health()
    assert health["status"] == "degraded"
    assert [s["status"] for s in health["services"]] == ["unreachable", "ok"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_every_service_down_is_a_remote_error_naming_each():
    urls = [f"http://127.0.0.1:{_free_port()}", f"http://127.0.0.1:{_free_port()}"]
    started = time.monotonic()
    with pytest.raises(RemoteError, match="every sandbox service failed") as info, \
            pytest.warns(RuntimeWarning, match="go to"):  # the first one's request went to the second
        RemoteExecutor(urls, token=TOKEN, timeout_s=2).run_batch([ExecutionRequest(command=["true"])])
    assert all(url in str(info.value) for url in urls) and "unreachable" in str(info.value)
    assert time.monotonic() - started < 5  # refused connections fail fast: no waiting out a timeout


def test_a_4xx_is_not_sent_to_the_other_services(two_services):
    (_, first), (_, second) = two_services
    client = RemoteExecutor([first, second], token="wrong-token", batch_size=1)
    with pytest.raises(RemoteError) as info:
        client.run_batch([ExecutionRequest(command=["true"], id=f"x{i}") for i in range(2)])
    assert info.value.status == 401
    assert str(info.value).startswith("sandbox service http") and "every sandbox service" not in str(info.value)
    # neither service was left out for the caller's mistake
    assert [s["status"] for s in RemoteExecutor([first, second], token=TOKEN).health()["services"]] == ["ok", "ok"]


# what a broken (or hostile) service may answer: the client gives a RemoteError, never another exception
BAD_ANSWERS = {
    "JSON nested past the stack, 200": (200, b"[" * 100_000 + b"]" * 100_000),
    "JSON nested past the stack, 500": (500, b"[" * 100_000 + b"]" * 100_000),
    "results of the wrong types": (200, b'{"results": [{"status": "passed", "id": "a", "tests": [1], "stdout": [1]}, '
                                        b'{"status": "passed", "id": "b", "tests": {"t": 1}}]}'),
    "not JSON": (200, b"<html>"),
}


@pytest.mark.parametrize("answer", list(BAD_ANSWERS.values()), ids=list(BAD_ANSWERS))
def test_a_malformed_answer_is_a_remote_error(answer):
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    code, body = answer

    class Bad(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Bad)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = RemoteExecutor(f"http://127.0.0.1:{server.server_address[1]}", token=TOKEN, timeout_s=5)
        with pytest.raises(RemoteError):
            client.run_batch([ExecutionRequest(command=["true"], id="a"), ExecutionRequest(command=["true"], id="b")])
    finally:
        server.shutdown()
        server.server_close()
