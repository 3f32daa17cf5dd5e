"""``codemoe sandbox doctor``: which protections are active on this machine, and why any is missing.

The list comes from the same probe every worker runs at start-up (so it cannot disagree with what
executions get), followed by one end-to-end check: a real execution that tries to reach the
network, write outside its work dir, see the host's environment and read host files it must not
see (a canary file, a file of the caller's working directory, one of the checkout's registry).
"""

from __future__ import annotations

import os
import shutil
import tempfile

from codemoe.sandbox.isolation import (
    PRIVATE_TMP,
    Protection,
    checkout_root,
    default_hidden_paths,
    probe,
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
print(";".join(found))
"""


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
    check = f"HOST_FILES = {host_files!r}\n{_CHECK}"
    try:
        with LocalExecutor(workers=1, hide_paths=[canary_dir] if canary_dir else []) as executor:
            result = executor.run(
                ExecutionRequest(command=["python", "-c", check], limits=Limits(timeout_s=10.0))
            )
    except SandboxError as exc:
        return Protection("end-to-end check", False, f"could not start a worker: {exc}")
    finally:
        os.environ.pop(_CANARY, None)
        if canary_dir:
            shutil.rmtree(canary_dir, ignore_errors=True)
    if result.status != "passed":
        return Protection("end-to-end check", False, f"the check program ended {result.status}: {result.reason}")
    breaches = result.stdout.strip()
    if breaches:
        return Protection("end-to-end check", False, f"a sandboxed program could: {breaches.replace(';', ', ')}")
    return Protection("end-to-end check", True, "a sandboxed program could not reach the network, "
                      f"write to /etc, see the host environment or read {len(host_files)} host files "
                      "(a canary, the caller's working directory, the checkout's registry)")


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


def format_report(checks: list[Protection]) -> str:
    """One line per protection: ``[ on]`` or ``[OFF]``, its name and how (or why not)."""
    width = max(len(c.name) for c in checks)
    lines = [f"[{' on' if c.active else 'OFF'}] {c.name:<{width}}  {c.detail}" for c in checks]
    active = sum(c.active for c in checks)
    lines.append(f"{active} of {len(checks)} protections active")
    return "\n".join(lines)
