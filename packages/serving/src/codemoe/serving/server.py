"""``codemoe serve``: the HTTP transport of :class:`codemoe.serving.handlers.ServingApp`.

A threaded standard-library server (one thread per connection, HTTP/1.1 keep-alive); request
threads drive the shared engine, so concurrent requests decode in the same batch. Streaming
responses are server-sent events over chunked transfer encoding, ended by ``data: [DONE]``.

It is the default transport, and FastAPI + uvicorn (:mod:`codemoe.serving.server_fastapi`,
``codemoe serve --http fastapi``) the other, because the engine decodes in this process: a
request thread that gets its tokens writes them itself, while uvicorn hands every result back to
its event loop thread, which waits for the GIL the decoding thread holds (up to the 5 ms switch
interval per handoff). ``benchmarks/bench_serve.py`` measures both in one run (``docs/performance.md``).
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from codemoe.serving.handlers import HttpError, ServingApp

__all__ = ["ApiServer"]

_MAX_BODY_BYTES = 64 << 20
BACKLOG = 2048  # connections waiting to be accepted (the standard library's default, 5, resets a rollout's burst)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    app: ServingApp  # set on the subclass ApiServer builds

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the CLI prints its own line
        return

    def _serve(self, method: str) -> None:
        try:
            body = self._read_body() if method == "POST" else None
            status, payload = self.app.handle(method, urlsplit(self.path).path, body)
        except HttpError as exc:
            self._send_json(exc.status, exc.body())
            return
        except Exception as exc:  # an engine failure must reach the client as a 500, not a hung socket
            self._send_json(500, HttpError(500, f"{type(exc).__name__}: {exc}").body())
            raise
        if isinstance(payload, Iterator):
            self._send_events(status, payload)
        else:
            self._send_json(status, payload)

    def _read_body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        if length > _MAX_BODY_BYTES:
            raise HttpError(413, f"request body of {length} bytes exceeds {_MAX_BODY_BYTES}")
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw or b"null")
        except (ValueError, UnicodeDecodeError) as exc:
            raise HttpError(400, f"the request body is not valid JSON: {exc}") from None

    def _send_json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_events(self, status: int, events: Iterator[str]) -> None:
        try:  # the client may leave at any point, the headers included: its generation stops then
            self.send_response(status)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for event in events:
                self._chunk(f"data: {event}\n\n".encode())
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")
        except HttpError as exc:
            self._chunk(f"data: {json.dumps(exc.body())}\n\n".encode())
            self._chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client left; closing the events cancels its generation
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = BACKLOG

    def server_bind(self) -> None:
        # accepted connections inherit it: a response's head and body go out at once instead of the
        # body waiting for the client's delayed ACK (40 ms per keep-alive request otherwise)
        self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().server_bind()


class ApiServer:
    """Serve an app on ``host:port`` (port 0 picks a free one) in a background thread or the foreground."""

    def __init__(self, app: ServingApp, host: str = "127.0.0.1", port: int = 8000) -> None:
        handler = type("Handler", (_Handler,), {"app": app})
        self.httpd = _HTTPServer((host, port), handler)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.server_address
        return f"http://{host}:{port}"

    @property
    def server_address(self) -> tuple[str, int]:
        return tuple(self.httpd.server_address[:2])

    def start(self) -> ApiServer:
        """Serve in a daemon thread; return self."""
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="codemoe-serve", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def stop(self) -> None:
        """Stop serving (the background thread, when started) and close the socket; again: nothing."""
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join()
            self._thread = None
        self.httpd.server_close()

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
