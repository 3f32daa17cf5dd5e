"""Child processes that codemoe starts for its own work (an engine, a scorer), with ``spawn``.

``spawn`` gives the child a clean interpreter (no fork of the parent's threads, locks or CUDA
state), but the standard launcher also re-imports the parent's ``__main__`` there: a user's script
without a ``__main__`` guard would run again in the child (and start another trainer).
:class:`SpawnProcess` is ``spawn`` minus that re-import: the child needs only the importable
module of its ``target``.
"""

from __future__ import annotations

import contextlib
import multiprocessing.context
import pickle
import threading
from multiprocessing import popen_spawn_posix, spawn
from typing import Any

__all__ = ["SpawnProcess", "close_child", "portable_exception"]

_SPAWNING = threading.Lock()  # the launcher's hook below is process-wide while a child starts


class _SpawnWithoutMain(popen_spawn_posix.Popen):
    """``spawn``'s launcher, minus the re-import of the parent's ``__main__`` in the child."""

    def _launch(self, process_obj: Any) -> None:
        real = spawn.get_preparation_data

        def without_main(name: str) -> dict[str, Any]:
            data = real(name)
            data.pop("init_main_from_path", None)
            data.pop("init_main_from_name", None)
            return data

        with _SPAWNING:
            spawn.get_preparation_data = without_main
            try:
                super()._launch(process_obj)
            finally:
                spawn.get_preparation_data = real


class SpawnProcess(multiprocessing.context.SpawnProcess):
    """A ``multiprocessing`` process started with ``spawn``, without the parent's ``__main__``;
    its ``target`` must be importable by module (a module-level function)."""

    @staticmethod
    def _Popen(process_obj: Any) -> Any:
        return _SpawnWithoutMain(process_obj)


def close_child(conn: Any, proc: Any, wait_s: float = 10.0) -> None:
    """End a child that serves ``conn`` until EOF: close this end, wait ``wait_s`` for it to exit
    (it cleans up on the way), then kill it."""
    with contextlib.suppress(OSError):
        conn.close()
    proc.join(wait_s)
    if proc.is_alive():
        proc.kill()
        proc.join(5)


def portable_exception(exc: BaseException, fallback: type[Exception]) -> BaseException:
    """``exc`` itself when it survives a pickle round trip (so the parent raises it as its own
    type), else ``fallback`` with its type and message."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return fallback(f"{type(exc).__name__}: {exc}")
