"""Confidence intervals by bootstrap over tasks, and the improvement of one run over another.

Tasks are the unit of resampling: a suite's score is a mean of per-task values (pass@k of each
task), and the question a CI answers is how much that mean would move with a different draw of
tasks and samples. Intervals are percentile bootstrap intervals. When two runs graded the same
tasks the bootstrap is paired (the same task indices are drawn for both), which is what makes a
small but consistent gain detectable.

Two single runs compared this way say how sure the difference is *for those two trained models*; a
training run is itself a draw (its seed picks the samples RL learns from), and two runs of the same
config can differ by more than the paired interval of either pair. :func:`improvement_over_runs`
compares several runs per side (one per training seed): each bootstrap draw resamples the tasks
(shared by every run) and, on each side, the runs, so the interval carries the seed-to-seed spread.

The seeds' headline "+61%" is a *relative* improvement: 32% -> 51.5% is +19.5 points absolute and
``0.515 / 0.32 - 1 = 0.609`` relative. Both are reported, each with its interval.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

__all__ = ["Estimate", "Improvement", "bootstrap_mean", "bootstrap_over_runs", "improvement", "improvement_over_runs"]


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its (low, high) confidence interval."""

    value: float
    low: float
    high: float
    confidence: float

    def excludes_zero(self) -> bool:
        """Whether the interval lies entirely on one side of zero."""
        return self.low > 0.0 or self.high < 0.0

    def as_dict(self) -> dict[str, float]:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.value:.4f} [{self.low:.4f}, {self.high:.4f}]"


def _interval(samples: np.ndarray, value: float, confidence: float) -> Estimate:
    finite = samples[np.isfinite(samples)]
    if finite.size == 0:
        return Estimate(value, float("nan"), float("nan"), confidence)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(finite, [tail, 100.0 - tail])
    return Estimate(float(value), float(low), float(high), confidence)


def bootstrap_mean(
    values: Sequence[float], *, confidence: float = 0.95, resamples: int = 2000, seed: int = 0
) -> Estimate:
    """The mean of ``values`` (one per task) with a percentile bootstrap interval."""
    data = np.asarray(values, dtype=np.float64)  # data: [tasks]
    if data.size == 0:
        raise ValueError("cannot estimate the mean of no tasks")
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, data.size, size=(resamples, data.size))  # draws: [resamples, tasks]
    return _interval(data[draws].mean(axis=1), float(data.mean()), confidence)


@dataclass(frozen=True)
class Improvement:
    """Candidate vs baseline: both scores, the absolute and the relative difference, with CIs."""

    baseline: Estimate
    candidate: Estimate
    absolute: Estimate  # candidate - baseline
    relative: Estimate  # candidate / baseline - 1 (nan when the baseline is 0)
    paired: bool  # True when both runs graded the same tasks
    tasks: int  # tasks in the comparison (the baseline's when unpaired)

    def as_dict(self) -> dict[str, object]:
        return {
            "baseline": self.baseline.as_dict(),
            "candidate": self.candidate.as_dict(),
            "absolute": self.absolute.as_dict(),
            "relative": self.relative.as_dict(),
            "paired": self.paired,
            "tasks": self.tasks,
        }


