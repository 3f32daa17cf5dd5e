"""What runs inside the sandboxed child once it is isolated: the command, pytest, or asserts.

The child is a fork of a warm worker, so pytest and the interpreter are already loaded. Each page
of the worker's memory the child writes (a reference count is enough) is copied by the kernel, at
several microseconds a page, so the worker works out everything it can before the clone
(:func:`child_setup`) and the child runs as little Python as it can. Every
runner ends the process itself (``os._exit``) and reports to the worker over the result channel
(file descriptor 3), one JSON object per line; see :mod:`codemoe.sandbox.api` for what the nonce
proves. Messages: ``{"kind": "done", "nonce": ...}`` (asserts finished), ``{"kind": "pytest",
"nonce": ..., "tests": {...}, "exitstatus": n, ...}``, ``{"kind": "exception", ...}``,
``{"kind": "exit", "code": ...}`` (SystemExit before the end), ``{"kind": "compile-error", ...}``,
``{"kind": "memory"}``, ``{"kind": "setup-error", "message": ...}``.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import json
import os
import resource
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from codemoe.sandbox.api import ExecutionRequest, Limits

__all__ = ["CHANNEL_FD", "RUNNERS", "ChildSetup", "child_setup", "rlimits", "run_in_child", "sandbox_env", "stdio_objects"]

CHANNEL_FD = 3
EXIT_SETUP_FAILED = 120  # the child could not be set up; the channel says why
_RETIRED: list[object] = []  # the interpreter's own stdio objects, kept alive so they never close 0..2


def _line(message: dict[str, Any]) -> bytes:
    return (json.dumps(message) + "\n").encode()


def _send(message: dict[str, Any]) -> None:
    _write_all(CHANNEL_FD, _line(message))


def _write_all(fd: int, data: bytes, _write: Callable[[int, bytes], int] = os.write) -> None:
    view = memoryview(data)
    while view:
        view = view[_write(fd, view):]


def sandbox_env(request: ExecutionRequest, work: str, tmp: str) -> dict[str, str]:
    """The whole environment of an execution: nothing is inherited from the host."""
    env = {
        "PATH": f"{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin",
        "HOME": work,
        "TMPDIR": tmp,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TZ": "UTC",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "MALLOC_ARENA_MAX": "2",  # glibc's per-thread arenas reserve address space RLIMIT_AS counts
    }
    env.update(request.env)
    return env


def rlimits(limits: Limits) -> list[tuple[int, int]]:
    """The rlimits of an execution as (resource, value); the process limit last, since the child
    adds the processes its user already has to it (:func:`run_in_child`).
    """
    mib = 1024 * 1024
    return [
        (resource.RLIMIT_CPU, max(1, int(limits.cpu_s + 0.999))),
        (resource.RLIMIT_AS, int(limits.memory_mb * mib)),
        (resource.RLIMIT_FSIZE, int(limits.max_file_mb * mib)),
        (resource.RLIMIT_NOFILE, int(limits.max_open_files)),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_NPROC, int(limits.max_processes)),
    ]


@dataclass
class ChildSetup:
    """What the worker works out before the clone, so the child only makes system calls with it."""

    work: str  # the work dir, the child's working directory
    env: dict[str, str]  # the execution's whole environment
    set_env: bool  # False when the worker's own environment is ``env`` already (the common case)
    files: list[tuple[str, bytes]]  # (path relative to work, content)
    folders: list[str]  # folders to make in work first, parents before children
    stdin: bytes
    limits: list[tuple[int, int]]  # (resource, value); see :func:`rlimits`
    done: bytes  # the asserts runner's completion message, with the nonce


def child_setup(request: ExecutionRequest, work: str, tmp: str, current_env: dict[str, str]) -> ChildSetup:
    """In the worker, before the clone: everything the child needs, computed once here."""
    env = sandbox_env(request, work, tmp)
    files = [(path, content.encode() if isinstance(content, str) else content)
             for path, content in request.files.items()]
    folders = sorted({os.path.dirname(p) for p, _ in files} - {""}, key=lambda f: f.count("/"))
    stdin = request.stdin.encode() if isinstance(request.stdin, str) else (request.stdin or b"")
    return ChildSetup(work=work, env=env, set_env=env != current_env, files=files, folders=folders,
                      stdin=stdin, limits=rlimits(request.limits),
                      done=_line({"kind": "done", "nonce": request.nonce}))


def _write_files(setup: ChildSetup) -> None:
    """Lay out the files (the working directory is the work dir)."""
    for folder in setup.folders:
        os.makedirs(folder, exist_ok=True)
    for path, content in setup.files:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        _write_all(fd, content)
        os.close(fd)


def stdio_objects() -> None:
    """Called once in the worker: ``sys.stdin/stdout/stderr`` on descriptors 0..2 that never close
    them and never buffer, so a child only has to ``dup2`` its own pipes there (no new objects).
    """
    _RETIRED.extend((sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__))
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8", errors="replace")
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", write_through=True)
    sys.stderr = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace", write_through=True
    )
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr


def _stdio(stdin: bytes, out_fd: int, err_fd: int, channel_fd: int) -> None:
    """fd 0: the request's stdin (a memfd), 1/2: the output pipes, 3: the result channel."""
    stdin_fd = os.memfd_create("stdin")
    if stdin:
        _write_all(stdin_fd, stdin)
        os.lseek(stdin_fd, 0, os.SEEK_SET)
    moved = [os.dup(fd) for fd in (stdin_fd, out_fd, err_fd, channel_fd)]  # above 0..3 first
    for target, fd in enumerate(moved):
        os.dup2(fd, target)


