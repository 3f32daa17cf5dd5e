"""Peak memory of a block of code, above what was held when it started.

``with PeakMemory() as peak: step()`` then ``peak.bytes`` is the highest memory the block reached
minus the memory held on entry (the baseline), so what a process already holds (imports, a model
built before the block) does not count. Where it is measured (``peak.source``):

- ``"cuda"``: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats`` on entry; the
  baseline is ``memory_allocated`` on entry. Tensors only: the caching allocator's reserve, the
  CUDA context and NCCL buffers are not counted.
- ``"vmhwm"`` (CPU on Linux): writing ``5`` to ``/proc/self/clear_refs`` resets the process's
  peak resident set (``VmHWM``) to its current size; the baseline is ``VmRSS`` on entry and the
  peak ``VmHWM`` on exit, both from ``/proc/self/status``. Whole process: every thread, the
  allocator's free lists, pages of libraries loaded inside the block.
- ``"ru_maxrss"`` (CPU without a writable ``/proc/self/clear_refs``, e.g. macOS): ``getrusage``
  gives the process's peak since it started, which cannot be reset, so only growth of that
  lifetime peak counts: a lower bound whenever the process peaked higher before the block
  (``peak.resettable`` is ``False``). In a fresh subprocess, where the lifetime peak on entry is
  the memory held, it is the block's peak.

Per process: under ``torchrun`` each rank measures its own.

On glibc the resident set follows tensors only as far as ``malloc`` gives memory back: freed
blocks it keeps on its heap are reused without growing the resident set, so a block that runs
after a larger one (a warm-up step) reads low. Start the measured process with
:data:`FOLLOW_TENSORS_ENV` (``MALLOC_MMAP_THRESHOLD_=65536``): every allocation of 64 KiB or more
is then mapped on its own and unmapped when freed (a fixed threshold also stops glibc raising it),
and the peak follows the tensors' lifetimes.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

__all__ = ["FOLLOW_TENSORS_ENV", "PeakMemory", "resident_bytes"]

# environment of a process whose resident set should follow its tensors (see the module docstring)
FOLLOW_TENSORS_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536"}

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_bytes(field: str) -> int:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``) in bytes."""
    match = re.search(rf"^{field}:\s+(\d+) kB", _STATUS.read_text(), re.MULTILINE)
    if match is None:
        raise RuntimeError(f"{_STATUS} has no {field} line")
    return int(match.group(1)) * 1024


def _max_rss_bytes() -> int:
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere


def resident_bytes() -> int:
    """The process's resident set now (``VmRSS``), or its lifetime peak where ``/proc`` is missing."""
    return _status_bytes("VmRSS") if _STATUS.exists() else _max_rss_bytes()


class PeakMemory:
    """Context manager: the peak memory of its block above the memory held on entry.

    ``device`` is ``"cpu"`` (the process's resident set) or a CUDA device (``"cuda"``,
    ``"cuda:1"``, a ``torch.device``): the tensors allocated on it. ``peak.bytes`` is valid after
    the block; ``peak.so_far()`` reads it inside the block.
    """

    def __init__(self, device: Any = "cpu") -> None:
        self.device = str(device)
        self.source = self._source()
        self.resettable = self.source != "ru_maxrss"
        self.baseline = 0  # bytes held on entry
        self.peak = 0  # highest bytes held in the block (baseline included)
        self.bytes = 0  # peak - baseline

    def _source(self) -> str:
        if self.device.startswith("cuda"):
            return "cuda"
        if self.device != "cpu":
            raise ValueError(f"PeakMemory measures 'cpu' or a CUDA device, not {self.device!r}")
        try:
            _CLEAR_REFS.write_text("5")
        except OSError:
            return "ru_maxrss"
        return "vmhwm"

    def _reset(self) -> int:
        """Reset the peak to the current use and return the current use."""
        if self.source == "cuda":
            import torch

            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            return torch.cuda.memory_allocated(self.device)
        if self.source == "vmhwm":
            _CLEAR_REFS.write_text("5")
            return _status_bytes("VmRSS")
        return _max_rss_bytes()  # cannot be reset: the lifetime peak is the best baseline there is

    def _peak(self) -> int:
        if self.source == "cuda":
            import torch

            torch.cuda.synchronize(self.device)
            return torch.cuda.max_memory_allocated(self.device)
        return _status_bytes("VmHWM") if self.source == "vmhwm" else _max_rss_bytes()

    def so_far(self) -> int:
        """Peak bytes above the baseline since the block started."""
        return max(0, self._peak() - self.baseline)

    def __enter__(self) -> PeakMemory:
        self.baseline = self._reset()
        return self

    def __exit__(self, *exc: object) -> None:
        self.peak = max(self._peak(), self.baseline)
        self.bytes = self.peak - self.baseline

    def __repr__(self) -> str:
        return f"PeakMemory(device={self.device!r}, source={self.source!r}, bytes={self.bytes})"
