"""The root planner: which prefilled groups keep their common leading prompt tokens once, as a root.

Agents' next turns are why: every history starts with the same system prompt and each task's
histories with their task prompt too. A group whose prompt starts with a running root's tokens
joins that root; among the others, neighbours (prompts sorted) sharing at least a minimum of
leading tokens get a new root, split into the runs that save the most tokens (:func:`root_runs`).
Every group keeps at least one token of its own.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from codemoe.serving.prefix_cache import common_prefix

__all__ = ["Root", "RootPlan", "plan_roots", "root_runs"]


@dataclass(eq=False)
class Root:
    """Leading prompt tokens that running groups have in common, kept once in a root slot."""

    slot: int
    tokens: list[int]
    groups: int  # running groups that read it

    @property
    def length(self) -> int:
        return len(self.tokens)


@dataclass
class RootPlan:
    """Where each of a step's prefilled prompts reads its leading tokens from."""

    joins: list[tuple[int, Root]]  # (prompt, running root it starts with)
    runs: list[tuple[list[int], int]]  # (prompts, shared length): a new root each, in order of first prompt


def root_runs(common: list[int], minimum: int) -> list[tuple[int, int, int]]:
    """Split sorted prompts ``0 .. len(common)`` into runs of neighbours that share a root, saving
    the most tokens.

    ``common[i]`` is how many leading tokens prompts ``i`` and ``i + 1`` share. A run ``i .. j``
    (``j > i``) shares ``min(common[i:j])`` tokens, at least ``minimum``, and keeps them once instead
    of ``j - i + 1`` times. Returns the runs ``(first, last, shared)`` of a best split (dynamic
    programming over where runs end); prompts in no run get no root. One run of all prompts would
    keep only what all of them share (the system prompt) once, which is why the split matters.
    """
    n = len(common) + 1
    saved = [0] * (n + 1)  # saved[j]: the most tokens saved among prompts 0 .. j-1
    last_run: list[tuple[int, int] | None] = [None] * (n + 1)  # (first prompt, shared) of the run ending at j-1
    for j in range(1, n + 1):
        saved[j] = saved[j - 1]  # prompt j-1 in no run
        shared = None
        for i in range(j - 2, -1, -1):  # the run i .. j-1
            shared = common[i] if shared is None else min(shared, common[i])
            if shared < minimum:
                break
            if saved[i] + (j - 1 - i) * shared > saved[j]:
                saved[j], last_run[j] = saved[i] + (j - 1 - i) * shared, (i, shared)
    runs = []
    j = n
    while j > 0:
        if last_run[j] is None:
            j -= 1
            continue
        first, shared = last_run[j]
        runs.append((first, j - 1, shared))
        j = first
    return runs[::-1]


def _starts_with(prompt: list[int], head: list[int]) -> bool:
    """``prompt`` starts with ``head`` and has at least one token more."""
    return len(prompt) > len(head) and prompt[: len(head)] == head


def plan_roots(prompts: list[list[int]], roots: list[Root], minimum: int) -> RootPlan:
    """The roots of ``prompts`` (in prefix slot order): the running root each starts with, and new
    roots for neighbours among the others that share ``minimum`` leading tokens or more."""
    joins, alone = [], []
    for i, prompt in enumerate(prompts):
        root = next((r for r in roots if _starts_with(prompt, r.tokens)), None)
        if root is None:
            alone.append(i)
        else:
            joins.append((i, root))
    order = sorted(alone, key=lambda i: prompts[i])
    common = [
        min(common_prefix(prompts[a], prompts[b]), len(prompts[a]) - 1, len(prompts[b]) - 1)
        for a, b in itertools.pairwise(order)
    ]
    runs = [(order[i : j + 1], shared) for i, j, shared in root_runs(common, minimum)]
    runs.sort(key=lambda run: min(run[0]))  # root slots in prefix slot order: reads are views
    return RootPlan(joins, runs)
