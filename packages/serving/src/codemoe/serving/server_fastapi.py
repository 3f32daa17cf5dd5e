"""``codemoe serve --http fastapi``: :class:`codemoe.serving.handlers.ServingApp` on FastAPI + uvicorn.

The other transport (the default is the standard library's, :mod:`codemoe.serving.server`; the
module docstring there says why), for deployments that want the ASGI ecosystem in front of the
engine: middleware, an ASGI mount, uvicorn's workers and limits. Same routes, same answers, same
tests (``packages/serving/tests/test_server.py`` runs against both). Needs the extra:
``pip install 'codemoe-serving[fastapi]'``.

The app's routes, validation and errors live in ``ServingApp.handle(method, path, body)``; this
module only moves bytes. Each request's call into the app runs on a worker thread (the engine
blocks until its tokens are ready), so concurrent requests decode in the same batch; the pool is
sized for a rollout's worth of requests in flight, not anyio's default of 40. Streaming responses
are server-sent events, ``data: <json>`` per event and ``data: [DONE]`` at the end, as the OpenAI
API sends them. A stream is produced on a thread of its own that stops, and closes the app's
iterator (which cancels the generation), at the first event after the client has left.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterator
from typing import Any

from codemoe.serving.handlers import HttpError, ServingApp

try:
    import anyio.to_thread
    import uvicorn
    from fastapi import FastAPI, Request
    from fastapi.responses import Response, StreamingResponse
    from starlette.concurrency import run_in_threadpool
except ImportError as exc:  # an optional transport
    raise ImportError(f"codemoe serve --http fastapi needs its extra: pip install 'codemoe-serving[fastapi]' ({exc})") from exc

__all__ = ["FastApiServer", "build_asgi_app"]

_MAX_BODY_BYTES = 64 << 20
BACKLOG = 2048  # connections waiting to be accepted
REQUEST_THREADS = 512  # requests in the app at once (each holds a thread while its tokens decode)


def _json(status: int, payload: Any) -> Response:
    return Response(json.dumps(payload), status_code=status, media_type="application/json")


async def _read_json(request: Request) -> Any:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > _MAX_BODY_BYTES:
        raise HttpError(413, f"request body of {declared} bytes exceeds {_MAX_BODY_BYTES}")
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > _MAX_BODY_BYTES:
            raise HttpError(413, f"request body exceeds {_MAX_BODY_BYTES} bytes")
    try:
        return json.loads(bytes(raw) or b"null")
    except (ValueError, UnicodeDecodeError) as exc:
        raise HttpError(400, f"the request body is not valid JSON: {exc}") from None


async def _events(events: Iterator[str]) -> AsyncIterator[bytes]:
    """The app's events as SSE frames; the iteration runs on its own thread and is closed there.

    Frames cross to the event loop through a deque with at most one wake-up in flight, and the
    loop sends every frame that has arrived by then in one write: under load, one send per engine
    step's worth of tokens rather than one per token.
    """
    loop = asyncio.get_running_loop()
    pending: deque[bytes | None] = deque()
    ready = asyncio.Event()
    waking = threading.Lock()  # held from a wake-up's scheduling until the loop has run it
    left = threading.Event()

    def wake() -> None:
        waking.release()
        ready.set()

    def put(frame: bytes | None) -> None:
        pending.append(frame)
        if waking.acquire(blocking=False):
            loop.call_soon_threadsafe(wake)

    def produce() -> None:
        try:
            for event in events:
                if left.is_set():
                    return
                put(f"data: {event}\n\n".encode())
            put(b"data: [DONE]\n\n")
        except HttpError as exc:  # after the headers an error can only be an event
            put(f"data: {json.dumps(exc.body())}\n\n".encode())
        except Exception as exc:
            put(f"data: {json.dumps(HttpError(500, f'{type(exc).__name__}: {exc}').body())}\n\n".encode())
            raise
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()  # on this thread, the one that iterated: cancels what is still generating
            put(None)

    threading.Thread(target=produce, name="codemoe-serve-stream", daemon=True).start()
    try:
        while True:
            await ready.wait()
            ready.clear()
            frames = []
            while pending:
                frame = pending.popleft()
                if frame is None:
                    if frames:
                        yield b"".join(frames)
                    return
                frames.append(frame)
            if frames:
                yield b"".join(frames)
    finally:
        left.set()  # the client left, or the stream ended: either way the producer stops


def build_asgi_app(app: ServingApp) -> FastAPI:
    """The FastAPI application serving ``app``: every path goes to ``app.handle``."""
    api = FastAPI(title="codemoe serve", docs_url=None, redoc_url=None, openapi_url=None)

    @api.api_route("/{path:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH"])
    async def serve(request: Request, path: str) -> Response:
        try:
            body = await _read_json(request) if request.method == "POST" else None
            status, payload = await run_in_threadpool(app.handle, request.method, request.url.path, body)
        except HttpError as exc:
            return _json(exc.status, exc.body())
        except Exception as exc:  # an engine failure must reach the client as a 500, not a hung socket
            return _json(500, HttpError(500, f"{type(exc).__name__}: {exc}").body())
        if isinstance(payload, Iterator):
            return StreamingResponse(_events(payload), status_code=status, media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        return _json(status, payload)

    return api


class FastApiServer:
    """Serve an app on ``host:port`` (port 0 picks a free one) in a background thread or the foreground."""

    def __init__(self, app: ServingApp, host: str = "127.0.0.1", port: int = 8000) -> None:
        self.app = app
        self.socket = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart may reuse the port
        # accepted connections inherit it: a response's head and body go out at once, never held
        # back for the client's delayed ACK (40 ms per keep-alive request otherwise)
        self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.socket.bind((host, port))
        self.socket.listen(BACKLOG)
        self.server_address = self.socket.getsockname()[:2]
        config = uvicorn.Config(build_asgi_app(app), log_level="warning", access_log=False, lifespan="off",
                                timeout_graceful_shutdown=5, timeout_keep_alive=30)
        self.server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.server_address
        return f"http://{host}:{port}"

    async def _serve(self) -> None:
        anyio.to_thread.current_default_thread_limiter().total_tokens = REQUEST_THREADS
        await self.server.serve(sockets=[self.socket])

    def start(self) -> FastApiServer:
        """Serve in a daemon thread; return self once it accepts connections."""
        self._thread = threading.Thread(target=asyncio.run, args=(self._serve(),), name="codemoe-serve", daemon=True)
        self._thread.start()
        while not self.server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"codemoe serve failed to start on {self.url}")
            self._thread.join(0.01)
        return self

    def serve_forever(self) -> None:
        """Serve in this thread until :meth:`stop` (or SIGINT/SIGTERM, which uvicorn handles)."""
        asyncio.run(self._serve())

    def stop(self) -> None:
        """Stop accepting, let requests in flight finish (5 s at most), close the socket."""
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join()
        self.socket.close()

    def __enter__(self) -> FastApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
