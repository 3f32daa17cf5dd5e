"""A cgroup per execution: total memory and processes of everything the execution starts.

Rlimits bound each process (``RLIMIT_AS``) and a user's processes (``RLIMIT_NPROC``); a cgroup
bounds the execution as a whole: six processes of 200 MB each exceed a 256 MiB ``memory.max``
although each stays under its own limit, and the kernel memory a program makes the kernel use
(inodes, page tables, socket buffers) counts too.

Layout: each worker makes ``codemoe-sandbox-<pid>`` under a base cgroup (:func:`find`), and in it
the cgroup ``e`` its executions run in, with ``memory.max`` = ``memory_mb``, no swap, ``pids.max``
= ``max_processes`` (+1, the worker itself) and group OOM kills, set before each execution; the
worker lives in ``e`` itself, so executions are born inside it (see :class:`WorkerCgroup` for why
nothing moves per execution); after an execution the worker reads the OOM kills it counted.

cgroup v2 is used where its hierarchy offers the ``memory`` and ``pids`` controllers to a base the
worker may write; on a v1 (or hybrid) machine the ``memory`` and ``pids`` hierarchies are used the
same way. :func:`find` says why neither works where it does not (``codemoe sandbox doctor`` shows
it), and the per-process rlimits are all that is left.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from dataclasses import dataclass, field

__all__ = ["Base", "ExecutionCgroup", "WorkerCgroup", "check", "find"]

_PREFIX = "codemoe-sandbox-"
_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_HIGH_FD = 80  # above what an execution's stdio and channel take over


@dataclass
class Base:
    """Where worker cgroups go: one folder (v2) or one per controller hierarchy (v1)."""

    version: int  # 2 or 1
    memory: str  # folder of the base cgroup holding the memory controller
    pids: str = ""  # v1: the pids hierarchy's folder ("" if that hierarchy is missing); v2: = memory

    def describe(self) -> str:
        """Where, for ``doctor``."""
        if self.version == 2:
            return f"cgroup v2 under {self.memory}"
        return f"cgroup v1 under {self.memory}" + (f" and {self.pids}" if self.pids else " (no pids hierarchy)")


def _mounts() -> list[tuple[str, str, str, str]]:
    """(mount point, root in the hierarchy, fstype, super options) of each cgroup mount."""
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
                point = fields[4].replace("\\040", " ")
                found.append((point, fields[3], tail[0], tail[2]))
    return found


def _own_paths() -> dict[str, str]:
    """This process's cgroup per hierarchy: ``""`` for v2, each controller name for v1."""
    paths = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            number, controllers, path = line.rstrip("\n").split(":", 2)
            if number == "0" and not controllers:
                paths[""] = path
            for name in controllers.split(","):
                if name:
                    paths[name] = path
    return paths


def _folder(point: str, root: str, path: str) -> str | None:
    """The folder of cgroup ``path`` under a mount of hierarchy ``root`` at ``point``."""
    root = root.rstrip("/")
    if root and not (path == root or path.startswith(root + "/")):
        return None  # our cgroup is not visible through this mount
    return os.path.join(point, path[len(root):].lstrip("/")).rstrip("/") or "/"


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _find_v2(point: str, root: str, own: str) -> tuple[Base | None, str]:
    folder = _folder(point, root, own)
    if folder is None:
        return None, "this process's cgroup is not under the cgroup2 mount"
    wanted = {"memory", "pids"}
    offered = set(_read(os.path.join(point, "cgroup.controllers")).split())
    if not wanted <= offered:
        return None, (f"the cgroup2 hierarchy at {point} offers no {', '.join(sorted(wanted - offered))} "
                      "controller (a v1 hierarchy holds it)")
    # the nearest cgroup at or above ours that hands memory and pids to its children; a cgroup
    # holding processes cannot (v2's no-internal-process rule), except the root
    here = folder
    while True:
        enabled = set(_read(os.path.join(here, "cgroup.subtree_control")).split())
        if wanted <= enabled:
            if os.access(here, os.W_OK):
                return Base(2, here, here), ""
            return None, f"{here} is not writable by this user"
        if os.path.normpath(here) == os.path.normpath(point):
            try:
                _write(os.path.join(here, "cgroup.subtree_control"), "+memory +pids")
                return Base(2, here, here), ""
            except OSError as exc:
                return None, (f"no cgroup above this process delegates memory and pids, and enabling them at "
                              f"{here} failed ({exc.strerror}); run the workers in a cgroup of their own "
                              "(e.g. systemd-run --scope -p Delegate=yes)")
        here = os.path.dirname(here)


