"""Dispatch: group (token, expert) assignments by expert, and bring expert outputs back.

This is the seam between routing and expert compute. A dispatcher hands the experts a
:class:`Dispatched`: the token rows they read and, per assignment, which row, grouped by expert.
Experts add ``w · expert(row)`` into an output with one row per token row. The local dispatcher
only computes the grouping (the experts read the tokens in place: no copy of ``T·k`` rows); an
expert-parallel dispatcher exchanges rows with an all-to-all so each rank receives the rows of
the experts it holds, and its ``combine`` sends the outputs back. Expert implementations do not
change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["Dispatched", "LocalDispatcher", "LocalDispatcherConfig"]


@dataclass
class Dispatched:
    """Assignments grouped by expert: those of expert ``e`` are contiguous, experts in order."""

    tokens: torch.Tensor  # [N, H] token rows the experts read (local: the batch's tokens, not copied)
    rows: torch.Tensor  # [S] int64 row of ``tokens`` for each assignment, grouped by expert
    counts: list[int]  # [E] assignments per expert (a host list: per-expert matmuls slice by it)
    weights: torch.Tensor  # [S] combine weight of each assignment
    context: Any = None  # what the dispatcher's combine needs to send outputs back


@dataclass
class LocalDispatcherConfig:
    """The local dispatcher has no options: every expert lives in this process."""


class LocalDispatcher:
    """Group assignments by expert within one process (no communication, no copies)."""

    def __init__(self, config: LocalDispatcherConfig | None = None) -> None:
        self.config = config or LocalDispatcherConfig()

    def local_experts(self, num_experts: int) -> int:
        """Experts this process holds out of ``num_experts``: all of them."""
        return num_experts

    def expert_offset(self, held: int) -> int:
        """Global id of the first expert this process holds."""
        return 0

    def dispatch(self, x: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor, num_experts: int) -> Dispatched:
        """Group the assignments ``indices [T, k]`` (negative: unrouted) of tokens ``x [T, H]`` by expert."""
        k = indices.shape[-1]
        flat = indices.reshape(-1)
        # Unrouted slots get key E so that the stable sort puts them after every expert's rows.
        keys = torch.where(flat < 0, torch.full_like(flat, num_experts), flat)
        order = torch.argsort(keys, stable=True)
        # The one host read of a dispatch: the experts slice their rows per expert, and the unrouted
        # rows are cut off after the last expert's, both by sizes that must be on the host.
        counts = torch.bincount(keys, minlength=num_experts + 1)[:num_experts].tolist()
        order = order[: sum(counts)]
        return Dispatched(tokens=x, rows=order // k, counts=counts, weights=weights.reshape(-1).index_select(0, order))

    def combine(self, out: torch.Tensor, dispatched: Dispatched, num_tokens: int) -> torch.Tensor:
        """The experts' summed outputs per token ``[T, H]`` (local: they already are)."""
        return out
