"""Framing of the messages between an executor and its workers: 8-byte length, then JSON."""

from __future__ import annotations

import json
import os
import select
import struct
import time
from typing import Any

__all__ = ["receive", "send"]

_HEADER = struct.Struct(">Q")


def send(fd: int, message: dict[str, Any]) -> None:
    """Write one message to ``fd``."""
    body = json.dumps(message).encode()
    data = memoryview(_HEADER.pack(len(body)) + body)
    while data:
        data = data[os.write(fd, data):]


def receive(fd: int, *, deadline: float | None = None, limit: int | None = None) -> dict[str, Any] | None:
    """Read one message from ``fd``; None at end of file. With ``deadline`` (``time.monotonic``),
    ``TimeoutError`` when the whole message is not in by then; with ``limit``, ``ValueError`` for a
    message said to be longer (before any of it is read)."""
    header = _read_exactly(fd, _HEADER.size, deadline)
    if header is None:
        return None
    size = _HEADER.unpack(header)[0]
    if limit is not None and size > limit:
        raise ValueError(f"a message of {size} bytes, over the limit of {limit}")
    body = _read_exactly(fd, size, deadline)
    if body is None:
        raise EOFError("the other end closed in the middle of a message")
    return json.loads(body)


def _read_exactly(fd: int, size: int, deadline: float | None = None) -> bytes | None:
    chunks, missing = [], size
    while missing:
        if deadline is not None:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError("the message did not come in time")
        chunk = os.read(fd, min(missing, 1 << 20))
        if not chunk:
            if missing == size:
                return None
            raise EOFError("the other end closed in the middle of a message")
        chunks.append(chunk)
        missing -= len(chunk)
    return b"".join(chunks)
