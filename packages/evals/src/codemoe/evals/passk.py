"""pass@k: the unbiased estimator of Chen et al. (2021), per task and per suite.

With ``n`` samples of which ``c`` pass, the probability that at least one of ``k`` samples drawn
without replacement passes is ``1 - C(n - c, k) / C(n, k)``. It is computed as a product,
``1 - prod_{i = n-c+1}^{n} (1 - k / i)``, which never forms the large binomials.

>>> round(pass_at_k(n=10, c=3, k=1), 4)
0.3
>>> round(pass_at_k(n=5, c=2, k=2), 4)
0.7
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["TaskOutcome", "mean_pass_at_k", "pass_at_k"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task with ``n`` samples, ``c`` of them correct; requires n >= k."""
    if k < 1:
        raise ValueError(f"pass@k needs k >= 1, got k={k}")
    if not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n, got c={c}, n={n}")
    if n < k:
        raise ValueError(f"pass@{k} needs at least {k} samples per task, got n={n}; sample more or lower k")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


@dataclass(frozen=True)
class TaskOutcome:
    """How one task fared: ``n`` graded samples, ``c`` of them passed every hidden test."""

    task_id: str
    family: str
    n: int
    c: int

    def pass_at(self, k: int) -> float:
        return pass_at_k(self.n, self.c, k)


def mean_pass_at_k(outcomes: Iterable[TaskOutcome], k: int) -> float:
    """Suite pass@k: the mean over tasks of the per-task estimate."""
    values: Sequence[float] = [o.pass_at(k) for o in outcomes]
    if not values:
        raise ValueError("pass@k of an empty set of tasks is undefined")
    return sum(values) / len(values)
