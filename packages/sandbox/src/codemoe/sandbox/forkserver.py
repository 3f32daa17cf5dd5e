"""The fork server: the process executions are cloned from, which never holds a request or a result.

An execution is a fork, so it holds a copy of its parent's memory, freed memory included. Cloned
from the worker itself (or from the pytest zygote), it held what earlier executions of other tasks
left in that process's heap: their hidden checks and graded test files, their reports and output,
which a program reading its own memory (``ctypes.string_at`` over ``/proc/self/maps``) printed. So
a worker forks its fork server once, settled and before it reads any request, and from then on has
every execution cloned by it: the fork server receives a request's descriptors over a socket only
the worker holds, ``clone``\\ s the execution with ``CLONE_PARENT`` and answers with its PID. What the
execution needs was worked out by the worker (:func:`codemoe.sandbox.runners.child_setup`) and is
handed over in a memfd the fork server never reads: only the new child decodes it. The fork
server's memory therefore holds nothing of any request, and neither does an execution's, but for
its own.

The execution is a child of the worker (``CLONE_PARENT``), which supervises it, reaps it and
accounts for its resources as when it cloned the execution itself. The fork server lives in the
execution cgroup it was born in (``pids.max`` is one higher for it); the worker moves to its
checker's leaf, so what it allocates (the result channel it decodes) does not count against an
execution's memory. A fork server that dies is not replaced by a fork of the worker, whose heap
holds requests by then: the worker answers every request as not cloned, and its executor sends it
to a fresh worker.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import signal
import socket
import struct
from collections.abc import Callable
from typing import NoReturn

from codemoe.sandbox import linux
from codemoe.sandbox.api import ExecutionRequest, Limits
from codemoe.sandbox.isolation import WORK_DIR, IsolationPlan, WorkerState, enter
from codemoe.sandbox.runners import EXIT_SETUP_FAILED, ChildSetup, child_setup, run_in_child

__all__ = ["ForkServer", "ForkServerGone", "nproc_base"]

_HEADER = struct.Struct("=QQ")  # clone flags, size of the request in the memfd
_FDS = struct.Struct("=4i")  # the request's memfd, then the execution's stdout, stderr and result channel
_PID = struct.Struct("=q")  # the execution's PID, or minus the clone's errno
_COMPILED = ("program.py", "checks.py")  # what runners.run_asserts compiles from the request's own files


class ForkServerGone(RuntimeError):
    """The fork server ended: its worker cannot clone executions any more and must be replaced."""


class ForkServer:
    """The worker's side of its fork server, a fork of the worker made before any request."""

    def __init__(self, plan: IsolationPlan, state: WorkerState) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            try:
                ours.close()
                _close_all_but(theirs.fileno(), state.host_net)
                linux.parent_death_signal(signal.SIGKILL)
                _warm()
                _serve(theirs, plan, state)
            finally:
                os._exit(0)
        theirs.close()
        self.pid, self.socket, self.reaped = pid, ours, False

    def spawn(self, flags: int, request: ExecutionRequest, setup: ChildSetup, *, in_cgroup: bool,
              fds: tuple[int, int, int]) -> int:
        """Clone the execution of ``request`` (``flags``: its namespaces) with ``fds`` (stdout,
        stderr, result channel) as its own; returns its PID, a child of this process. Raises
        ``OSError`` when the clone fails, :class:`ForkServerGone` when the fork server is gone.
        """
        blob = _encode(request, setup, in_cgroup)
        memfd = os.memfd_create("codemoe-request", os.MFD_CLOEXEC)
        try:
            view = memoryview(blob)
            while view:
                view = view[os.write(memfd, view):]
            try:
                self.socket.sendmsg([_HEADER.pack(flags | linux.CLONE_PARENT, len(blob))],
                                   [(socket.SOL_SOCKET, socket.SCM_RIGHTS, _FDS.pack(memfd, *fds))])
                reply = self.socket.recv(_PID.size)
            except OSError:
                reply = b""
        finally:
            os.close(memfd)
        if len(reply) != _PID.size:
            raise ForkServerGone("the fork server ended")
        pid = _PID.unpack(reply)[0]
        if pid < 0:
            raise OSError(-pid, f"clone: {os.strerror(-pid)}")
        return pid

    def alive(self) -> bool:
        """Whether the fork server is still there (reaped here when it is not: it may have been the
        OOM killer's choice where executions can lower their own score, no ``CAP_SYS_RESOURCE``)."""
        if self.reaped:
            return False
        try:
            self.reaped = os.waitpid(self.pid, os.WNOHANG)[0] != 0
        except ChildProcessError:
            self.reaped = True
        return not self.reaped

    def stop(self) -> None:
        """End the fork server (it holds nothing that needs cleaning up) and reap it."""
        self.socket.close()
        if self.reaped:  # its PID may be another process's by now
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)


