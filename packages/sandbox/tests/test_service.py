"""The HTTP service and the ``remote`` executor, on loopback with a free port."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from codemoe.sandbox import (
    ExecutionRequest,
    ExecutionResult,
    Limits,
    RemoteError,
    RemoteExecutor,
    function_task_request,
)
from codemoe.sandbox.service import TOKEN_ENV, SandboxService

TOKEN = "test-token-4f1d"


@pytest.fixture(scope="module")
def service(executor):
    with SandboxService(executor, token=TOKEN, max_request_bytes=64 * 1024) as svc:
        yield svc


def _requests() -> list[ExecutionRequest]:
    limits = Limits(timeout_s=2.0)
    return [
        function_task_request("def f(x):\n    return x * 2\n", "def check(c):\n    assert c(2) == 4\n", "f", id="ok"),
        function_task_request("def f(x):\n    return x\n", "def check(c):\n    assert c(2) == 4\n", "f", id="bad"),
        ExecutionRequest(files={"m.py": "print('hi')\nraise SystemExit(2)\n"}, command=["python", "m.py"], id="exit2"),
        ExecutionRequest(files={"m.py": "while True:\n    pass\n"}, command=["python", "m.py"], limits=limits,
                         id="loop"),
        ExecutionRequest(files={"test_a.py": "def test_a():\n    assert 1\n\ndef test_b():\n    assert 0\n",
                                "data.bin": b"\x00\xff"}, runner="pytest", id="pytest"),
        ExecutionRequest(command=["cat"], stdin=b"bytes \xff in", id="stdin"),
    ]


def _comparable(result) -> tuple:
    return (result.id, result.status, result.exit_code, result.tests, result.stdout, result.stderr, result.reason)


def test_batch_over_http_matches_the_local_executor(executor, service):
    local = executor.run_batch(_requests())
    remote = RemoteExecutor(service.url, token=TOKEN).run_batch(_requests())
    assert [r.status for r in local] == ["passed", "failed", "failed", "timeout", "failed", "passed"]
    # pytest's own timing line differs between two runs; everything else must be equal
    for a, b in zip(local, remote):
        if a.id == "pytest":
            assert (a.status, a.tests) == (b.status, b.tests)
        else:
            assert _comparable(a) == _comparable(b)


def test_run_and_health(service):
    client = RemoteExecutor(service.url, token=TOKEN)
    assert client.health() == {"status": "ok", "workers": 2}
    result = client.run(ExecutionRequest(command=["python", "-c", "print(6 * 7)"]))
    assert result.status == "passed" and result.stdout == "42\n"


def _post(service, path: str, body: bytes, token: str | None = TOKEN) -> tuple[int, dict]:
    host, port = service.server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=30)
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    conn.request("POST", path, body=body, headers=headers)
    response = conn.getresponse()
    payload = json.loads(response.read())
    conn.close()
    return response.status, payload


def test_bad_requests_get_clear_4xx_errors(service):
    good = json.dumps(ExecutionRequest(command=["true"]).to_dict()).encode()
    assert _post(service, "/run", good)[0] == 200
    status, payload = _post(service, "/run", good, token="wrong")
    assert status == 401 and "token" in payload["error"]
    assert _post(service, "/run", good, token=None)[0] == 401
    status, payload = _post(service, "/run", b"{not json")
    assert status == 400 and "malformed JSON" in payload["error"]
    status, payload = _post(service, "/run", json.dumps({"files": {}, "comand": ["x"]}).encode())
    assert status == 400 and "comand" in payload["error"]
    status, payload = _post(service, "/run", json.dumps({"files": {"../x": "y"}, "command": ["true"]}).encode())
    assert status == 400 and "inside the work dir" in payload["error"]
    status, payload = _post(service, "/run", json.dumps({"files": {"a": "x", "a/b": "y"}, "command": ["true"]}).encode())
    assert status == 400 and "to be a folder" in payload["error"]  # no worker taken, no sandbox fault
    status, payload = _post(service, "/run", json.dumps({"files": {}, "command": ["true"], "env": {"A=B": "x"}}).encode())
    assert status == 400 and "env 'A=B'" in payload["error"]
    oversized = json.dumps(ExecutionRequest(files={"big.txt": "x" * 100_000}, command=["true"]).to_dict()).encode()
    status, payload = _post(service, "/run", oversized)
    assert status == 413 and "over the limit" in payload["error"]
    status, payload = _post(service, "/batch", json.dumps({"requests": "nope"}).encode())
    assert status == 400
    assert _post(service, "/nowhere", good)[0] == 404


def test_remote_errors_name_the_service_and_status(service):
    with pytest.raises(RemoteError) as info:
        RemoteExecutor(service.url, token="wrong").run(ExecutionRequest(command=["true"]))
    assert info.value.status == 401 and "token" in str(info.value)
    with pytest.raises(RemoteError) as info:
        RemoteExecutor("http://127.0.0.1:9", token=TOKEN, timeout_s=2).run(ExecutionRequest(command=["true"]))
    assert info.value.status is None and "unreachable" in str(info.value)
    with pytest.raises(RemoteError, match="no token"):
        RemoteExecutor(service.url, token="")


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # what a background job of a non-interactive shell inherits


@pytest.mark.parametrize(
    ("stop", "launch"),
    [(signal.SIGINT, None), (signal.SIGINT, _ignore_sigint), (signal.SIGTERM, None)],
    ids=["sigint", "sigint-ignored-by-the-launcher", "sigterm"],
)
def test_serve_command_serves_until_interrupted(stop, launch):
    env = {**os.environ, TOKEN_ENV: "cli-token"}
    command = [sys.executable, "-m", "codemoe.sandbox", "serve", "--port", "0", "--workers", "1"]
    server = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env, preexec_fn=launch)
    try:
        banner = server.stderr.readline()
        url = re.search(r"http://[\d.]+:\d+", banner).group(0)
        result = RemoteExecutor(url, token="cli-token").run(ExecutionRequest(command=["python", "-c", "print(2 ** 10)"]))
        assert result.status == "passed" and result.stdout == "1024\n"
    finally:
        server.send_signal(stop)
        try:
            code = server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()  # leave no service behind when it ignored the signal
            raise
    assert code == 0


# --- the service's edge: every malformed, slow or surplus request gets an answer ---------------


class _StubExecutor:
    """Answers every request after ``delay_s`` (or once ``gate`` is set), so load tests need no
    sandbox workers.
    """

    size = 1

    def __init__(self, delay_s: float = 0.0, gate: threading.Event | None = None) -> None:
        self.delay_s, self.gate, self.calls = delay_s, gate, 0

    def run(self, request: ExecutionRequest) -> ExecutionResult:
        self.calls += 1
        if self.gate is not None:
            self.gate.wait(30)
        time.sleep(self.delay_s)
        return ExecutionResult(status="passed", exit_code=0, id=request.id)

    def run_batch(self, requests: list[ExecutionRequest]) -> list[ExecutionResult]:
        return [self.run(r) for r in requests]

    def close(self) -> None:
        pass


def _raw(service, data: bytes, *, timeout_s: float = 5.0, then: bytes = b"") -> tuple[int, dict, dict]:
    """Send ``data`` (then ``then``) on a raw socket, keep it open, read the answer until the
    server closes; (status, headers, JSON body). A reset or a silent close fails the test.
    """
    host, port = service.server.server_address[:2]
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(data)
        if then:
            with contextlib.suppress(OSError):
                sock.sendall(then)
        answer = b""
        while chunk := sock.recv(1 << 16):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head, "the connection was closed without an answer"
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    assert headers.get("content-type") == "application/json", answer[:200]
    return int(lines[0].split()[1]), headers, json.loads(body)


def _post_head(length: str | None, *, extra: str = "") -> bytes:
    lines = ["POST /run HTTP/1.1", "Host: x", f"Authorization: Bearer {TOKEN}"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode()


def test_bad_content_lengths_get_a_json_4xx_and_nothing_past_the_limit_is_read(service):
    limit = service.server.max_request_bytes
    # -1 used to be read as "until the end", past the limit, and the client never got an answer
    status, _, payload = _raw(service, _post_head("-1"), then=b"x" * (limit + 1000))
    assert status == 400 and "Content-Length '-1'" in payload["error"] and "whole number" in payload["error"]
    for bad in ("abc", "1.5", "+12", "0x10", "12 13", "\u0661\u0662"):
        status, _, payload = _raw(service, _post_head(bad))
        assert status == 400 and "Content-Length" in payload["error"], (bad, payload)
    status, _, payload = _raw(service, _post_head(None))
    assert status == 411 and "Content-Length" in payload["error"]
    status, _, payload = _raw(service, _post_head(None, extra="Transfer-Encoding: chunked\r\n"), then=b"0\r\n\r\n")
    assert status == 411 and "chunked" in payload["error"]
    status, _, payload = _raw(service, _post_head("5", extra="Content-Length: 6\r\n"), then=b"{}")
    assert status == 400 and "conflicting" in payload["error"]
    # an oversized body is refused from its headers, before any of it is sent (the old server read
    # up to 256 MiB away first, so this client, which sends nothing, waited for ever)
    started = time.monotonic()
    for huge in (str(10 ** 12), "9" * 40):
        status, _, payload = _raw(service, _post_head(huge))
        assert status == 413 and f"over the limit of {limit} bytes" in payload["error"]
    assert time.monotonic() - started < 4.0
    # a body that ends early is a 400, not a hang
    host, port = service.server.server_address[:2]
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(_post_head("100") + b'{"command":')
        sock.shutdown(socket.SHUT_WR)
        assert b" 400 " in sock.recv(1 << 16).split(b"\r\n")[0]


def test_deep_nesting_non_finite_numbers_and_bad_fields_are_400_with_the_reason(service):
    cases = [
        (b"[" * 30_000, "nested too deeply"),  # the connection used to close without an answer
        (b'{"requests": ' + b"[" * 20_000 + b"]" * 20_000 + b"}", "nested too deeply"),
        (b'{"command": ["true"], "limits": {"timeout_s": NaN}}', "NaN"),  # used to answer 200
        (b'{"command": ["true"], "limits": {"cpu_s": Infinity}}', "Infinity"),
        (b'{"command": ["true"], "limits": {"memory_mb": -Infinity}}', "-Infinity"),
        (b'{"command": ["true"], "limits": {"timeout_s": 1e999}}', "1e999"),
        (b'{"command": ["true"], "limits": {"timeout_s": 1e300}}', "limits.timeout_s"),
        (b'{"command": ["true"], "limits": {"memory_mb": 1.5}}', "limits.memory_mb"),
        (b'{"command": ["true"], "env": ["A=1"]}', "bad request"),  # used to drop the connection
    ]
    for body, reason in cases:
        status, payload = _post(service, "/batch" if b"requests" in body else "/run", body)
        assert status == 400 and reason in payload["error"], (body[:60], payload)
    # what http.server refuses by itself is JSON too, and a 4xx
    assert _raw(service, b"GARBAGE\r\n\r\n")[0] == 400
    assert _raw(service, b"GET /health HTTP/1.1\r\nX: " + b"y" * 70_000 + b"\r\n\r\n")[0] == 431
    assert _raw(service, b"BREW /run HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 501


def test_half_sent_requests_are_dropped_after_the_read_timeout_and_others_are_served(executor):
    with SandboxService(executor, token=TOKEN, read_timeout_s=1.0) as svc:
        host, port = svc.server.server_address[:2]
        head = _post_head("200")
        halves = [head[:10], head[:40], head + b'{"command": ["tr']  # request line, headers, body
        slow = []
        for i in range(60):
            sock = socket.create_connection((host, port), timeout=10)
            sock.sendall(halves[i % 3])
            slow.append(sock)
        started = time.monotonic()
        client = RemoteExecutor(svc.url, token=TOKEN)
        assert client.health()["status"] == "ok"
        served_s = time.monotonic() - started
        answers, closed_after = [], []
        for sock in slow:
            data = b""
            while chunk := sock.recv(1 << 16):  # a socket still held after 10 s fails the test
                data += chunk
            closed_after.append(time.monotonic() - started)
            answers.append(data.split(b"\r\n")[0])
            sock.close()
        assert client.run(ExecutionRequest(command=["python", "-c", "print(1)"])).stdout == "1\n"
    assert served_s < 0.5  # while the 60 slow clients were held, others were answered
    assert max(closed_after) < 4.0  # all dropped one read timeout (1 s) after they started
    assert answers == [b"HTTP/1.1 408 Request Timeout"] * 60


def test_200_concurrent_requests_all_get_200_or_503_with_retry_after_and_none_is_reset():
    stub = _StubExecutor(delay_s=0.2)
    with SandboxService(stub, token=TOKEN, max_in_flight=32) as svc:
        assert svc.server.request_queue_size >= 128  # the listen backlog (the old one was 5)
        host, port = svc.server.server_address[:2]
        body = json.dumps(ExecutionRequest(command=["true"]).to_dict()).encode()
        barrier = threading.Barrier(200)
        outcomes: list[tuple[int, str | None] | BaseException] = []

        def one() -> None:
            conn = http.client.HTTPConnection(host, port, timeout=30)
            try:
                barrier.wait(30)
                conn.request("POST", "/run", body=body,
                             headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
                response = conn.getresponse()
                json.loads(response.read())
                outcomes.append((response.status, response.getheader("Retry-After")))
            except BaseException as exc:  # a reset, a refused connection, a timeout
                outcomes.append(exc)
            finally:
                conn.close()

        threads = [threading.Thread(target=one) for _ in range(200)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    failures = [o for o in outcomes if isinstance(o, BaseException)]
    assert failures == [] and len(outcomes) == 200
    ok = [o for o in outcomes if o[0] == 200]
    busy = [o for o in outcomes if o[0] == 503]
    assert len(ok) + len(busy) == 200 and len(ok) >= 32 and len(busy) == svc.server.busy_answers
    assert all(retry == "1" for _, retry in busy)
    print(f"200 concurrent: {len(ok)} x 200, {len(busy)} x 503 with Retry-After, 0 resets")


def test_the_remote_client_waits_out_a_busy_service():
    gate = threading.Event()
    stub = _StubExecutor(gate=gate)
    with SandboxService(stub, token=TOKEN, max_in_flight=1) as svc:
        holder = threading.Thread(target=RemoteExecutor(svc.url, token=TOKEN).run,
                                  args=(ExecutionRequest(command=["true"]),))
        holder.start()
        while stub.calls == 0:  # the one slot is taken
            time.sleep(0.01)
        with pytest.raises(RemoteError) as info:  # a client that does not wait
            RemoteExecutor(svc.url, token=TOKEN, busy_retry_s=0).run(ExecutionRequest(command=["true"]))
        assert info.value.status == 503 and "busy" in str(info.value)
        def open_once_refused_again() -> None:
            while svc.server.busy_answers < 2:
                time.sleep(0.01)
            gate.set()

        threading.Thread(target=open_once_refused_again, daemon=True).start()
        started = time.monotonic()
        result = RemoteExecutor(svc.url, token=TOKEN).run(ExecutionRequest(command=["true"], id="second"))
        waited = time.monotonic() - started
        holder.join(10)
    assert result.status == "passed" and result.id == "second"
    assert svc.server.busy_answers == 2 and 1.0 <= waited < 5.0  # one Retry-After: 1 waited out


# --- on uvicorn: what its h11 protocol does not bound by itself, the edge does -----------------


class _BigAnswerExecutor(_StubExecutor):
    """Answers with ``stdout_bytes`` of output, more than the sockets' buffers hold."""

    def __init__(self, stdout_bytes: int) -> None:
        super().__init__()
        self.stdout_bytes = stdout_bytes

    def run(self, request: ExecutionRequest) -> ExecutionResult:
        return ExecutionResult(status="passed", exit_code=0, stdout="x" * self.stdout_bytes, id=request.id)


