"""Comparing evaluations: find a run's evaluation summaries and measure the improvement between two.

A run directory's ``state.json`` lists each finished stage's result; an ``eval`` stage's result
carries ``"kind": "eval"`` and the path of its ``eval.json``. ``compare_runs`` takes two run
directories (or one, with two stage ids) and returns pass@k of both with the absolute and relative
improvement, each with a bootstrap CI, paired over the tasks both evaluated.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from codemoe.evals.stats import Improvement, improvement, improvement_over_runs
from codemoe.evals.summary import EVAL_FILE, load_summary, per_task_pass

__all__ = [
    "compare_runs",
    "compare_seeds",
    "compare_summaries",
    "eval_stages",
    "format_improvement",
    "format_seeds",
    "resolve_pair",
    "resolve_summary",
]


def eval_stages(run_dir: Path, results: Mapping[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Evaluation results of a run by stage id, in pipeline order (from ``state.json`` by default)."""
    if results is None:
        state = Path(run_dir) / "state.json"
        if not state.is_file():
            raise FileNotFoundError(f"{run_dir} is not a codemoe run directory (no state.json)")
        results = json.loads(state.read_text()).get("finished", {})
    return {sid: dict(r) for sid, r in results.items() if isinstance(r, Mapping) and r.get("kind") == "eval"}


def resolve_summary(path: Path, stage: str | None = None) -> tuple[str, dict[str, Any]]:
    """(label, summary) for a run dir (its last eval stage, or ``stage``), a stage dir or an eval.json."""
    path = Path(path)
    if path.is_file() or (path / EVAL_FILE).is_file():
        return str(path), load_summary(path)
    stages = eval_stages(path)
    if not stages:
        raise FileNotFoundError(f"run {path} has no finished eval stage")
    if stage is None:
        stage = list(stages)[-1]
    if stage not in stages:
        raise KeyError(f"run {path} has no eval stage '{stage}'; eval stages: {', '.join(stages)}")
    return f"{path.name}:{stage}", load_summary(Path(stages[stage]["summary"]))


