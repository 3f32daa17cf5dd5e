"""A seccomp filter for what untrusted code never needs, written as classic BPF.

Each execution installs it last, after ``PR_SET_NO_NEW_PRIVS`` (:func:`install`, called by
:func:`codemoe.sandbox.isolation.enter`); it then holds for the execution and every process it
starts, and cannot be removed. It refuses, with ``EPERM``:

- the kernel keyrings (``keyctl``, ``add_key``, ``request_key``): the user keyring is shared by
  every process of a user id, so one execution could leave a secret for the next;
- looking into or driving other processes (``ptrace``, ``process_vm_readv/writev``, ``kcmp``,
  ``pidfd_getfd``);
- interfaces with a long record of kernel exploits that plain programs do not use (``io_uring_*``,
  ``userfaultfd``, ``bpf``, ``perf_event_open``);
- mounts and namespaces (``mount``, ``umount2``, ``pivot_root``, ``chroot``, the new mount API,
  ``unshare``, ``setns``, and ``clone`` with any ``CLONE_NEW*`` flag), file handles
  (``open_by_handle_at``, ``name_to_handle_at``);
- administration (modules, ``kexec``, swap, ``reboot``, ``acct``, ``quotactl``, ``syslog``,
  ``iopl``/``ioperm``, ``fanotify_init``), ``personality`` other than a query or ``PER_LINUX``
  (turning address randomisation off), the ``TIOCSTI``/``TIOCLINUX`` terminal injections;
- sockets of any family but ``AF_UNIX``, ``AF_INET``, ``AF_INET6`` and ``AF_NETLINK`` (no
  ``AF_VSOCK`` to a hypervisor, no ``AF_PACKET``, ``AF_ALG``, ...);

answers ``clone3`` with ``ENOSYS`` (its flags live in memory a filter cannot read; the C library
then falls back to ``clone``, whose flags it can), and kills the process on a system call of a
foreign architecture (the 32-bit ``int 0x80`` entry, x32 numbers on x86_64, arm32 on aarch64),
which would otherwise use another numbering and pass a filter written for this one.

Only x86_64 and aarch64 numbers are known: elsewhere :func:`why_unavailable` says so, and
``codemoe sandbox doctor`` shows the filter OFF.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct

__all__ = ["DENIED", "install", "number", "program_bytes", "why_unavailable"]

# (AUDIT_ARCH_*, numbers) per machine; the numbers are the kernel's (asm/unistd_64.h for x86_64,
# asm-generic/unistd.h for aarch64)
_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_NUMBERS = {
    #                      x86_64 aarch64
    "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218),
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "kcmp": (312, 272), "pidfd_getfd": (438, 438),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "userfaultfd": (323, 282), "bpf": (321, 280), "perf_event_open": (298, 241),
    "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41), "chroot": (161, 51),
    "unshare": (272, 97), "setns": (308, 268),
    "open_tree": (428, 428), "move_mount": (429, 429), "fsopen": (430, 430), "fsconfig": (431, 431),
    "fsmount": (432, 432), "fspick": (433, 433), "mount_setattr": (442, 442), "open_tree_attr": (467, 467),
    "name_to_handle_at": (303, 264), "open_by_handle_at": (304, 265),
    "kexec_load": (246, 104), "kexec_file_load": (320, 294),
    "init_module": (175, 105), "finit_module": (313, 273), "delete_module": (176, 106),
    "swapon": (167, 224), "swapoff": (168, 225), "reboot": (169, 142), "acct": (163, 89),
    "quotactl": (179, 60), "quotactl_fd": (443, 443), "syslog": (103, 116),
    "lookup_dcookie": (212, 18), "fanotify_init": (300, 262),
    "uselib": (134, None), "_sysctl": (156, None), "iopl": (172, None), "ioperm": (173, None),
}
DENIED = tuple(_NUMBERS)  # refused outright, with EPERM
# looked at more closely: (x86_64, aarch64)
_CLONE, _CLONE3, _SOCKET, _SOCKETPAIR, _PERSONALITY, _IOCTL, _SECCOMP = (
    (56, 220), (435, 435), (41, 198), (53, 199), (135, 92), (16, 29), (317, 277))
_X32_BIT = 0x40000000

_CLONE_NEW = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
_FAMILIES = (1, 2, 10, 16)  # AF_UNIX, AF_INET, AF_INET6, AF_NETLINK
_PERSONALITIES = (0, 0xFFFFFFFF)  # PER_LINUX, and the query
_IOCTLS = (0x5412, 0x541C)  # TIOCSTI, TIOCLINUX

_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000

# classic BPF opcodes
_LD_W_ABS = 0x20
_JEQ = 0x15
_JGE = 0x35
_JSET = 0x45
_RET = 0x06

_OFF_NR, _OFF_ARCH = 0, 4
_OFF_ARG = 16  # low 32 bits of args[i] at 16 + 8 i (both machines are little-endian)

_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_SPEC_ALLOW = 4  # no forced speculation mitigations: they slow the program down


class _Filter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Filter))]


def _assemble(machine: str) -> list[tuple[int, int, int, int]]:
    """The filter for ``machine`` as (code, jt, jf, k); jumps given by label, resolved here."""
    column = 0 if machine == "x86_64" else 1
    arch = _ARCH[machine]
    prog: list[tuple[int, object, object, int]] = []
    labels: dict[str, int] = {}

    def op(code: int, k: int, jt: object = 0, jf: object = 0) -> None:
        prog.append((code, jt, jf, k))

    def label(name: str) -> None:
        labels[name] = len(prog)

    op(_LD_W_ABS, _OFF_ARCH)
    op(_JEQ, arch, 0, "kill")  # a foreign architecture's entry: another numbering
    op(_LD_W_ABS, _OFF_NR)
    if machine == "x86_64":
        op(_JSET, _X32_BIT, "kill", 0)  # x32 numbers
    # a binary search over the numbers the filter looks at: a few comparisons per call, and the
    # kernel's per-number cache of "always allowed" (worked out when the filter is installed, by
    # running it for every number) is quick to make
    actions = {numbers[column]: "eperm" for numbers in _NUMBERS.values() if numbers[column] is not None}
    actions.update({_CLONE3[column]: "enosys", _CLONE[column]: "clone", _SOCKET[column]: "socket",
                    _SOCKETPAIR[column]: "socket", _PERSONALITY[column]: "personality", _IOCTL[column]: "ioctl"})
    branches = iter(range(1 << 16))

    def search(numbers: list[int]) -> None:
        if len(numbers) <= 5:
            for nr in numbers:
                op(_JEQ, nr, actions[nr], 0)
            op(_RET, _RET_ALLOW)  # every other call
            return
        middle = len(numbers) // 2
        upper = f"branch{next(branches)}"
        op(_JGE, numbers[middle], upper, 0)
        search(numbers[:middle])
        label(upper)
        search(numbers[middle:])

    search(sorted(actions))
    label("clone")  # flags are the first argument on both machines
    op(_LD_W_ABS, _OFF_ARG)
    op(_JSET, _CLONE_NEW, "eperm", "allow")
    label("socket")
    op(_LD_W_ABS, _OFF_ARG)
    for family in _FAMILIES:
        op(_JEQ, family, "allow", 0)
    op(_RET, _RET_ERRNO | errno.EPERM)
    label("personality")
    op(_LD_W_ABS, _OFF_ARG)
    for persona in _PERSONALITIES:
        op(_JEQ, persona, "allow", 0)
    op(_RET, _RET_ERRNO | errno.EPERM)
    label("ioctl")  # the kernel reads the request as 32 bits: the low word is all there is
    op(_LD_W_ABS, _OFF_ARG + 8)
    for request in _IOCTLS:
        op(_JEQ, request, "eperm", 0)
    op(_RET, _RET_ALLOW)
    label("eperm")
    op(_RET, _RET_ERRNO | errno.EPERM)
    label("enosys")
    op(_RET, _RET_ERRNO | errno.ENOSYS)
    label("kill")
    op(_RET, _RET_KILL_PROCESS)
    label("allow")  # last: classic BPF jumps only forward
    op(_RET, _RET_ALLOW)

    def target(jump: object, at: int) -> int:
        if isinstance(jump, int):
            return jump
        offset = labels[str(jump)] - at - 1
        if not 0 <= offset <= 255:
            raise ValueError(f"seccomp: jump to {jump} out of range ({offset})")
        return offset

    return [(code, target(jt, i), target(jf, i), k) for i, (code, jt, jf, k) in enumerate(prog)]


def number(name: str) -> int:
    """This machine's number of system call ``name`` (one the filter refuses)."""
    return _NUMBERS[name][0 if _MACHINE == "x86_64" else 1]


