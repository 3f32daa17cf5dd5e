"""Where a stage's model and tensors live: one resolver for every package's ``device`` option.

``device`` is ``auto | cpu | cuda | cuda:N``:

- ``auto``: the local rank's GPU when CUDA is available (``cuda:LOCAL_RANK`` under ``torchrun``,
  ``cuda:0`` in one process), else the CPU;
- ``cuda``: the same GPU, refused when CUDA is not available;
- ``cuda:N``: that GPU, refused when there is no GPU ``N``;
- ``cpu``: the CPU, also on a machine with GPUs.

A CUDA device is made the process's current device (``torch.cuda.set_device``), so what picks
the "current" GPU (FSDP2's default mesh, NCCL's communicator) uses the same one. Importing this
module does not import torch; :func:`check_device` (the config classes' check) never touches it.
"""

from __future__ import annotations

import os
import re
from typing import Any

from codemoe.core.errors import ConfigError, did_you_mean

__all__ = ["DEVICE_CHOICES", "check_device", "resolve_device", "usable_cpus"]

DEVICE_CHOICES = ("auto", "cpu", "cuda", "cuda:N")
_SPEC = re.compile(r"^(auto|cpu|cuda)$|^cuda:(\d+)$")


def check_device(spec: Any, *, key: str = "device") -> None:
    """Refuse a ``device`` value that is none of :data:`DEVICE_CHOICES`, naming ``key``."""
    if not isinstance(spec, str) or _SPEC.match(spec) is None:
        hint = did_you_mean(str(spec), ["auto", "cpu", "cuda"]) if isinstance(spec, str) else ""
        raise ConfigError(
            f"'{key}': {spec!r} is not a device{hint}; use one of {', '.join(DEVICE_CHOICES)} (N: a GPU index)"
        )


def resolve_device(
    spec: str = "auto",
    *,
    key: str = "device",
    local_rank: int | None = None,
    cuda_available: bool | None = None,
    device_count: int | None = None,
) -> Any:
    """The ``torch.device`` that ``spec`` names on this process (see the module docstring).

    ``local_rank`` defaults to ``LOCAL_RANK`` (set by ``torchrun``; absent: one process, rank 0).
    ``cuda_available`` and ``device_count`` default to what torch reports; a caller that passes
    them (a test) describes a machine, and then no CUDA runtime call is made.
    """
    import torch

    check_device(spec, key=key)
    probed = cuda_available is None
    if probed:
        cuda_available = torch.cuda.is_available()
    if device_count is None:
        device_count = torch.cuda.device_count() if probed and cuda_available else int(bool(cuda_available))
    if local_rank is None:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if spec == "cpu" or (spec == "auto" and not cuda_available):
        return torch.device("cpu")
    if not cuda_available:
        raise ConfigError(f"'{key}': {spec!r} needs CUDA, which this machine does not have; use 'cpu' or 'auto'")
    match = _SPEC.match(spec)
    index = int(match.group(2)) if match.group(2) is not None else local_rank
    if index >= device_count:
        which = f"GPU {index}" if match.group(2) is not None else f"GPU {index} (the local rank's, LOCAL_RANK={index})"
        raise ConfigError(
            f"'{key}': {spec!r} names {which}, but this machine has {device_count} GPU(s) (cuda:0..cuda:{device_count - 1})"
        )
    device = torch.device("cuda", index)
    if probed:
        torch.cuda.set_device(device)
    return device


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, which a container or ``taskset`` narrows;
    ``os.cpu_count()`` where there is none): what "one per CPU" means for workers and episodes."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)