def _exit(code: int) -> NoReturn:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a program may have closed or replaced them
            stream.flush()
    os._exit(code)


# ---------------------------------------------------------------------------------------------
# runners
# ---------------------------------------------------------------------------------------------


def run_command(request: ExecutionRequest, setup: ChildSetup) -> NoReturn:
    """exec the request's argv: a fresh program image, limits and namespaces kept."""
    for signum in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(signum, signal.SIG_DFL)
    command = request.command or []
    try:
        os.execvpe(command[0], command, setup.env)
    except OSError as exc:
        _send({"kind": "setup-error", "message": f"cannot run {command[0]!r}: {exc.strerror}"})
        _exit(127)


def run_asserts(request: ExecutionRequest, setup: ChildSetup) -> NoReturn:
    """program.py then checks.py in one namespace; the nonce only after both ran to the end."""
    done, send = setup.done, _send
    namespace: dict[str, Any] = {"__name__": "solution", "__builtins__": builtins}
    for name in ("program.py", "checks.py"):
        source = request.files[name]
        try:
            code = compile(source, name, "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as exc:
            traceback.print_exception(exc, limit=0)
            send({"kind": "compile-error", "file": name, "message": f"{type(exc).__name__}: {exc}"})
            _exit(1)
        namespace["__file__"] = name
        sys.argv = [name]
        try:
            exec(code, namespace)
        except MemoryError:
            send({"kind": "memory"})
            _exit(1)
        except SystemExit as exc:
            send({"kind": "exit", "code": repr(exc.code), "file": name})
            _exit(1)
        except BaseException as exc:  # the verdict of the checks: any exception fails them
            traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next)  # without this frame
            send({"kind": "exception", "file": name, "message": f"{type(exc).__name__}: {exc}"[:500]})
            _exit(1)
    _write_all(CHANNEL_FD, done)
    _exit(0)


def run_pytest(request: ExecutionRequest, setup: ChildSetup) -> NoReturn:
    """pytest on the work dir (plus the request's arguments), outcomes reported with the nonce."""
    import pytest
    from codemoe.sandbox.pytest_report import Reporter

    reporter = Reporter(request.nonce, send=_send)
    args = ["-q", "-p", "no:cacheprovider", "--rootdir", os.getcwd(), *(request.command or [])]
    try:
        code = pytest.main(args, plugins=[reporter])
    except MemoryError:
        _send({"kind": "memory"})
        _exit(1)
    except SystemExit as exc:
        _send({"kind": "exit", "code": repr(exc.code), "file": "pytest"})
        _exit(1)
    _exit(int(code))


RUNNERS: dict[str | None, Callable[[ExecutionRequest, ChildSetup], NoReturn]] = {
    None: run_command,
    "asserts": run_asserts,
    "pytest": run_pytest,
}


def run_in_child(
    request: ExecutionRequest,
    setup: ChildSetup,
    *,
    enter: Callable[[], None],
    fds: tuple[int, int, int],
    nproc_base: Callable[[], int],
) -> NoReturn:
    """The whole life of the sandboxed child: wire stdio, isolate (``enter``, which changes into
    the work dir), close every other descriptor, lay out the files, set the environment (unless
    the worker's is it already) and the limits, run the runner. Never returns.
    """
    try:
        _stdio(setup.stdin, *fds)
        enter()
        os.closerange(CHANNEL_FD + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        _write_files(setup)
        if setup.set_env:
            os.environ.clear()
            os.environ.update(setup.env)
            time.tzset()
        sys.path.insert(0, setup.work)
        limits = setup.limits
        limits[-1] = (limits[-1][0], limits[-1][1] + nproc_base())  # the process limit
        for which, value in limits:
            resource.setrlimit(which, (value, value))
        runner = RUNNERS[request.runner]
    except BaseException as exc:  # report why the child could not start; the worker sees status error
        _send({"kind": "setup-error", "message": f"{type(exc).__name__}: {exc}"})
        _exit(EXIT_SETUP_FAILED)
    runner(request, setup)
