"""``codemoe sandbox doctor``: which protections are active on this machine, and why any is missing.

The list comes from the same probe every worker runs at start-up (so it cannot disagree with what
executions get), followed by one end-to-end check: a real execution that tries to reach the
network, write outside its work dir, see the host's environment, read host files it must not
see (a canary file, a file of the caller's working directory, one of the checkout's registry, one
of a package the site-packages view leaves out), store a key in the kernel keyring and make a
user namespace; and, where task files are sealed, a graded pytest run whose code under test opens
one of the task's tests for writing.
"""

from __future__ import annotations

import os
import platform
import shutil
import tempfile

from codemoe.sandbox.isolation import (
    DEFAULT_SITE_PACKAGES,
    PRIVATE_TMP,
    Protection,
    checkout_root,
    default_hidden_paths,
    probe,
    site_dirs,
    site_view,
    why_not_hideable,
)

__all__ = ["diagnose", "format_report"]

_CANARY = "CODEMOE_DOCTOR_CANARY"
_CHECK = f"""
import os, socket
found = []
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2)
    found.append("network reachable")
except OSError:
    pass
try:
    open("/etc/codemoe-doctor", "w").close()
    os.remove("/etc/codemoe-doctor")  # where the attack works, it leaves nothing behind
    found.append("wrote /etc")
except OSError:
    pass
if "{_CANARY}" in os.environ:
    found.append("host environment visible")
for path in HOST_FILES:
    try:
        open(path).close()
        found.append("read " + path)
    except OSError:
        pass
if SYSCALLS:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    key = libc.syscall(SYSCALLS["add_key"], b"user", b"codemoe-doctor", b"x", 1, ctypes.c_long(-4))
    if key >= 0:
        found.append("stored a key in the kernel keyring")
        libc.syscall(SYSCALLS["keyctl"], 21, ctypes.c_long(key), 0, 0)  # KEYCTL_INVALIDATE
    child = libc.syscall(SYSCALLS["clone"], 0x10000000 | 17, 0, 0, 0, 0)  # CLONE_NEWUSER | SIGCHLD
    if child == 0:
        os._exit(0)
    if child > 0:
        os.waitpid(child, 0)
        found.append("made a user namespace")
print(";".join(found))
"""
# a graded pytest run whose code under test opens one of the task's tests for writing at import
_SEALED = {
    "tests/test_sealed.py": "import calc\n\n\ndef test_sealed():\n    assert calc.WROTE == ''\n",
    "calc.py": "import os\n\nWROTE = ''\ntry:\n"
               "    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'tests', 'test_sealed.py'), 'a'):\n"
               "        WROTE = 'opened a task file for writing'\nexcept OSError:\n    pass\n",
}
_SYSCALLS = {"x86_64": {"add_key": 248, "keyctl": 250, "clone": 56},
             "aarch64": {"add_key": 217, "keyctl": 219, "clone": 220}}


def diagnose(live: bool = True) -> list[Protection]:
    """Probe the protections; with ``live``, also run one sandboxed execution that attacks them."""
    checks = probe(hide=default_hidden_paths()).protections
    if live:
        checks.append(_end_to_end())
    return checks


def _end_to_end() -> Protection:
    from codemoe.sandbox.api import ExecutionRequest, Limits
    from codemoe.sandbox.errors import SandboxError
    from codemoe.sandbox.local import LocalExecutor

    os.environ[_CANARY] = "1"
    canary_dir = _canary_dir()
    host_files = _host_files(canary_dir)
    outside_view = _outside_site_view()[:1]
    syscalls = _SYSCALLS.get(platform.machine(), {})
    check = f"HOST_FILES = {[*host_files, *outside_view]!r}\nSYSCALLS = {syscalls!r}\n{_CHECK}"
    try:
        with LocalExecutor(workers=1, hide_paths=[canary_dir] if canary_dir else []) as executor:
            result = executor.run(
                ExecutionRequest(command=["python", "-c", check], limits=Limits(timeout_s=10.0))
            )
            sealing = any(p["name"] == "task files read-only" and p["active"] for p in executor.protections)
            sealed = executor.run(ExecutionRequest(files=_SEALED, runner="pytest", command=["tests"], graded=True,
                                                   trusted=["tests/test_sealed.py"], limits=Limits(timeout_s=30.0)))
    except SandboxError as exc:
        return Protection("end-to-end check", False, f"could not start a worker: {exc}")
    finally:
        os.environ.pop(_CANARY, None)
        if canary_dir:
            shutil.rmtree(canary_dir, ignore_errors=True)
    if result.status != "passed":
        return Protection("end-to-end check", False, f"the check program ended {result.status}: {result.reason}")
    breaches = result.stdout.strip()
    if sealing and sealed.status != "passed":
        breaches = ";".join(filter(None, [breaches, f"change a task's file in a graded pytest run ({sealed.reason})"]))
    if breaches:
        return Protection("end-to-end check", False, f"a sandboxed program could: {breaches.replace(';', ', ')}")
    return Protection("end-to-end check", True, "a sandboxed program could not reach the network, "
                      f"write to /etc, see the host environment, read {len(host_files)} host files "
                      "(a canary, the caller's working directory, the checkout's registry)"
                      + (", read a package outside the site-packages view" if outside_view else "")
                      + (", store a kernel key or make a user namespace" if syscalls else "")
                      + (", or change a task's file in a graded pytest run" if sealing else ""))


def _canary_dir() -> str | None:
    """A folder outside /tmp (which every execution has a private one of) holding a canary file."""
    for parent in ("/var/tmp", os.path.expanduser("~")):
        try:
            folder = tempfile.mkdtemp(prefix="codemoe-doctor-", dir=parent)
        except OSError:
            continue
        with open(os.path.join(folder, "canary.txt"), "w") as f:
            f.write("a sandboxed program must not read this\n")
        return folder
    return None


def _host_files(canary_dir: str | None) -> list[str]:
    """Host files no execution may read: the canary, and one file each of the caller's working
    directory and of the checkout's registry (hidden tests live there), where they have one.
    """
    files = [os.path.join(canary_dir, "canary.txt")] if canary_dir else []
    cwd = os.getcwd()
    # under /tmp it is not hidden by a mount but absent: every execution gets a fresh /tmp
    if not why_not_hideable(cwd) or cwd.startswith(PRIVATE_TMP + "/"):
        files += [e.path for e in os.scandir(cwd) if e.is_file(follow_symlinks=False)][:1]
    checkout = checkout_root()
    if checkout:
        for folder, _, names in os.walk(os.path.join(checkout, "registry")):
            if names:
                files.append(os.path.join(folder, sorted(names)[0]))
                break
    return files


def _outside_site_view() -> list[str]:
    """Metadata files of installed distributions the default site-packages view leaves out."""
    _, keep = site_view(DEFAULT_SITE_PACKAGES)
    found = []
    for folder in site_dirs():
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            metadata = os.path.join(entry.path, "METADATA")
            if entry.name.endswith(".dist-info") and entry.path not in keep and os.path.isfile(metadata):
                found.append(metadata)
    return found


def format_report(checks: list[Protection]) -> str:
    """One line per protection: ``[ on]`` or ``[OFF]``, its name and how (or why not)."""
    width = max(len(c.name) for c in checks)
    lines = [f"[{' on' if c.active else 'OFF'}] {c.name:<{width}}  {c.detail}" for c in checks]
    active = sum(c.active for c in checks)
    lines.append(f"{active} of {len(checks)} protections active")
    return "\n".join(lines)
