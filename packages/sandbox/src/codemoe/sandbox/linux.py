"""Thin wrappers over the Linux system calls the sandbox needs and Python 3.10 lacks.

``clone`` with namespace flags (so one system call gives the child its own PID, network, mount,
IPC and UTS namespaces), ``unshare``, ``mount``, ``prctl`` (dumpable, no-new-privs, dropping every
capability), ``sethostname`` and bringing the loopback interface up. Each raises ``OSError`` with the errno, like the ``os`` module does.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import platform
import socket
import struct

__all__ = [
    "CLONE_NEWIPC",
    "CLONE_NEWNET",
    "CLONE_NEWNS",
    "CLONE_NEWPID",
    "CLONE_NEWUSER",
    "CLONE_NEWUTS",
    "MS_BIND",
    "MS_NODEV",
    "MS_NOEXEC",
    "MS_NOSUID",
    "MS_PRIVATE",
    "MS_RDONLY",
    "MS_REC",
    "MS_REMOUNT",
    "clone",
    "drop_bounding_set",
    "drop_capabilities",
    "loopback_up",
    "mount",
    "mount_points",
    "no_new_privs",
    "parent_death_signal",
    "set_dumpable",
    "sethostname",
    "setns",
    "umount",
    "unshare",
]

CLONE_PARENT = 0x00008000  # the new process is its caller's parent's child (the fork server's clones are the worker's)
CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21
MS_STRICTATIME = 1 << 24

# Mount options that an unprivileged remount must keep ("locked" flags), by their mountinfo names.
_OPTION_FLAGS = {
    "ro": MS_RDONLY,
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": MS_NOATIME,
    "nodiratime": MS_NODIRATIME,
    "relatime": MS_RELATIME,
    "strictatime": MS_STRICTATIME,
}

_SYS_CLONE = {"x86_64": 56, "aarch64": 220, "ppc64le": 120, "s390x": 120}
_MNT_DETACH = 2
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522  # two 32-bit words per set
_PR_SET_NO_NEW_PRIVS = 38
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1

_libc = ctypes.CDLL(None, use_errno=True)  # the C library is already loaded; ctypes.util would import subprocess
_libc.syscall.restype = ctypes.c_long
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]


def _last_capability() -> int:
    """The highest capability number this kernel knows (read once, in the worker)."""
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 63  # every possible one; the kernel answers EINVAL past its last


_CAP_LAST = _last_capability()


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


# built once at import (in the worker): a forked child only makes the calls, with no lookup of a C
# function (``_libc.capset`` would be looked up, and cached, in the child: pages it writes) and no
# argument object made
_CAP_HEADER = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
_CAP_DATA = (_CapData * 2)()  # all zero
_capset = _libc.capset
_capset.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
_CAPSET_ARGS = (ctypes.addressof(_CAP_HEADER), ctypes.addressof(_CAP_DATA))


def _check(ret: int, what: str) -> int:
    if ret == -1:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def clone(flags: int) -> int:
    """Fork with ``flags`` (``CLONE_NEW*``): returns the child's PID in the parent, 0 in the child.

    Python's own fork bookkeeping runs around the call (``PyOS_BeforeFork`` and friends), so the
    child is a proper Python process, as after ``os.fork()``. The caller must be single-threaded.
    """
    number = _SYS_CLONE.get(platform.machine())
    if number is None:
        raise OSError(38, f"clone: no system call number known for {platform.machine()}")
    api = ctypes.pythonapi
    api.PyOS_BeforeFork()
    pid = _libc.syscall(ctypes.c_long(number), ctypes.c_ulong(flags | 17), None, None, None, None)  # 17: SIGCHLD
    err = ctypes.get_errno()
    if pid == 0:
        api.PyOS_AfterFork_Child()
        return 0
    api.PyOS_AfterFork_Parent()
    if pid == -1:
        raise OSError(err, f"clone: {os.strerror(err)}")
    return pid


def unshare(flags: int) -> None:
    """Move the calling process into new namespaces."""
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def setns(fd: int, nstype: int) -> None:
    """Join the namespace that ``fd`` (an open ``/proc/PID/ns/...`` file) refers to."""
    _check(_libc.setns(ctypes.c_int(fd), ctypes.c_int(nstype)), "setns")


def umount(target: str) -> None:
    """Detach the mount at ``target`` (lazy unmount: it goes once nothing uses it)."""
    _check(_libc.umount2(os.fsencode(target), ctypes.c_int(_MNT_DETACH)), f"umount {target}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    """mount(2)."""

    def enc(s: str | None) -> bytes | None:
        return None if s is None else os.fsencode(s)

    _check(_libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def mount_points() -> list[tuple[str, int]]:
    """Every mount point of this mount namespace with the flags a bind remount must keep."""
    points = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            fields = line.split()
            target = _unescape(fields[4])
            flags = 0
            for option in fields[5].split(","):
                flags |= _OPTION_FLAGS.get(option, 0)
            points.append((target, flags))
    return points


def _unescape(path: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    for code in ("\\040", "\\011", "\\012", "\\134"):
        path = path.replace(code, chr(int(code[1:], 8)))
    return path


def parent_death_signal(signum: int) -> None:
    """Have the kernel send ``signum`` to this process when its parent dies."""
    _check(_libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")


def set_dumpable(flag: bool) -> None:
    """``prctl(PR_SET_DUMPABLE)``: a non-dumpable process cannot be ptraced by, nor have its
    ``/proc/<pid>/{mem,fd,environ}`` opened by, other processes of the same user.
    """
    _check(_libc.prctl(_PR_SET_DUMPABLE, int(bool(flag)), 0, 0, 0), "prctl(PR_SET_DUMPABLE)")


def drop_bounding_set() -> None:
    """Empty the capability bounding set, so no exec can ever grant a capability again.

    Each ``PR_CAPBSET_DROP`` needs ``CAP_SETPCAP``; without it (or past this kernel's last
    capability) the kernel answers EPERM / EINVAL, which are ignored. The capabilities the process
    holds now are kept: a root process can still change its user ids afterwards.
    """
    for cap in range(_CAP_LAST + 1):
        if _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) == -1:
            err = ctypes.get_errno()
            if err not in (errno.EINVAL, errno.EPERM):
                raise OSError(err, f"prctl(PR_CAPBSET_DROP, {cap}): {os.strerror(err)}")


def drop_capabilities(*, bounding: bool = True) -> None:
    """Hold no capability any more, and never gain one back.

    Empties the bounding set (:func:`drop_bounding_set`; a process that has lost ``CAP_SETPCAP``
    already cannot, so call that one first when you change user ids), clears the ambient set,
    then sets the effective, permitted and inheritable sets to nothing with ``capset(2)``. Called as root of a user namespace, it removes what that root holds
    inside it (CAP_SYS_PTRACE, CAP_SYS_ADMIN, ...); called after ``setresuid`` to a non-root user,
    the kernel has cleared those sets already and this makes sure of it.
    """
    if bounding:  # False: the caller emptied it already (before it changed user ids)
        drop_bounding_set()
    if _libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) == -1:
        err = ctypes.get_errno()
        if err != errno.EINVAL:  # a kernel before 4.3 has no ambient set
            raise OSError(err, f"prctl(PR_CAP_AMBIENT_CLEAR_ALL): {os.strerror(err)}")
    header = _CAP_HEADER
    header.version = _LINUX_CAPABILITY_VERSION_3  # the kernel writes its own version there on EINVAL
    _check(_capset(*_CAPSET_ARGS), "capset")


def no_new_privs() -> None:
    """Forbid gaining privileges through exec (setuid binaries, file capabilities)."""
    _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")


def sethostname(name: str) -> None:
    """Set the host name of this UTS namespace."""
    raw = name.encode()
    _check(_libc.sethostname(raw, len(raw)), "sethostname")


def loopback_up() -> None:
    """Bring ``lo`` up in this network namespace (a new one starts with it down)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | _IFF_UP))
