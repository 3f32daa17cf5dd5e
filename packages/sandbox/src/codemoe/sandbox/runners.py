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
import hashlib
import io
import json
import os
import posixpath
import random
import resource
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from codemoe.sandbox import canary, split
from codemoe.sandbox.api import ExecutionRequest, Limits

__all__ = ["CHANNEL_FD", "RUNNERS", "ChildSetup", "child_setup", "rlimits", "run_in_child", "sandbox_env", "stdio_objects"]

CHANNEL_FD = 3
EXIT_SETUP_FAILED = 120  # the child could not be set up; the channel says why
_RETIRED: list[object] = []  # the interpreter's own stdio objects, kept alive so they never close 0..2


def _line(message: dict[str, Any]) -> bytes:
    return (json.dumps(message) + "\n").encode()


def _send(message: dict[str, Any], setup: ChildSetup) -> None:
    """One message on the result channel, with the execution's nonce (the worker drops any without)."""
    _write_all(CHANNEL_FD, _line({**message, "nonce": setup.nonce}))


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
    nonce: str = ""
    pytest_args: list[str] = field(default_factory=list)  # the pytest runner's arguments after its own
    trusted: frozenset[str] = frozenset()  # files the caller vouches for (graded runs)
    canaries: dict[str, str] = field(default_factory=dict)  # graded pytest runs: node id -> expected outcome
    canaries_required: bool = True  # False when the run's options may stop or deselect them honestly
    canary_path: str = ""  # the canary module, which the reporter adds to the collected tests
    canary_replaced: str = ""  # the module.name the canary module replaces, which the report must name
    helpers: list[str] = field(default_factory=list)  # trusted helper modules of the tests, rewritten like them
    sealed: frozenset[str] = frozenset()  # files the worker lays out read-only (isolation.seal_files), not the child
    seed: int = 0  # the asserts runner's seed of random for the checks, shared with the checker
    start: bytes = b""  # the runners' start marker, with the nonce
    # graded pytest runs: path -> source of the modules laid out empty (ExecutionRequest.private)
    private: dict[str, bytes] = field(default_factory=dict)


def child_setup(request: ExecutionRequest, work: str, tmp: str, current_env: dict[str, str], *,
                seal: bool = False) -> ChildSetup:
    """In the worker, before the clone: everything the child needs, computed once here.

    A graded ``pytest`` run loads no plugin from the work dir: a ``conftest.py`` the caller did not
    list in ``trusted`` is not laid out, and while any pytest config file is not trusted, its
    ``addopts`` (where ``-p plugin`` would go) is overridden to nothing; it also gets canary tests
    (:mod:`codemoe.sandbox.canary`). With ``seal`` its trusted files and the canary module are
    ``sealed``: the worker lays them out read-only (:func:`codemoe.sandbox.isolation.seal_files`).
    """
    env = sandbox_env(request, work, tmp)
    contents = dict(request.files)
    if request.runner == "asserts":
        contents.pop("checks.py")  # the checks are compiled from the request; the program never reads them from a file
    contents = {posixpath.normpath(p): c for p, c in contents.items()}  # "tests//a.py", "./a.py": as pytest names them
    args = list(request.command or []) if request.runner == "pytest" else []
    canaries: dict[str, str] = {}
    canary_path = replaced = ""
    trusted = frozenset(posixpath.normpath(p) for p in request.trusted)
    if request.runner == "pytest" and request.graded:
        contents = {p: c for p, c in contents.items() if posixpath.basename(p) != "conftest.py" or p in trusted}
        if any(posixpath.basename(p) in canary.PYTEST_CONFIG_FILES and p not in trusted for p in contents):
            args = ["-o", "addopts=", *args]  # its other options (pythonpath, markers) may be the task's fix
        canary_path, source, canaries, replaced = canary.make(contents)
        contents[canary_path] = source
        # the reporter collects the canaries after everything else; left to pytest's own collection
        # too they would be imported among the task's modules (before code under test that later ones
        # import could change what compiles them) and run twice
        args = [f"--ignore={canary_path}", *args]
    files = [(path, content.encode() if isinstance(content, str) else content) for path, content in contents.items()]
    hidden = {posixpath.normpath(p) for p in request.private} if request.runner == "pytest" and request.graded else set()
    if canary_path:  # read from disk, the canaries' names would tell the code under test which tests to spare
        hidden.add(canary_path)
    private = {path: content for path, content in files if path in hidden}
    files = [(path, b"" if path in private else content) for path, content in files]  # their source stays in memory
    folders = sorted({os.path.dirname(p) for p, _ in files} - {""}, key=lambda f: f.count("/"))
    sealed = frozenset(p for p in contents if p in trusted or p == canary_path) if seal and request.graded else frozenset()
    stdin = request.stdin.encode() if isinstance(request.stdin, str) else (request.stdin or b"")
    return ChildSetup(work=work, env=env, set_env=env != current_env, files=files, folders=folders,
                      stdin=stdin, limits=rlimits(request.limits),
                      done=_line({"kind": "done", "nonce": request.nonce}), nonce=request.nonce,
                      start=_line({"kind": "start", "nonce": request.nonce}),
                      pytest_args=args, trusted=trusted, canaries=canaries, canary_path=canary_path,
                      canary_replaced=replaced, helpers=test_helpers(trusted), sealed=sealed, private=private,
                      seed=random.getrandbits(64) if request.runner == "asserts" else 0,
                      canaries_required=not any(a.split("=", 1)[0] in canary.SELECTING_OPTIONS or
                                                (a.startswith("-x") and a[1:].isalpha()) for a in args))


