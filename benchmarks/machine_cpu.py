"""What the asynchronous-RL benchmarks read of the machine: every process's CPU time (Linux)."""

from __future__ import annotations

import os

__all__ = ["machine_busy_seconds"]


def machine_busy_seconds() -> float:
    """CPU seconds every process of the machine has spent (``/proc/stat``: all but idle and iowait):
    the trainer, the engine's child or the server, the sandbox's workers and their executions."""
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")