def find() -> tuple[Base | None, str]:
    """Where this process's workers can make execution cgroups, or (None, why not)."""
    try:
        mounts, own = _mounts(), _own_paths()
    except (OSError, ValueError) as exc:
        return None, f"cannot read this process's cgroups ({exc})"
    reasons = []
    for point, root, fstype, _ in mounts:
        if fstype == "cgroup2" and "" in own:
            try:
                base, why = _find_v2(point, root, own[""])
            except OSError as exc:
                base, why = None, f"{point}: {exc.strerror or exc}"
            if base is not None:
                return base, ""
            reasons.append(why)
    v1 = {}
    for point, root, fstype, options in mounts:
        for name in ("memory", "pids"):
            if fstype == "cgroup" and name in options.split(",") and name in own and name not in v1:
                folder = _folder(point, root, own[name])
                if folder is not None and os.access(folder, os.W_OK):
                    v1[name] = folder
    if "memory" in v1:
        return Base(1, v1["memory"], v1.get("pids", "")), ""
    if not mounts:
        reasons.append("no cgroup file system is mounted")
    elif not reasons:
        reasons.append("no writable cgroup2 or v1 memory hierarchy for this process")
    return None, "; ".join(reasons)


@dataclass
class ExecutionCgroup:
    """One execution's cgroup: descriptors of its folder(s), for the child to join."""

    name: str
    fds: list[int] = field(default_factory=list)  # memory (v2: the only one) first, then pids (v1)
    oom_base: int = 0  # OOM kills it had counted before the current execution

    def join(self) -> None:
        """In the execution's first process, before any untrusted code: move itself in."""
        for fd in self.fds:
            procs = os.open("cgroup.procs", os.O_WRONLY, dir_fd=fd)
            try:
                os.write(procs, b"0")
            finally:
                os.close(procs)


