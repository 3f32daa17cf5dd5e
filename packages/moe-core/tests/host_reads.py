"""Counting host reads: calls that copy a tensor's values into Python (on an accelerator, each
waits for the device to finish its queued work).

Only the Python-level reads are seen (``tolist``, ``item``, ``bool``/``int``/``float`` of a
tensor); an operator that reads a size back inside C++ is not, so code under test that must not
read passes such sizes explicitly (``repeat_interleave(..., output_size=)``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

READS = ("tolist", "item", "__bool__", "__int__", "__float__")


@contextmanager
def count_host_reads() -> Iterator[list[str]]:
    """Inside the block, every host read of a tensor is appended, by method name, to the yielded list."""
    calls: list[str] = []
    originals = {name: getattr(torch.Tensor, name) for name in READS}

    def counting(name, original):
        def read(self, *args, **kwargs):
            calls.append(name)
            return original(self, *args, **kwargs)

        return read

    for name, original in originals.items():
        setattr(torch.Tensor, name, counting(name, original))
    try:
        yield calls
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)
