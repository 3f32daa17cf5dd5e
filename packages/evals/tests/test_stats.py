"""Bootstrap intervals and improvements: known answers and the seeds' relative-gain example."""

from __future__ import annotations

import pytest
from codemoe.evals.stats import bootstrap_mean, bootstrap_over_runs, improvement, improvement_over_runs


def test_constant_values_give_a_zero_width_interval() -> None:
    est = bootstrap_mean([0.5] * 20)
    assert (est.value, est.low, est.high) == (0.5, 0.5, 0.5)


def test_interval_covers_the_mean_and_shrinks_with_more_tasks() -> None:
    small = bootstrap_mean([0, 1] * 10)
    large = bootstrap_mean([0, 1] * 200)
    assert small.low < 0.5 < small.high
    assert large.high - large.low < (small.high - small.low) / 2
    # binomial standard error at p=0.5, 400 tasks: 0.025 -> 95% half-width about 0.049
    assert large.high - large.low == pytest.approx(2 * 1.96 * 0.025, rel=0.15)


def test_seed_headline_is_relative() -> None:
    # 100 tasks: the baseline solves 32, the candidate the same 32 plus 19.5 more on average
    baseline = {f"t{i}": 1.0 if i < 32 else 0.0 for i in range(100)}
    candidate = {f"t{i}": 1.0 if i < 51 else (0.5 if i == 51 else 0.0) for i in range(100)}
    imp = improvement(baseline, candidate)
    assert imp.paired and imp.tasks == 100
    assert imp.baseline.value == pytest.approx(0.32)
    assert imp.candidate.value == pytest.approx(0.515)
    assert imp.absolute.value == pytest.approx(0.195)
    assert imp.relative.value == pytest.approx(0.609375)
    assert imp.absolute.excludes_zero() and imp.relative.excludes_zero()
    assert imp.absolute.low > 0.1  # paired: the gain is consistent task by task


def test_no_change_is_not_significant() -> None:
    scores = {f"t{i}": (i % 3) / 2 for i in range(60)}
    imp = improvement(scores, dict(scores))
    assert imp.absolute.value == 0.0 and not imp.absolute.excludes_zero()


def test_unpaired_when_task_sets_differ() -> None:
    imp = improvement({"a": 0.0, "b": 1.0}, {"c": 1.0, "d": 1.0, "e": 0.0})
    assert not imp.paired
    assert imp.relative.value == pytest.approx(2 / 3 / 0.5 - 1)


def test_relative_is_undefined_for_a_zero_baseline() -> None:
    imp = improvement({"a": 0.0, "b": 0.0}, {"a": 1.0, "b": 0.0})
    assert imp.absolute.value == 0.5
    assert imp.relative.value != imp.relative.value  # nan


def test_a_relative_change_from_a_zero_baseline_is_written_as_undefined_not_nan():
    from codemoe.evals.compare import format_improvement
    from codemoe.evals.stats import improvement

    zero = improvement({"a": 0.0, "b": 0.0}, {"a": 0.0, "b": 0.5}, resamples=50)
    text = format_improvement("sft", "rl", zero)
    assert "nan" not in text and "relative: undefined (A's pass@1 is 0.0%)" in text
    some = format_improvement("sft", "rl", improvement({"a": 0.5, "b": 0.5}, {"a": 1.0, "b": 0.5}, resamples=50))
    assert "relative: +50.0%" in some


def test_one_run_a_side_over_runs_is_the_paired_comparison_draw_for_draw() -> None:
    import numpy as np

    rng = np.random.default_rng(1)
    baseline = {f"t{i}": float(rng.random()) for i in range(30)}
    candidate = {f"t{i}": float(rng.random()) for i in range(30)}
    assert improvement_over_runs([baseline], [candidate]) == improvement(baseline, candidate)


def test_the_seed_to_seed_spread_widens_the_interval() -> None:
    """Known answer. Two baseline runs score 0.2 and 0.6 on every task, two candidate runs 0.5: the
    tasks tell nothing apart, the runs do. A draw of baseline runs averages 0.2, 0.4 or 0.6 (1/4,
    1/2, 1/4), so the gain is +0.3, +0.1 or -0.1: the 95% interval is [-0.1, +0.3], which includes
    zero, though each run's own paired comparison has a zero-width interval on one side of it."""
    tasks = [f"t{i}" for i in range(10)]
    low, high, mid = ({t: v for t in tasks} for v in (0.2, 0.6, 0.5))
    imp = improvement_over_runs([low, high], [mid, mid])
    assert imp.absolute.value == pytest.approx(0.1)
    assert (imp.absolute.low, imp.absolute.high) == (pytest.approx(-0.1), pytest.approx(0.3))
    assert not imp.absolute.excludes_zero()
    assert improvement(low, mid).absolute.excludes_zero() and improvement(high, mid).absolute.excludes_zero()


def test_runs_compared_over_seeds_must_share_their_tasks() -> None:
    with pytest.raises(ValueError, match="candidate run 2 graded other tasks than baseline run 1 \\(1 against 2\\)"):
        improvement_over_runs([{"a": 1.0, "b": 0.0}], [{"a": 1.0, "b": 1.0}, {"a": 1.0}])
    with pytest.raises(ValueError, match="at least one run"):
        improvement_over_runs([], [{"a": 1.0}])


def test_one_configs_score_over_runs() -> None:
    """Known answers. Runs scoring 0.2 and 0.6 on every task: a draw of two runs averages 0.2, 0.4
    or 0.6, so the 95% interval is [0.2, 0.6] around 0.4. One run is bootstrap_mean's interval, and
    a side of improvement_over_runs is this estimate, draw for draw."""
    import numpy as np

    tasks = [f"t{i}" for i in range(10)]
    low, high = ({t: v for t in tasks} for v in (0.2, 0.6))
    est = bootstrap_over_runs([low, high])
    assert (est.value, est.low, est.high) == (pytest.approx(0.4), pytest.approx(0.2), pytest.approx(0.6))
    rng = np.random.default_rng(2)
    run = {f"t{i:02d}": float(rng.random()) for i in range(30)}
    assert bootstrap_over_runs([run]) == bootstrap_mean([run[t] for t in sorted(run)])
    other = {t: float(rng.random()) for t in run}
    assert bootstrap_over_runs([run, other]) == improvement_over_runs([run, other], [other]).baseline
    with pytest.raises(ValueError, match="^run 2 graded other tasks than run 1 \\(1 against 30\\)"):
        bootstrap_over_runs([run, {"t00": 1.0}])
    with pytest.raises(ValueError, match="at least one run"):
        bootstrap_over_runs([])