def compare_summaries(
    baseline: dict[str, Any],
    candidate: dict[str, Any],
    *,
    k: int = 1,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> Improvement:
    """pass@k improvement of ``candidate`` over ``baseline`` (paired when they share the task set)."""
    return improvement(
        per_task_pass(baseline, k),
        per_task_pass(candidate, k),
        confidence=confidence,
        resamples=resamples,
        seed=seed,
    )


def resolve_pair(
    run_a: Path, run_b: Path | None = None, *, stage_a: str | None = None, stage_b: str | None = None
) -> tuple[tuple[str, dict[str, Any]], tuple[str, dict[str, Any]]]:
    """``((label, summary) of A, (label, summary) of B)``; with one run, two of its eval stages
    (first vs last unless named)."""
    if run_b is None:
        stages = list(eval_stages(run_a))
        if len(stages) < 2 and stage_b is None:
            raise ValueError(f"run {run_a} has {len(stages)} eval stage(s); give a second run to compare with")
        run_b = run_a
        stage_a = stage_a or stages[0]
        stage_b = stage_b or stages[-1]
    return resolve_summary(run_a, stage_a), resolve_summary(run_b, stage_b)


def compare_runs(
    run_a: Path,
    run_b: Path | None = None,
    *,
    stage_a: str | None = None,
    stage_b: str | None = None,
    k: int = 1,
    confidence: float = 0.95,
    resamples: int = 2000,
) -> tuple[str, str, Improvement]:
    """Improvement of B over A; with one run, compares two of its eval stages (first vs last)."""
    (label_a, a), (label_b, b) = resolve_pair(run_a, run_b, stage_a=stage_a, stage_b=stage_b)
    return label_a, label_b, compare_summaries(a, b, k=k, confidence=confidence, resamples=resamples)


def compare_seeds(
    baseline: list[Path],
    candidate: list[Path],
    *,
    stage_a: str | None = None,
    stage_b: str | None = None,
    k: int = 1,
    confidence: float = 0.95,
    resamples: int = 2000,
) -> tuple[list[tuple[str, float]], list[tuple[str, float]], Improvement]:
    """pass@k of several runs of a candidate config against several of a baseline (one per training
    seed; :func:`codemoe.evals.stats.improvement_over_runs`): ((label, pass@k) per baseline run,
    the same per candidate run, the improvement). Each path is read as ``compare`` reads one (a run's
    last eval stage unless ``stage_a`` / ``stage_b`` names one, an eval stage folder, an eval.json)."""
    sides = []
    for paths, stage in ((baseline, stage_a), (candidate, stage_b)):
        runs = [resolve_summary(Path(p), stage) for p in paths]
        sides.append([(label, per_task_pass(summary, k)) for label, summary in runs])
    imp = improvement_over_runs([t for _, t in sides[0]], [t for _, t in sides[1]], confidence=confidence,
                                resamples=resamples)
    scores = [[(label, sum(tasks.values()) / len(tasks)) for label, tasks in side] for side in sides]
    return scores[0], scores[1], imp


def format_seeds(a: list[tuple[str, float]], b: list[tuple[str, float]], imp: Improvement, k: int = 1) -> str:
    """:func:`compare_seeds`' result: every run's pass@k, then the comparison over runs and tasks."""
    pct = 100 * imp.absolute.confidence
    lines = [f"pass@{k}, {imp.tasks} tasks, {len(a)} runs against {len(b)} "
             f"(bootstrap over tasks and runs, {pct:.0f}% CI)"]
    for side, runs in (("A", a), ("B", b)):
        lines += [f"  {side} {label}: {_pct(value)}" for label, value in runs]
    lines += [
        f"  A, {len(a)} runs: {_pct(imp.baseline.value)} [{_pct(imp.baseline.low)}, {_pct(imp.baseline.high)}]",
        f"  B, {len(b)} runs: {_pct(imp.candidate.value)} [{_pct(imp.candidate.low)}, {_pct(imp.candidate.high)}]",
        *_difference_lines(imp, k),
    ]
    if min(len(a), len(b)) < 5:
        lines.append("  (with fewer than 5 runs a side the interval is narrower than the truth: a lower bound)")
    return "\n".join(lines)


def format_improvement(label_a: str, label_b: str, imp: Improvement, k: int = 1) -> str:
    """A short human-readable account of the comparison."""
    pct = 100 * imp.absolute.confidence
    return "\n".join(
        [
            f"pass@{k}, {imp.tasks} tasks ({'paired' if imp.paired else 'unpaired'} bootstrap, {pct:.0f}% CI)",
            f"  A {label_a}: {_pct(imp.baseline.value)} [{_pct(imp.baseline.low)}, {_pct(imp.baseline.high)}]",
            f"  B {label_b}: {_pct(imp.candidate.value)} [{_pct(imp.candidate.low)}, {_pct(imp.candidate.high)}]",
            *_difference_lines(imp, k),
        ]
    )


def _difference_lines(imp: Improvement, k: int) -> list[str]:
    """The absolute (points) and relative differences with their intervals."""
    verdict = "excludes zero" if imp.absolute.excludes_zero() else "includes zero"
    relative = (f"  relative: {_signed(imp.relative.value)}% [{_signed(imp.relative.low)}, {_signed(imp.relative.high)}]"
                if math.isfinite(imp.relative.value) else
                f"  relative: undefined (A's pass@{k} is {_pct(imp.baseline.value)})")
    return [f"  absolute: {_signed(imp.absolute.value)} points [{_signed(imp.absolute.low)}, {_signed(imp.absolute.high)}] "
            f"({verdict})", relative]


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _signed(x: float) -> str:
    return f"{100 * x:+.1f}"
