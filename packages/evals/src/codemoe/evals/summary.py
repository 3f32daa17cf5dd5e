"""The result of one evaluation: pass@k with CIs, overall and per family, plus per-task values.

``summarize`` builds the JSON document that the ``eval`` stage writes as ``eval.json``; ``compare``
and reports read it back. Per-task pass@k values are kept so that two evaluations of the same
tasks can be compared with a paired bootstrap.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from codemoe.evals.passk import TaskOutcome
from codemoe.evals.stats import bootstrap_mean

__all__ = ["EVAL_FILE", "load_summary", "per_task_pass", "summarize"]

EVAL_FILE = "eval.json"


def summarize(
    outcomes: Sequence[TaskOutcome],
    ks: Sequence[int],
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> dict[str, Any]:
    """pass@k for each k (mean over tasks, bootstrap CI), per family, and per task."""
    if not outcomes:
        raise ValueError("no graded tasks to summarize")
    n_min = min(o.n for o in outcomes)
    usable = [k for k in ks if k <= n_min]
    if len(usable) != len(ks):
        raise ValueError(f"pass@k with k={max(ks)} needs at least that many samples per task; the fewest was {n_min}")
    by_family: dict[str, list[TaskOutcome]] = defaultdict(list)
    for o in outcomes:
        by_family[o.family].append(o)

    def block(items: Sequence[TaskOutcome]) -> dict[str, Any]:
        return {
            f"pass@{k}": bootstrap_mean(
                [o.pass_at(k) for o in items], confidence=confidence, resamples=resamples, seed=seed
            ).as_dict()
            for k in ks
        }

    return {
        "tasks": len(outcomes),
        "samples": sum(o.n for o in outcomes),
        "samples_per_task": n_min,
        "ks": list(ks),
        "confidence": confidence,
        "overall": block(outcomes),
        "families": {family: {"tasks": len(items), **block(items)} for family, items in sorted(by_family.items())},
        "per_task": {o.task_id: {"family": o.family, "n": o.n, "c": o.c} for o in outcomes},
    }


def per_task_pass(summary: dict[str, Any], k: int) -> dict[str, float]:
    """task id -> pass@k, from a summary's per-task counts."""
    return {
        task_id: TaskOutcome(task_id, row["family"], row["n"], row["c"]).pass_at(k)
        for task_id, row in summary["per_task"].items()
    }


def load_summary(path: Path) -> dict[str, Any]:
    """Read ``eval.json`` (or the ``eval.json`` inside a stage folder)."""
    path = Path(path)
    if path.is_dir():
        path = path / EVAL_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no evaluation summary at {path}")
    return json.loads(path.read_text())
