"""``codemoe sandbox doctor``: which protections are active on this machine, and why any is missing.

The list comes from the same probe every worker runs at start-up (so it cannot disagree with what
executions get), followed by one end-to-end check: a real execution that tries to reach the
network, write outside its work dir and see the host's environment.
"""

from __future__ import annotations

import os

from codemoe.sandbox.isolation import Protection, probe

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
    open("/etc/codemoe-doctor", "w")
    found.append("wrote /etc")
except OSError:
    pass
if "{_CANARY}" in os.environ:
    found.append("host environment visible")
print(";".join(found))
"""


def diagnose(live: bool = True) -> list[Protection]:
    """Probe the protections; with ``live``, also run one sandboxed execution that attacks them."""
    checks = probe().protections
    if live:
        checks.append(_end_to_end())
    return checks


def _end_to_end() -> Protection:
    from codemoe.sandbox.api import ExecutionRequest, Limits
    from codemoe.sandbox.errors import SandboxError
    from codemoe.sandbox.local import LocalExecutor

    os.environ[_CANARY] = "1"
    try:
        with LocalExecutor(workers=1) as executor:
            result = executor.run(
                ExecutionRequest(command=["python", "-c", _CHECK], limits=Limits(timeout_s=10.0))
            )
    except SandboxError as exc:
        return Protection("end-to-end check", False, f"could not start a worker: {exc}")
    finally:
        os.environ.pop(_CANARY, None)
    if result.status != "passed":
        return Protection("end-to-end check", False, f"the check program ended {result.status}: {result.reason}")
    breaches = result.stdout.strip()
    if breaches:
        return Protection("end-to-end check", False, f"a sandboxed program could: {breaches.replace(';', ', ')}")
    return Protection("end-to-end check", True, "a sandboxed program could not reach the network, "
                      "write to /etc or see the host environment")


def format_report(checks: list[Protection]) -> str:
    """One line per protection: ``[ on]`` or ``[OFF]``, its name and how (or why not)."""
    width = max(len(c.name) for c in checks)
    lines = [f"[{' on' if c.active else 'OFF'}] {c.name:<{width}}  {c.detail}" for c in checks]
    active = sum(c.active for c in checks)
    lines.append(f"{active} of {len(checks)} protections active")
    return "\n".join(lines)