def why_unavailable() -> str:
    """Why no filter can be made for this machine ("" when one can)."""
    machine = platform.machine()
    if machine not in _ARCH:
        return f"no system call numbers known for {machine} (only x86_64 and aarch64)"
    return ""


_MACHINE = platform.machine()
_INSTRUCTIONS = (_Filter * 0)()
_PROGRAM: _Program | None = None
if not why_unavailable():
    _code = _assemble(_MACHINE)
    _INSTRUCTIONS = (_Filter * len(_code))(*(_Filter(c, jt, jf, k) for c, jt, jf, k in _code))
    _PROGRAM = _Program(len(_code), ctypes.cast(_INSTRUCTIONS, ctypes.POINTER(_Filter)))
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
# the call's arguments, made once here (in the worker): a child only makes the call
_INSTALL_ARGS = () if _PROGRAM is None else (
    ctypes.c_long(_SECCOMP[0 if _MACHINE == "x86_64" else 1]), ctypes.c_ulong(_SECCOMP_SET_MODE_FILTER),
    ctypes.c_ulong(_SECCOMP_FILTER_FLAG_SPEC_ALLOW), ctypes.c_void_p(ctypes.addressof(_PROGRAM)))


def install() -> None:
    """Install the filter on this process (and all it will start); needs no-new-privs or root.

    Built once when this module is imported (in the worker), so a child only makes the call.
    """
    if _PROGRAM is None:
        raise OSError(errno.ENOSYS, f"seccomp: {why_unavailable()}")
    ret = _libc.syscall(*_INSTALL_ARGS)
    if ret == -1 and ctypes.get_errno() in (errno.EINVAL, errno.ENOSYS):  # a kernel before 4.17 / 3.17
        ret = _libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(_PROGRAM), 0, 0)
    if ret == -1:
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp: {os.strerror(err)}")


def program_bytes() -> bytes:
    """The filter as the kernel gets it (8 bytes an instruction), e.g. to compare with a disassembly."""
    return b"".join(struct.pack("=HBBI", f.code, f.jt, f.jf, f.k) for f in _INSTRUCTIONS)