def _relative(candidate: np.ndarray, baseline: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(baseline > 0, candidate / np.where(baseline > 0, baseline, 1.0) - 1.0, np.nan)


def improvement(
    baseline: Mapping[str, float],
    candidate: Mapping[str, float],
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> Improvement:
    """Compare per-task scores (task id -> value) of two runs.

    Paired bootstrap over the shared task ids when both runs graded the same set of tasks;
    otherwise each run is resampled on its own.
    """
    if not baseline or not candidate:
        raise ValueError("both runs need at least one graded task to be compared")
    rng = np.random.default_rng(seed)
    paired = set(baseline) == set(candidate)
    if paired:
        ids = sorted(baseline)
        b = np.array([baseline[i] for i in ids], dtype=np.float64)  # b: [tasks]
        c = np.array([candidate[i] for i in ids], dtype=np.float64)  # c: [tasks]
        draws = rng.integers(0, len(ids), size=(resamples, len(ids)))
        b_means, c_means = b[draws].mean(axis=1), c[draws].mean(axis=1)
    else:
        b = np.array(list(baseline.values()), dtype=np.float64)
        c = np.array(list(candidate.values()), dtype=np.float64)
        b_means = b[rng.integers(0, b.size, size=(resamples, b.size))].mean(axis=1)
        c_means = c[rng.integers(0, c.size, size=(resamples, c.size))].mean(axis=1)
    return _improvement(b_means, c_means, float(b.mean()), float(c.mean()), confidence, paired, int(b.size))


def _improvement(b_means: np.ndarray, c_means: np.ndarray, b_mean: float, c_mean: float, confidence: float,
                 paired: bool, tasks: int) -> Improvement:
    """The two sides' bootstrap means (one per draw) and point values as an :class:`Improvement`."""
    relative_value = c_mean / b_mean - 1.0 if b_mean > 0 else float("nan")
    return Improvement(
        baseline=_interval(b_means, b_mean, confidence),
        candidate=_interval(c_means, c_mean, confidence),
        absolute=_interval(c_means - b_means, c_mean - b_mean, confidence),
        relative=_interval(_relative(c_means, b_means), relative_value, confidence),
        paired=paired,
        tasks=tasks,
    )


def _run_matrix(runs: Sequence[Mapping[str, float]], side: str, ids: list[str] | None = None) -> tuple[np.ndarray, list[str]]:
    """Per-task scores of ``runs`` as ``[runs, tasks]`` and the task ids (sorted) they are in: those of
    ``ids``, else of the first run. Every run must have graded those tasks."""
    if not runs:
        raise ValueError("both sides need at least one run" if side else "a score over runs needs at least one run")
    ids = ids if ids is not None else sorted(runs[0])
    if not ids:
        raise ValueError("the runs need at least one graded task to be compared")
    for i, run in enumerate(runs):
        if set(run) != set(ids):
            raise ValueError(
                f"{side + ' ' if side else ''}run {i + 1} graded other tasks than {'baseline ' if side else ''}run 1 "
                f"({len(run)} against {len(ids)}): runs compared over seeds must share their task set"
            )
    return np.array([[run[t] for t in ids] for run in runs], dtype=np.float64), ids


def _means_over_runs(scores: np.ndarray, tasks: np.ndarray, picks: np.ndarray) -> np.ndarray:
    """Per draw: each run's mean over the draw's ``tasks`` ([resamples, tasks]), then the mean of the
    draw's ``picks`` of runs ([resamples, runs]): ``[resamples]``."""
    return np.take_along_axis(scores[:, tasks].mean(axis=2).T, picks, axis=1).mean(axis=1)


def bootstrap_over_runs(
    runs: Sequence[Mapping[str, float]], *, confidence: float = 0.95, resamples: int = 2000, seed: int = 0
) -> Estimate:
    """One config's score over several runs (training seeds) and the tasks together: the mean over its
    runs of their mean over tasks, each draw resampling the tasks and then the runs. The same draws as
    the baseline side of :func:`improvement_over_runs` with this seed; one run gives
    :func:`bootstrap_mean`'s interval. Few runs make it a lower bound of the uncertainty."""
    scores, ids = _run_matrix(runs, "")
    rng = np.random.default_rng(seed)
    tasks = rng.integers(0, len(ids), size=(resamples, len(ids)))
    picks = rng.integers(0, scores.shape[0], size=(resamples, scores.shape[0]))
    return _interval(_means_over_runs(scores, tasks, picks), float(scores.mean()), confidence)


def improvement_over_runs(
    baseline: Sequence[Mapping[str, float]],
    candidate: Sequence[Mapping[str, float]],
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> Improvement:
    """Compare per-task scores of several runs per side (training seeds of one config each).

    A score is the mean over the side's runs of their mean over tasks. Each bootstrap draw picks
    the tasks (the same for every run: all must have graded the same tasks) and, per side, as many
    runs as it has, with replacement. With one run per side this is :func:`improvement`, draw for
    draw. With few runs the interval is narrower than the truth (a bootstrap of 3 values cannot
    reach beyond them): read it as a lower bound of the uncertainty.
    """
    b, ids = _run_matrix(baseline, "baseline")  # b: [runs, tasks]
    c, _ = _run_matrix(candidate, "candidate", ids)  # c: [runs, tasks]
    rng = np.random.default_rng(seed)
    tasks = rng.integers(0, len(ids), size=(resamples, len(ids)))  # as improvement() draws them
    b_runs = rng.integers(0, b.shape[0], size=(resamples, b.shape[0]))
    c_runs = rng.integers(0, c.shape[0], size=(resamples, c.shape[0]))
    b_means, c_means = _means_over_runs(b, tasks, b_runs), _means_over_runs(c, tasks, c_runs)
    return _improvement(b_means, c_means, float(b.mean()), float(c.mean()), confidence, True, len(ids))
