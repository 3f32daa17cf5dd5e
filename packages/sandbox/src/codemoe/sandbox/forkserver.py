"""The worker's fork server: the process every execution is cloned from.

A worker starts it once, in its namespaces (:func:`codemoe.sandbox.isolation.prepare_worker`).
From then on it does nothing per execution but receive a request's descriptors over a socket
only the worker holds, ``clone`` the execution with ``CLONE_PARENT`` and answer with its PID.
The execution is thus a child of the worker, which supervises it, reaps it and accounts its
resources exactly as when it cloned the execution itself, but the worker (JSON, mounts, pipes,
the checker, verdicts) is never forked again: the pages it writes stay its own, with no
copy-on-write fault per execution.

The fork server is a fresh interpreter (``python -s -c``, :func:`main`) that imports only what
executions need: the runners, the isolation calls and the modules programs commonly import
(:data:`PRELOAD`); a smaller process clones and exits faster (page tables, pages to drop). Its
loop touches few objects, so it writes few pages of its own between clones. The pytest zygote's
fork server is a fork of the zygote instead (it carries pytest, warmed up), and so is a
replacement for one that died: a program the worker starts once its capability bounding set is
empty would hold no capability (no namespaces, no user id to change to).

What an execution needs is worked out by the worker before the clone
(:func:`codemoe.sandbox.runners.child_setup`) and handed over in a memfd the fork server never
reads: only the new child decodes it, so the fork server's memory does not change with the
requests. The memfd, the socket and every other descriptor the child did not get as its stdio
are closed before any submitted code runs (:func:`codemoe.sandbox.runners.run_in_child`).
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import importlib
import marshal
import os
import signal
import socket
import struct
import sys
from collections.abc import Callable
from typing import NoReturn

from codemoe.sandbox import linux
from codemoe.sandbox.api import ExecutionRequest, Limits
from codemoe.sandbox.cgroups import ExecutionCgroup
from codemoe.sandbox.isolation import WORK_DIR, IsolationPlan, WorkerState, enter
from codemoe.sandbox.runners import EXIT_SETUP_FAILED, ChildSetup, child_setup, run_in_child, stdio_objects

__all__ = ["PRELOAD", "ForkServer", "main", "nproc_base"]

# Modules programs commonly import, loaded once in the fork server instead of in every execution.
PRELOAD = (
    "bisect", "collections", "copy", "dataclasses", "datetime", "decimal", "fractions", "functools",
    "hashlib", "heapq", "itertools", "json", "math", "operator", "random", "re", "statistics", "string",
    "typing",
)

_HEADER = struct.Struct("=QQ")  # clone flags, size of the request in the memfd
_FDS = struct.Struct("=4i")  # the request's memfd, then the execution's stdout, stderr and result channel
_PID = struct.Struct("=q")  # the execution's PID, or minus the clone's errno
_SOCKET_FD, _HOST_NET_FD = 3, 4  # where a fresh fork server finds its socket and the host network namespace
_MAIN = "import sys; sys.path[0] = sys.argv[1]; from codemoe.sandbox.forkserver import main; main()"
_READY = b"ready"


class ForkServer:
    """The worker's side of its fork server process.

    ``fork``: the fork server is a fork of this process, else a fresh interpreter, which must be
    started before this process empties its capability bounding set (``before_seal`` of
    :func:`~codemoe.sandbox.isolation.prepare_worker`); ``environ``: its environment, which
    executions inherit (the worker's :attr:`WorkerState.environ`).
    """

    def __init__(self, plan: IsolationPlan, state: WorkerState, environ: dict[str, str], *, fork: bool) -> None:
        self.plan, self.state, self.environ, self.fork = plan, state, environ, fork
        self.pid = 0
        self.fresh_error = ""  # why a fresh interpreter could not be the fork server (it is a fork then)
        self._start()

    def _start(self) -> None:
        if not self.fork:
            try:
                self._start_fresh()
                return
            except OSError as exc:  # it still works, as a fork of this larger process: say so
                self.fresh_error, self.fork = str(exc), True
                print(f"codemoe sandbox: the fork server is a fork of the worker ({exc})", file=sys.stderr)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            try:
                ours.close()
                _close_all_but(theirs.fileno(), self.state.host_net)
                linux.parent_death_signal(signal.SIGKILL)
                _warm()
                _serve(theirs, self.plan, self.state)
            finally:
                os._exit(0)
        theirs.close()
        self.pid, self.socket = pid, ours

    def _start_fresh(self) -> None:
        """``python -s -c`` :func:`main`, handed its socket, the host network namespace and the
        plan; raises ``OSError`` when it does not say it is ready.
        """
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # sources above the targets: a dup2 onto itself would keep close-on-exec, one onto the other's source lose it
        sources = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, _HOST_NET_FD + 1)
                   for fd in (theirs.fileno(), self.state.host_net) if fd is not None]
        actions = [(os.POSIX_SPAWN_DUP2, fd, target) for fd, target in zip(sources, (_SOCKET_FD, _HOST_NET_FD))]
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))  # holds codemoe/
        try:
            pid = os.posix_spawn(sys.executable, [sys.executable, "-s", "-c", _MAIN, root], self.environ,
                                 file_actions=actions)
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
            for fd in sources:
                os.close(fd)
        plan = self.plan
        config = {"net_ns": plan.net_ns, "user_ns": plan.user_ns, "seccomp": plan.seccomp, "drop_uid": plan.drop_uid,
                  "uid": self.state.uid, "host_net": self.state.host_net is not None, "worker": os.getpid()}
        try:
            ours.send(marshal.dumps(config))
            ready = ours.recv(len(_READY))
        except OSError:
            ready = b""
        if ready != _READY:
            ours.close()
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
            raise OSError("a fresh fork server exited before it was ready")
        self.pid, self.socket = pid, ours

    def spawn(self, flags: int, request: ExecutionRequest, setup: ChildSetup, fds: tuple[int, int, int]) -> int:
        """Clone the execution of ``request`` (``flags``: its namespaces), with ``fds`` (stdout,
        stderr, result channel) as its own; returns its PID, a child of this process.

        A fork server found gone before it got the request is replaced and asked again; raises
        ``OSError`` when the clone fails, or the fork server ends before it answers (it is
        replaced then too).
        """
        blob = _encode(request, setup, self.state.execution is not None)
        memfd = os.memfd_create("codemoe-request", os.MFD_CLOEXEC)
        try:
            view = memoryview(blob)
            while view:
                view = view[os.write(memfd, view):]
            header = [_HEADER.pack(flags | linux.CLONE_PARENT, len(blob))]
            rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, _FDS.pack(memfd, *fds))]
            try:
                self.socket.sendmsg(header, rights)
            except OSError:  # it is gone and cloned nothing
                self.restart()
                self.socket.sendmsg(header, rights)
            try:
                reply = self.socket.recv(_PID.size)
            except OSError:
                reply = b""
        finally:
            os.close(memfd)
        if len(reply) != _PID.size:
            self.restart()
            raise OSError("the fork server ended before it answered")
        pid = _PID.unpack(reply)[0]
        if pid < 0:
            raise OSError(-pid, f"clone: {os.strerror(-pid)}")
        return pid

    def restart(self) -> None:
        """Replace the fork server process (with a fork of this one: see the module's docstring)."""
        self.stop()
        self.fork = True
        self._start()

    def stop(self) -> None:
        """End the fork server (it holds nothing that needs cleaning up) and reap it."""
        self.socket.close()
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


def main() -> NoReturn:
    """A fresh fork server: take the worker's plan from the socket, load what executions use, serve."""
    sys.dont_write_bytecode = True
    sock = socket.socket(fileno=_SOCKET_FD)
    config = marshal.loads(sock.recv(1 << 16))
    linux.parent_death_signal(signal.SIGKILL)
    if os.getppid() != config["worker"]:  # the worker died before the line above
        os._exit(0)
    linux.drop_bounding_set()  # as the worker's own: no exec in an execution can grant a capability
    plan = IsolationPlan(net_ns=config["net_ns"], user_ns=config["user_ns"], seccomp=config["seccomp"],
                         drop_uid=config["drop_uid"])  # what executions need of the worker's plan
    state = WorkerState(uid=config["uid"], host_net=_HOST_NET_FD if config["host_net"] else None,
                        environ=dict(os.environ))
    stdio_objects()
    for name in PRELOAD:
        importlib.import_module(name)
    _warm()
    gc.collect()
    gc.freeze()  # collections in executions do not touch (and so copy) these objects
    sock.send(_READY)
    _serve(sock, plan, state)
    os._exit(0)


def _encode(request: ExecutionRequest, setup: ChildSetup, in_cgroup: bool) -> bytes:
    """What the child needs of the worker's objects, as plain data."""
    fields = dict(vars(request), limits=vars(request.limits))
    # version 0: no string is marked interned, so the child does not intern (and so write) any
    return marshal.dumps((fields, vars(setup), in_cgroup), 0)


def _decode(blob: bytes) -> tuple[ExecutionRequest, ChildSetup, bool]:
    """Inverse of :func:`_encode`."""
    fields, setup_fields, in_cgroup = marshal.loads(blob)
    limits = Limits.__new__(Limits)  # validated in the worker already
    limits.__dict__.update(fields.pop("limits"))
    return ExecutionRequest(**fields, limits=limits), ChildSetup(**setup_fields), in_cgroup


def _warm() -> None:
    """Decode a request once here, so the interpreter's type-attribute cache holds what each child
    looks up then (a child that fills an entry writes, and so copies, its page and the names').
    """
    request = ExecutionRequest(files={"program.py": "", "checks.py": ""}, runner="asserts")
    _decode(_encode(request, child_setup(request, WORK_DIR, "/tmp", {}), False))


def _close_all_but(*keep: int | None) -> None:
    """Close every descriptor above stdio but ``keep``: no execution inherits one of the worker's."""
    low = 3
    for fd in sorted(fd for fd in keep if fd is not None):
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
            _child(plan, state, fds, size, count)
        for fd in fds:
            close(fd)
        send(pack(pid))


def _child(plan: IsolationPlan, state: WorkerState, fds: tuple[int, ...], size: int,
           count: Callable[[], int]) -> NoReturn:
    """The execution, just cloned: decode the request, then live as :func:`run_in_child` says."""
    try:
        memfd, *stdio = fds
        request, setup, in_cgroup = _decode(os.pread(memfd, size, 0))
        os.close(memfd)
        # born in the execution's cgroup (the worker's descriptors of it stay with the worker)
        state.execution = (state.execution or ExecutionCgroup("e")) if in_cgroup else None
        run_in_child(request, setup, enter=lambda: enter(plan, state, setup.work, network=request.limits.network),
                     fds=tuple(stdio), nproc_base=count)
    finally:  # the child never returns into the fork server's loop
        os._exit(EXIT_SETUP_FAILED)
