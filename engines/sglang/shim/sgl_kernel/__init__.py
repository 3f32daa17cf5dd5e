"""A CPU test shim for SGLang's ``sgl_kernel`` (which has no CPU build in the package registry).

Only for running a real SGLang server on a CPU-only machine in codemoe's tests and benchmarks
(``SGLANG_USE_CPU_ENGINE=1 --device cpu``); never installed for GPU use. SGLang's CPU path calls
one function of this package while serving, :func:`assign_req_to_token_pool_cpu`, written here in
plain torch from the semantics of SGLang's own Triton kernel (``assign_req_to_token_pool`` in
``sglang/srt/mem_cache/allocation.py``). Every other name raises ``NotImplementedError`` when
used, so a code path that needs a real kernel fails loudly instead of computing something else.
"""

from __future__ import annotations

from typing import Any

__all__ = ["assign_req_to_token_pool_cpu"]


def assign_req_to_token_pool_cpu(req_pool_indices: Any, req_to_token: Any, start_offset: Any, end_offset: Any,
                                 out_cache_loc: Any, pool_len: int) -> None:
    """For each request ``i``: ``req_to_token[req_pool_indices[i], start[i]:end[i]]`` takes the next
    ``end[i] - start[i]`` entries of ``out_cache_loc`` (requests laid end to end in order)."""
    offset = 0
    for row, start, end in zip(req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist()):
        n = end - start
        if n > 0:
            req_to_token[row, start:end] = out_cache_loc[offset:offset + n].to(req_to_token.dtype)
        offset += n


class _Missing:
    """A kernel this shim does not provide: any use raises."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"sgl_kernel.{self.name} has no CPU implementation in codemoe's test shim")

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Missing(f"{self.name}.{attr}")


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return _Missing(name)