def is_test_file(name: str) -> bool:
    """Whether a file of this name is a test module or a conftest (pytest's default patterns)."""
    return name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"


def test_helpers(trusted: frozenset[str]) -> list[str]:
    """The trusted Python files in a folder (or below one) that holds a trusted test module, other than
    test modules and conftests: the helpers the tests import (``tests/helpers.py``), whose comparisons
    :mod:`codemoe.sandbox.honest` checks too. Test modules at the root make no folder of helpers (the
    repository's own modules live there)."""
    folders = {posixpath.dirname(p) for p in trusted if p.endswith(".py") and is_test_file(posixpath.basename(p))} - {""}
    return sorted(p for p in trusted if p.endswith(".py") and not is_test_file(posixpath.basename(p))
                  and any(p.startswith(folder + "/") for folder in folders))  # fmt: skip


def _write_files(setup: ChildSetup) -> None:
    """Lay out the files (the working directory is the work dir)."""
    for folder in setup.folders:
        os.makedirs(folder, exist_ok=True)
    for path, content in setup.files:
        if path in setup.sealed:  # laid out by the worker, read-only
            continue
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


def _exit(code: int, _os_exit: Callable[[int], NoReturn] = os._exit) -> NoReturn:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a program may have closed or replaced them
            stream.flush()
    _os_exit(code)


# ---------------------------------------------------------------------------------------------
# runners
# ---------------------------------------------------------------------------------------------


def run_command(request: ExecutionRequest, setup: ChildSetup) -> NoReturn:
    """exec the request's argv: a fresh program image, limits and namespaces kept. The result
    channel closes on exec, so the program cannot write to it.
    """
    for signum in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(signum, signal.SIG_DFL)
    os.set_inheritable(CHANNEL_FD, False)
    command = request.command or []
    try:
        os.execvpe(command[0], command, setup.env)
    except OSError as exc:
        _send({"kind": "setup-error", "message": f"cannot run {command[0]!r}: {exc.strerror}"}, setup)
        _exit(127)