def _open_connections(svc) -> int:
    return len(svc.server.uvicorn.server_state.connections)


def _until(predicate, timeout_s: float) -> float:
    """Seconds until ``predicate()`` held (the test fails past ``timeout_s``)."""
    started = time.monotonic()
    while not predicate():
        assert time.monotonic() - started < timeout_s, "did not happen in time"
        time.sleep(0.02)
    return time.monotonic() - started


def test_a_silent_connection_and_a_client_that_never_reads_its_answer_are_dropped_after_the_read_timeout():
    # uvicorn alone arms no timer before a first request: a connection that sends nothing is held
    # for ever; nor does it bound a client that stops reading its (large) answer
    with SandboxService(_BigAnswerExecutor(32 << 20), token=TOKEN, read_timeout_s=1.0) as svc:
        host, port = svc.server.server_address[:2]
        silent = socket.create_connection((host, port), timeout=10)
        stalled = socket.create_connection((host, port), timeout=10)
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        body = json.dumps(ExecutionRequest(command=["true"]).to_dict()).encode()
        stalled.sendall(_post_head(str(len(body))) + body)  # and never reads the 32 MiB answer
        _until(lambda: _open_connections(svc) == 2, 5.0)
        assert silent.recv(1) == b""  # closed, without an answer: it asked nothing
        assert _until(lambda: _open_connections(svc) == 0, 5.0) < 4.0  # the stalled one is cut off too
        silent.close()
        stalled.close()
        assert RemoteExecutor(svc.url, token=TOKEN).health()["status"] == "ok"


