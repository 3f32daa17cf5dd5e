"""Framing of the messages between an executor and its workers: 8-byte length, then JSON."""

from __future__ import annotations

import json
import os
import struct
from typing import Any

__all__ = ["receive", "send"]

_HEADER = struct.Struct(">Q")


def send(fd: int, message: dict[str, Any]) -> None:
    """Write one message to ``fd``."""
    body = json.dumps(message).encode()
    data = memoryview(_HEADER.pack(len(body)) + body)
    while data:
        data = data[os.write(fd, data):]


def receive(fd: int) -> dict[str, Any] | None:
    """Read one message from ``fd``; None at end of file."""
    header = _read_exactly(fd, _HEADER.size)
    if header is None:
        return None
    body = _read_exactly(fd, _HEADER.unpack(header)[0])
    if body is None:
        raise EOFError("the other end closed in the middle of a message")
    return json.loads(body)


def _read_exactly(fd: int, size: int) -> bytes | None:
    chunks, missing = [], size
    while missing:
        chunk = os.read(fd, min(missing, 1 << 20))
        if not chunk:
            if missing == size:
                return None
            raise EOFError("the other end closed in the middle of a message")
        chunks.append(chunk)
        missing -= len(chunk)
    return b"".join(chunks)
