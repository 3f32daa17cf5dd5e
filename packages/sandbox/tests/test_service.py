"""The HTTP service and the ``remote`` executor, on loopback with a free port."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys

import pytest
from codemoe.sandbox import ExecutionRequest, Limits, RemoteError, RemoteExecutor, function_task_request
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