def _arrived_whole(svc, data: bytes) -> socket.socket:
    """A connection to the service whose first read holds all of ``data``: written into a socket
    pair before its server end is handed to the service's event loop. Returns the client end.
    """
    client, server_end = socket.socketpair()
    client.sendall(data)
    server = svc.server.uvicorn
    loop = server.servers[0].get_loop()
    protocol = server.config.http_protocol_class(config=server.config, server_state=server.server_state,
                                                 app_state={}, _loop=loop)
    asyncio.run_coroutine_threadsafe(loop.connect_accepted_socket(lambda: protocol, server_end), loop).result(5)
    return client


def test_a_head_over_the_limit_is_431_even_when_it_arrives_whole():
    # h11's own limit holds only while a head is incomplete: a whole 100 kB head in one read passes it
    stub = _StubExecutor()
    with SandboxService(stub, token=TOKEN) as svc:
        for pad, status, reason in ((100_000, 431, "over 65536 bytes"), (60_000, 400, "bad request")):
            head = _post_head("2", extra="X-Pad: " + "p" * pad + "\r\n") + b"{}"
            with _arrived_whole(svc, head) as sock:
                sock.settimeout(5)
                answer = b""
                while chunk := sock.recv(1 << 16):
                    answer += chunk
            assert answer.startswith(f"HTTP/1.1 {status} ".encode()), answer[:100]
            assert reason in json.loads(answer.partition(b"\r\n\r\n")[2])["error"]  # under it: read, body judged
    assert stub.calls == 0