def run_asserts(request: ExecutionRequest, setup: ChildSetup) -> NoReturn:
    """program.py, then the checks over its functions, recorded call by call for the checker.

    Both files are compiled before any code under test runs, so a compile error is reported from
    the trusted part of the child's life, before the ``start`` marker. From ``start`` on this
    process is the program's: what it sends is data (the transcript of its calls), never a verdict;
    the worker's checker runs the checks again over that transcript and decides
    (:mod:`codemoe.sandbox.split`, :mod:`codemoe.sandbox.checker`).
    """
    codes = {}
    for name in ("program.py", "checks.py"):
        try:
            codes[name] = compile(request.files[name], name, "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as exc:
            traceback.print_exception(exc, limit=0)
            _send({"kind": "compile-error", "file": name, "message": f"{type(exc).__name__}: {exc}"}, setup)
            _exit(1)
    wanted = split.referenced_names(codes["checks.py"])
    # bound before the program runs: it may rebind module attributes (split.record, runners._send)
    (exported, record, safe_message), send, seed = split.recorder(), _send, random.seed
    setup.done = b""
    _write_all(CHANNEL_FD, setup.start)
    namespace: dict[str, Any] = {"__name__": "solution", "__builtins__": builtins, "__file__": "program.py"}
    sys.argv = ["program.py"]
    try:
        exec(codes["program.py"], namespace)
    except MemoryError:
        _send({"kind": "memory"}, setup)
        _exit(1)
    except SystemExit as exc:
        _send({"kind": "exit", "code": repr(exc.code), "file": "program.py"}, setup)
        _exit(1)
    except BaseException as exc:
        traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next)  # without this frame
        send({"kind": "exception", "file": "program.py", "message": f"{type(exc).__name__}: {safe_message(exc)}"[:500]},
             setup)
        _exit(1)
    names = exported(namespace, wanted)
    seed(setup.seed)  # the checker's run of the checks draws the same numbers
    sys.argv = ["checks.py"]
    transcript = record(namespace, names, codes["checks.py"])
    send({"kind": "transcript", "names": names, "transcript": transcript}, setup)
    with contextlib.suppress(OSError):
        os.close(CHANNEL_FD)  # the end of the channel: the worker's checker can start right away
    _exit(0)


def run_pytest(request: ExecutionRequest, setup: ChildSetup) -> NoReturn:
    """pytest on the work dir (plus the request's arguments), outcomes reported with the nonce.

    Everything the report path needs (the encoder, ``os.write``, ``os._exit``) was bound in the
    worker before any code under test existed, so patching ``json`` or ``os`` does not reach it.
    """
    import pytest
    from codemoe.sandbox import honest, pristine
    from codemoe.sandbox.pytest_report import Reporter

    honest.install()  # done in the pytest fork server already; a no-op there
    honest.rewrite_helpers(os.path.join(os.getcwd(), p) for p in setup.helpers)
    honest.reseed()  # this execution's probes, drawn where the code under test never saw them
    if request.graded:  # what pytest loads of these is what the caller sent, or the run is forged
        work = os.getcwd()
        private = {os.path.normpath(os.path.join(work, path)): content for path, content in setup.private.items()}
        pristine.expect_files({os.path.normpath(os.path.join(work, path)): content
                               for path, content in setup.files if path in setup.trusted or path == setup.canary_path},
                              shipped=[os.path.normpath(os.path.join(work, path)) for path, _ in setup.files],
                              private={path: hashlib.sha256(content).digest() for path, content in private.items()})
        honest.serve_private(private)
        hidden = set(setup.private)  # held by pytest's rewrite hook alone from here on
        request.files = {p: "" if posixpath.normpath(p) in hidden else c for p, c in request.files.items()}
        setup.private.clear()
        del private
        pristine.source_only(work)
        pristine.audit_functions()  # graded runs only: every audited event then calls it
    snapshot = pristine.taken() or pristine.take()  # taken in the pytest fork server, before any code under test
    reporter = Reporter(request.nonce, graded=request.graded, trusted=setup.trusted, canary=setup.canary_path,
                        pristine=snapshot, sealed=bool(setup.sealed))
    args = ["-q", "-p", "no:cacheprovider", "--rootdir", os.getcwd(), *setup.pytest_args]
    _write_all(CHANNEL_FD, setup.start)  # from here on, code under test may run in this process
    try:
        code = pytest.main(args, plugins=[reporter])
    except MemoryError:
        reporter.send({"kind": "memory"})
        _exit(1)
    except SystemExit as exc:
        reporter.send({"kind": "exit", "code": repr(exc.code), "file": "pytest"})
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
        _send({"kind": "setup-error", "message": f"{type(exc).__name__}: {exc}"}, setup)
        _exit(EXIT_SETUP_FAILED)
    runner(request, setup)