class WorkerCgroup:
    """A worker's cgroup folder(s) under a :class:`Base`, and in it the cgroup its executions run in.

    The worker moves itself into that execution cgroup once and forks its fork server there
    (:mod:`codemoe.sandbox.forkserver`), so every execution is born inside it (a clone stays in its
    parent's cgroup): moving a process into a cgroup takes the kernel's threadgroup lock, which waits
    for an RCU grace period, 10-15 ms after a busy execution, so a move per execution cost more than
    the execution. The worker then leaves for its checker's leaf (what it allocates, results among
    them, counts for nothing there); the fork server is one process of ``pids.max`` (set one
    higher), allocates nothing between executions, and is the OOM killer's last choice where the
    worker has ``CAP_SYS_RESOURCE`` (see :meth:`enter`; else a worker whose fork server it took is replaced,
    :mod:`codemoe.sandbox.forkserver`); the checker lives in that leaf too.
    Descriptors are opened before the worker's mount namespace makes ``/sys`` read-only (they keep
    reaching the writable mount).
    """

    def __init__(self, base: Base) -> None:
        self.base = base
        self.name = f"{_PREFIX}{os.getpid()}"
        self.fds: list[int] = []
        self._base_fds: list[int] = []  # the folders holding ours, to leave and remove it at the end
        self._limits: tuple[int, int] | None = None
        self.execution = ExecutionCgroup("e")
        self.checker = ExecutionCgroup("checker")
        folders = [base.memory] if base.version == 2 else [p for p in (base.memory, base.pids) if p]
        try:
            for folder in folders:
                _remove_stale(folder)
                self._base_fds.append(_high(os.open(folder, _FLAGS)))
                with contextlib.suppress(FileExistsError):
                    os.mkdir(self.name, dir_fd=self._base_fds[-1])
                self.fds.append(_high(os.open(self.name, _FLAGS, dir_fd=self._base_fds[-1])))
            if base.version == 2:
                self._write(self.fds[0], "cgroup.subtree_control", "+memory +pids")
            for leaf in (self.execution, self.checker):
                for fd in self.fds:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(leaf.name, 0o755, dir_fd=fd)
                    leaf.fds.append(_high(os.open(leaf.name, _FLAGS, dir_fd=fd)))
            if base.version == 2:
                self._optional(self.execution.fds[0], "memory.swap.max", "0")
        except BaseException:
            self.close()
            raise

    def enter(self) -> None:
        """In the worker, once: into the execution cgroup, as the OOM killer's last choice there.

        With ``CAP_SYS_RESOURCE`` the worker is never chosen (-1000; then a v2 OOM may end the
        whole execution, ``memory.oom.group``, which spares it); without, executions make
        themselves the first choice instead (:func:`codemoe.sandbox.isolation.enter` sets theirs
        to 1000, which needs no privilege).
        """
        try:
            fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, b"-1000")
            finally:
                os.close(fd)
            immune = True
        except OSError:
            immune = False
        if immune and self.base.version == 2:
            self._optional(self.execution.fds[0], "memory.oom.group", "1")  # an OOM ends the whole execution
        self.execution.join()

    @staticmethod
    def _write(fd: int, name: str, text: str) -> None:
        target = os.open(name, os.O_WRONLY | os.O_CLOEXEC, dir_fd=fd)
        try:
            os.write(target, text.encode())
        finally:
            os.close(target)

    def start(self, memory_mb: int, processes: int) -> ExecutionCgroup:
        """In the worker, before the clone: the execution cgroup, with this execution's limits."""
        limits = (int(memory_mb), int(processes))
        if limits != self._limits:
            memory = str(limits[0] * 1024 * 1024)
            first = self.execution.fds[0]
            if self.base.version == 2:
                self._write(first, "memory.max", memory)
                self._write(first, "pids.max", str(limits[1] + 1))  # the fork server is in it too
            else:  # memory may never be above memory+swap: raise the second first, lower the first first
                order = ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"]
                if self._limits is not None and limits[0] > self._limits[0]:
                    order.reverse()
                for name in order:  # no swap either: memory+swap is memory
                    (self._write if name == "memory.limit_in_bytes" else self._optional)(first, name, memory)
                # v1 charges TCP buffers to a counter of their own, off unless a limit is set: without one,
                # loopback connections left full held 2.2 GiB under a 256 MiB limit (v2 counts them in memory.max)
                self._optional(first, "memory.kmem.tcp.limit_in_bytes", memory)
                if len(self.execution.fds) > 1:
                    self._write(self.execution.fds[1], "pids.max", str(limits[1] + 1))
            self._limits = limits
        return self.execution

    def _optional(self, fd: int, name: str, text: str) -> None:
        """Files a kernel may lack (no swap accounting, an old kernel)."""
        try:
            self._write(fd, name, text)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.EINVAL, errno.EACCES, errno.EPERM):
                raise

    def oom_kills(self, cgroup: ExecutionCgroup) -> int:
        """How many processes the kernel's OOM killer ended in ``cgroup`` since the last call."""
        if not cgroup.fds:
            return 0
        name = "memory.events" if self.base.version == 2 else "memory.oom_control"
        try:
            fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=cgroup.fds[0])
        except OSError:
            return 0
        try:
            text = os.read(fd, 4096).decode()
        finally:
            os.close(fd)
        counts = dict(line.split(" ", 1) for line in text.splitlines() if " " in line)
        total = int(counts.get("oom_kill", "0"))
        new, cgroup.oom_base = total - cgroup.oom_base, total
        return new

    def join_checker(self) -> None:
        """In the worker's checker, just forked: move into the checker's own leaf."""
        self.checker.join()

    def close(self) -> None:
        """Leave and remove the worker's folder(s) (best effort: the worker is going away)."""
        for fd in self._base_fds:  # back where the worker came from, so the folders can go
            with contextlib.suppress(OSError):
                self._write(fd, "cgroup.procs", "0")
        for leaf in (self.execution, self.checker):
            for fd, parent in zip(leaf.fds, self.fds):
                os.close(fd)
                with contextlib.suppress(OSError):
                    os.rmdir(leaf.name, dir_fd=parent)
            leaf.fds = []
        for fd in self.fds:
            os.close(fd)
        self.fds = []
        for fd in self._base_fds:  # by descriptor: the worker's /sys is read-only by now
            with contextlib.suppress(OSError):
                os.rmdir(self.name, dir_fd=fd)
            os.close(fd)
        self._base_fds = []


def _high(fd: int) -> int:
    """Move ``fd`` above the descriptors an execution takes over."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, _HIGH_FD)
    os.close(fd)
    return moved


def _remove_stale(folder: str) -> None:
    """Remove worker cgroups whose worker is gone (one killed before it could clean up)."""
    try:
        entries = [e for e in os.scandir(folder) if e.name.startswith(_PREFIX) and e.is_dir(follow_symlinks=False)]
    except OSError:
        return
    for entry in entries:
        pid = entry.name[len(_PREFIX):]
        if not pid.isdigit() or os.path.exists(f"/proc/{pid}"):
            continue
        with contextlib.suppress(OSError):
            for child in os.scandir(entry.path):
                if child.is_dir(follow_symlinks=False):
                    with contextlib.suppress(OSError):
                        os.rmdir(child.path)
            os.rmdir(entry.path)


def check(base: Base) -> str:
    """Make and remove one worker cgroup and one execution cgroup with limits; "" when it works.

    Joining is checked by the caller, from a child in the workers' own namespaces.
    """
    try:
        worker = WorkerCgroup(base)
    except OSError as exc:
        return f"cannot make a cgroup under {base.memory}: {exc.strerror or exc}"
    try:
        worker.start(64, 8)
    except OSError as exc:
        return f"cannot make an execution cgroup with limits under {base.memory}: {exc.strerror or exc}"
    finally:
        worker.close()
    return ""