def test_an_error_answered_before_the_body_arrives_is_read_not_reset():
    # a 413 or 401 is answered from the headers; the client, still sending its body, must read the
    # answer: the edge half-closes and reads the rest away (uvicorn alone closes with it unread)
    with SandboxService(_StubExecutor(), token=TOKEN, max_request_bytes=64 * 1024) as svc:
        for head, status in ((_post_head(str(100_000)), 413),
                             (_post_head(str(60_000)).replace(TOKEN.encode(), b"wrong-token"), 401)):
            for _ in range(5):
                answer = _raw(svc, head, then=b"x" * int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0]))
                assert answer[0] == status and "error" in answer[2]
        _until(lambda: _open_connections(svc) == 0, 3.0)


def test_a_kept_alive_connection_serves_request_after_request():
    with SandboxService(_StubExecutor(), token=TOKEN, read_timeout_s=1.0) as svc:
        host, port = svc.server.server_address[:2]
        conn = http.client.HTTPConnection(host, port, timeout=10)
        body = json.dumps(ExecutionRequest(command=["true"], id="k").to_dict()).encode()
        for _ in range(3):
            conn.request("POST", "/run", body=body, headers={"Authorization": f"Bearer {TOKEN}"})
            response = conn.getresponse()
            assert (response.status, json.loads(response.read())["id"]) == (200, "k")
            time.sleep(0.6)  # 1.8 s in all: each request has its own deadline, not the connection's
        assert _open_connections(svc) == 1
        conn.close()