def nproc_base(plan: IsolationPlan) -> Callable[[], int]:
    """RLIMIT_NPROC counts every process of the real user: add the ones it already has."""
    def count() -> int:
        if plan.drop_uid:
            return 0
        uid, n = os.getuid(), 0
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    n += os.stat(f"/proc/{entry}").st_uid == uid
                except OSError:
                    continue
        return n

    return count


def _encode(request: ExecutionRequest, setup: ChildSetup, in_cgroup: bool) -> bytes:
    """What the child needs of the worker's objects, as plain data: of the request's files only those
    the asserts runner compiles from it (the rest are the setup's, as bytes: decoding each twice
    costs the child the pages it writes)."""
    files = {name: request.files[name] for name in _COMPILED if name in request.files} if request.runner == "asserts" else {}
    fields = dict(vars(request), files=files, limits=vars(request.limits))
    # version 0: no string is marked interned, so the child does not intern (and so write) any
    return marshal.dumps((fields, vars(setup), in_cgroup), 0)


def _decode(blob: bytes) -> tuple[ExecutionRequest, ChildSetup, bool]:
    """Inverse of :func:`_encode` (the request was validated in the worker already)."""
    fields, setup_fields, in_cgroup = marshal.loads(blob)
    limits = Limits.__new__(Limits)
    limits.__dict__.update(fields.pop("limits"))
    request = ExecutionRequest.__new__(ExecutionRequest)
    request.__dict__.update(fields, limits=limits)
    return request, ChildSetup(**setup_fields), in_cgroup


def _warm() -> None:
    """Decode a request once here, so the interpreter's type-attribute cache holds what each child
    looks up then (a child that fills an entry writes, and so copies, its page)."""
    request = ExecutionRequest(files={"program.py": "", "checks.py": ""}, runner="asserts")
    _decode(_encode(request, child_setup(request, WORK_DIR, "/tmp", {}), False))


def _close_all_but(*keep: int | None) -> None:
    """Close every descriptor above stdio but ``keep``: the fork server holds none of the worker's
    pipes (its control pipes, its checker's, the pytest zygote's)."""
    low = 3
    for fd in sorted({fd for fd in keep if fd is not None}):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))


def _serve(sock: socket.socket, plan: IsolationPlan, state: WorkerState) -> None:
    """Clone one execution per message until the worker closes its end.

    Every page this loop writes (a reference count is enough) is copied while the execution it
    just cloned lives, so it touches few objects: everything it calls is bound here, once.
    """
    recvmsg, send, close, clone, count = sock.recvmsg, sock.send, os.close, linux.clone, nproc_base(plan)
    unpack, unpack_fds, pack = _HEADER.unpack, _FDS.unpack, _PID.pack
    header_size, fds_size, ancillary_size = _HEADER.size, _FDS.size, socket.CMSG_SPACE(_FDS.size)
    rights = (socket.SOL_SOCKET, socket.SCM_RIGHTS)
    while True:
        try:
            message, ancillary, _, _ = recvmsg(header_size, ancillary_size)
        except OSError:
            return
        if len(message) != header_size or len(ancillary) != 1 or ancillary[0][:2] != rights \
                or len(ancillary[0][2]) != fds_size:
            return  # the worker closed its end (it sends nothing else)
        fds = unpack_fds(ancillary[0][2])
        flags, size = unpack(message)
        try:
            pid = clone(flags)
        except OSError as exc:
            pid = -(exc.errno or 1)
        if pid == 0:
            _child(sock, plan, state, fds, size, count)
        for fd in fds:
            close(fd)
        send(pack(pid))


def _child(sock: socket.socket, plan: IsolationPlan, state: WorkerState, fds: tuple[int, ...], size: int,
           count: Callable[[], int]) -> NoReturn:
    """The execution, just cloned: decode the request, then live as :func:`run_in_child` says."""
    try:
        sock.close()
        memfd, *stdio = fds
        request, setup, in_cgroup = _decode(os.pread(memfd, size, 0))
        os.close(memfd)
        if not in_cgroup:  # born in the execution's cgroup or not: whether it makes itself the OOM killer's choice
            state.execution = None
        elif state.execution is None:
            state.execution = state.cgroup.execution if state.cgroup is not None else None
        run_in_child(request, setup, enter=lambda: enter(plan, state, setup.work, network=request.limits.network),
                     fds=tuple(stdio), nproc_base=count)
    finally:  # the child never returns into the fork server's loop
        os._exit(EXIT_SETUP_FAILED)
