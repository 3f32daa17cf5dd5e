"""The remote engines over several servers: a killed server costs time, not samples.

Servers are ``codemoe serve`` processes on loopback (killed with SIGKILL, so a request in flight
gets a reset) or in-process ones of the same checkpoint; the reference is one healthy server.
"""

from __future__ import annotations

import http.server
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings

import pytest
from codemoe.core import build_plugin_manager, build_registry
from codemoe.core.errors import ConfigError
from codemoe.serving import EngineError, RequestError, SamplingParams
from codemoe.serving.embedded import EmbeddedEngine, EmbeddedEngineConfig, build_embedded_engine
from codemoe.serving.handlers import ServingApp
from codemoe.serving.server import ApiServer

PROMPTS = [[5 + i, 6 + 2 * i, 7 + 3 * i] for i in range(12)]
SEEDED = SamplingParams(n=2, temperature=1.0, max_new_tokens=40, seed=11, ignore_eos=True)


@pytest.fixture(scope="module")
def registry():
    return build_registry(build_plugin_manager())


def tokens(outputs):
    return [[s.token_ids for s in o.samples] for o in outputs]


def _launch(model_dir) -> subprocess.Popen:
    """``codemoe serve`` of the checkpoint in its own process, on a free port."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    command = [sys.executable, "-m", "codemoe.core", "serve", str(model_dir), "--port", "0", "--device", "cpu"]
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)


def _url(proc: subprocess.Popen) -> str:
    line = proc.stdout.readline()
    match = re.search(r"http://[\d.]+:\d+", line)
    assert match, f"codemoe serve printed {line!r}"
    return match.group(0)


@pytest.fixture(scope="module")
def two_processes(model_dir):
    procs = [_launch(model_dir), _launch(model_dir)]  # both start at once
    try:
        yield [(proc, _url(proc)) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(30)


class _KillOnGenerate:
    """A loopback relay in front of a server process: requests pass through until it is armed; the
    first ``POST /generate`` after that reaches the server, which is then SIGKILLed while working on
    it, and the client's connection closes unanswered. The kill lands inside the call by design, not
    by a race with how fast the server answers."""

    def __init__(self, target: str, victim: subprocess.Popen) -> None:
        self.target = target.removeprefix("http://").split(":")
        self.victim, self.armed, self.killed = victim, threading.Event(), threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        with client:
            request = _read_request(client)
            kill = self.armed.is_set() and request.startswith(b"POST /generate")
            try:
                upstream = socket.create_connection((self.target[0], int(self.target[1])))
            except OSError:
                return  # the server is gone: the client's connection closes unanswered
            with upstream:
                upstream.sendall(request)
                if kill:
                    time.sleep(0.05)  # the server has the request and works on it
                    self.victim.kill()
                    self.victim.wait()
                    self.killed.set()
                    return
                try:
                    while chunk := upstream.recv(1 << 16):
                        client.sendall(chunk)
                except OSError:  # the client went away first
                    return

    def close(self) -> None:
        self.listener.close()


def _read_request(sock: socket.socket) -> bytes:
    """One HTTP request (headers and a Content-Length body) as sent by urllib (Connection: close)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(1 << 16)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    found = re.search(rb"(?i)content-length:\s*(\d+)", head)
    length = int(found.group(1)) if found else 0
    while len(body) < length:
        chunk = sock.recv(1 << 16)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def test_a_server_killed_mid_call_gives_the_samples_of_one_healthy_server(registry, two_processes):
    (victim, direct), (_, second) = two_processes  # module-scoped: this test kills one, so it runs once
    relay = _KillOnGenerate(direct, victim)
    first = relay.url
    want = tokens(registry.build("engine", {"name": "sglang", "base_url": second}).generate(PROMPTS, SEEDED))
    engine = registry.build("engine", {"name": "sglang", "base_url": [first, second], "timeout_s": 60})
    started = time.monotonic()
    assert tokens(engine.generate(PROMPTS, SEEDED)) == want  # both up: half the prompts each
    healthy_s = time.monotonic() - started
    relay.armed.set()  # the next call's part for the first server kills it while it samples

    started = time.monotonic()
    with pytest.warns(RuntimeWarning, match=rf"{re.escape(first)} failed .*go to {re.escape(second)}"):
        got = engine.generate(PROMPTS, SEEDED)
    failover_s = time.monotonic() - started
    relay.close()
    assert relay.killed.is_set()
    print(f"12 prompts x 2 samples x 40 tokens over two servers: {healthy_s:.2f} s healthy, "
          f"{failover_s:.2f} s with one killed mid-call")
    assert victim.wait(10) == -signal.SIGKILL
    assert tokens(got) == want  # seeds follow the prompt's index in the whole call, not the server
    health = engine.health()
    assert health["status"] == "degraded"
    assert [s["status"] for s in health["servers"]] == ["unreachable", "ok"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # the dead one is left out: nothing fails again
        assert tokens(engine.generate(PROMPTS, SEEDED)) == want


def _free_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_every_server_down_is_an_engine_error_naming_each(registry):
    urls = [_free_url(), _free_url()]
    for name in ("sglang", "openai"):
        engine = registry.build("engine", {"name": name, "base_url": urls, "timeout_s": 2})
        with pytest.raises(EngineError, match="failed on every server") as info:  # both parts fail in one round
            engine.generate([[5, 6], [7, 8]], SamplingParams(max_new_tokens=2))
        assert all(f"[{url}]" in str(info.value) for url in urls) and "Connection refused" in str(info.value)
        assert engine.health()["status"] == "unreachable"


@pytest.fixture
def counting():
    """A loopback server that answers every POST with HTTP 400 and counts them."""
    posts = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            posts.append(self.path)
            body = b'{"error": {"message": "bad request"}}'
            self.send_response(400)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", posts
    httpd.shutdown()
    httpd.server_close()


def test_a_4xx_is_not_sent_to_another_server(registry, counting, server):
    url, posts = counting
    engine = registry.build("engine", {"name": "sglang", "base_url": [url, server.url]})
    with pytest.raises(RequestError, match="HTTP 400"):
        engine.generate([[5, 6]], SamplingParams(max_new_tokens=2))  # one prompt: one part, to the first
    assert posts == ["/generate"]  # sent once, and the healthy second server was not asked to redo it
    assert engine.health()["status"] == "degraded"  # the counting server has no /health; it is not "down"


@pytest.fixture
def serve_checkpoint(model_dir):
    """``serve_checkpoint(port=0)``: an in-process ``codemoe serve`` of the saved checkpoint (its
    original weights), started; all are stopped at the end."""
    running = []

    def start(port: int = 0) -> ApiServer:
        engine = build_embedded_engine(EmbeddedEngineConfig(model_dir=str(model_dir)))
        api = ApiServer(ServingApp(engine, "tiny-moe", str(model_dir)), "127.0.0.1", port).start()
        running.append(api)
        return api

    yield start
    for api in running:
        api.stop()


def _stop(api: ApiServer) -> int:
    api.stop()
    return api.server_address[1]


def test_a_server_that_missed_an_update_never_serves_old_weights(
    registry, serve_checkpoint, make_codemoe_model, tokenizer, tmp_path
):
    a, b = serve_checkpoint(), serve_checkpoint()
    engine = registry.build(
        "engine",
        {"name": "sglang", "base_url": [a.url, b.url], "sync_dir": str(tmp_path / "sync"), "cooldown_s": 0},
        model=make_codemoe_model(0),
        tokenizer=tokenizer,
    )
    greedy = SamplingParams(temperature=0, max_new_tokens=6, ignore_eos=True)
    new = make_codemoe_model(8)
    want = tokens(EmbeddedEngine(new, tokenizer).generate(PROMPTS[:4], greedy))
    old = tokens(engine.generate(PROMPTS[:4], greedy))
    assert old != want

    # b is down at update time, then comes back on the checkpoint's (old) weights
    port = _stop(b)
    with pytest.warns(RuntimeWarning, match=rf"did not reach {re.escape(b.url)}"):
        engine.update_weights(state_dict=new.state_dict())
    b = serve_checkpoint(port)
    assert tokens(engine.generate(PROMPTS[:4], greedy)) == want  # all from a: b is stale, cooldown or not
    assert "missed the weight update" in engine.health()["servers"][1]["stale"]

    # both take the next update; then b restarts on old weights behind the engine's back
    engine.update_weights(state_dict=new.state_dict())
    assert tokens(engine.generate(PROMPTS[:4], greedy)) == want
    _stop(b)
    b = serve_checkpoint(port)
    with pytest.warns(RuntimeWarning, match=r"sampled with weight_version 'default'"):
        assert tokens(engine.generate(PROMPTS[:4], greedy)) == want  # b's half caught and re-sent to a


def test_a_server_refusing_the_weights_is_an_engine_error_naming_it(registry, serve_checkpoint, tmp_path):
    a, b = serve_checkpoint(), serve_checkpoint()
    engine = registry.build("engine", {"name": "sglang", "base_url": [a.url, b.url]})
    with pytest.raises(EngineError, match=rf"{re.escape(a.url)} refused the weights.*{re.escape(b.url)} refused"):
        engine.update_weights(path=str(tmp_path / "nowhere"))


def test_bad_server_lists_are_config_errors_naming_the_key(registry):
    for bad in ([], ["http://a:1", "http://a:1"], ["a:1"]):
        with pytest.raises(ConfigError, match="base_url"):
            registry.build("engine", {"name": "sglang", "base_url": bad})
    with pytest.raises(ConfigError, match="retry_rounds"):
        registry.build("engine", {"name": "openai", "retry_rounds": 0})


def test_openai_parts_keep_their_seed_whichever_server_draws_them(server, registry, two_processes):
    (_, _), (_, second) = two_processes
    healthy = registry.build("engine", {"name": "openai", "base_url": [second, server.url]})
    want = tokens(healthy.generate(PROMPTS, SEEDED))
    swapped = registry.build("engine", {"name": "openai", "base_url": [server.url, second]})
    assert tokens(swapped.generate(PROMPTS, SEEDED)) == want  # the same split, the parts on other servers
    # a server down at the call's start: its part goes whole, with its seed, to the other one
    failing = registry.build("engine", {"name": "openai", "base_url": [_free_url(), server.url], "timeout_s": 2})
    with pytest.warns(RuntimeWarning, match="go to"):
        assert tokens(failing.generate(PROMPTS, SEEDED)) == want