def test_calls_run_at_once_up_to_max_in_flight_and_connections_past_the_cap_get_503_retry_after():
    gate = threading.Event()
    stub = _StubExecutor(gate=gate)
    with SandboxService(stub, token=TOKEN, max_in_flight=64, max_connections=70) as svc:
        clients = [threading.Thread(target=RemoteExecutor(svc.url, token=TOKEN).run,
                                    args=(ExecutionRequest(command=["true"]),)) for _ in range(64)]
        for t in clients:
            t.start()
        # all 64 are in the executor at once: a thread each (not the 40 of FastAPI's default pool)
        _until(lambda: stub.calls == 64, 10.0)
        host, port = svc.server.server_address[:2]
        idle = [socket.create_connection((host, port), timeout=10) for _ in range(6)]  # 70 open now
        _until(lambda: _open_connections(svc) == 70, 5.0)
        body = json.dumps(ExecutionRequest(command=["true"]).to_dict()).encode()
        status, headers, payload = _raw(svc, _post_head(str(len(body))) + body)
        gate.set()
        for t in clients:
            t.join(10)
        for sock in idle:
            sock.close()
    assert status == 503 and headers["retry-after"] == "1" and "70 connections" in payload["error"]
    assert svc.server.busy_answers == 1 and stub.calls == 64


def test_serve_command_stops_on_sigterm_after_its_calls_without_a_traceback():
    # a join interrupted by the signal handler's exception once let the socket close under
    # uvicorn's own shutdown, a traceback on stderr (the exit code was still 0)
    env = {**os.environ, TOKEN_ENV: "cli-token"}
    command = [sys.executable, "-m", "codemoe.sandbox", "serve", "--port", "0", "--workers", "1"]
    server = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    try:
        banner = server.stderr.readline()
        url = re.search(r"http://[\d.]+:\d+", banner).group(0)
        assert RemoteExecutor(url, token="cli-token").health()["status"] == "ok"
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            _, stderr = server.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            raise
    assert server.returncode == 0
    assert "Traceback" not in stderr and '"GET /health HTTP/1.1" 200' in stderr, stderr[-2000:]
