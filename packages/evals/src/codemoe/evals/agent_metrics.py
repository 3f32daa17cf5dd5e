"""Agent metrics of an evaluation's episodes, each with a bootstrap CI over tasks.

An agent evaluation (the ``eval`` stage with ``environment: repo``) runs ``samples`` episodes per
held-out task. Beside the resolve rate (pass@1 of the episodes), these say *how* the agent worked:

======================== ===================================================== =====================
metric                   definition                                            unit of the mean
======================== ===================================================== =====================
resolve_rate             episodes that resolve the task on its hidden tests    episodes
format_errors            tool calls that were malformed, named an unknown      episodes
                         tool or had bad arguments, per episode
format_error_episodes    episodes with at least one format error               episodes
turns_to_resolve         actions (``Episode.steps``, submit included) taken    resolved episodes
                         by an episode that resolved its task
self_correction_rate     eligible episodes that correct themselves (see        eligible episodes
                         :func:`self_correction`)
anti_spin_rate           episodes the environment stopped for repeated         episodes
                         failing test runs (``stop_reason == "anti_spin"``)
======================== ===================================================== =====================

Every metric is a ratio of two per-task counts summed over tasks (:data:`METRICS`), so all of them
share one estimator: the ratio of sums, with a percentile bootstrap that resamples *tasks* (the
episodes of one task are not independent draws; resampling whole tasks keeps them together). With
the same number of episodes per task the resolve rate is exactly the mean of per-task pass@1 and
its interval the one :func:`codemoe.evals.stats.bootstrap_mean` gives with the same seed. A metric
whose denominator is zero (no episode resolved, none eligible) is undefined: ``None``. Every
estimate is ``{value, low, high, confidence, n}``; ``n`` is the summed denominator (episodes,
resolved episodes, eligible episodes), or for a change between two evaluations the tasks compared.

The facts come from the environment's episode (:func:`episode_facts` reads the fields
:class:`codemoe.core.contracts.EpisodeState` names: ``log`` (:class:`~codemoe.core.contracts.ToolCallRecord`
records), ``format_errors``, ``steps``, ``stop_reason`` and ``resolved``) and travel
with each graded sample (``GradedSample.episode``), so ``samples.jsonl`` holds them and the summary
can be recomputed from it.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from codemoe.core.contracts import EpisodeState, ToolCallRecord

__all__ = [
    "COUNTS",
    "EDIT_TOOLS",
    "METRICS",
    "Metric",
    "agent_summary",
    "compare_agent",
    "episode_facts",
    "format_change",
    "format_comparison",
    "format_estimate",
    "headline",
    "ratio_estimate",
    "self_correction",
    "task_counts",
]

EDIT_TOOLS = ("edit", "write_file")  # tools that change the repository's files


@dataclass(frozen=True)
class Metric:
    """A metric as a ratio of two per-task counts (keys of :data:`COUNTS`)."""

    numerator: str
    denominator: str
    label: str  # how reports name it
    rate: bool  # a share (shown in %) rather than a count per unit


# what is counted per task, from each episode's facts
COUNTS = (
    "episodes",  # episodes run
    "resolved",  # episodes that resolved the task (hidden tests)
    "format_errors",  # format errors, summed over the episodes
    "format_error_episodes",  # episodes with at least one format error
    "resolved_turns",  # actions taken, summed over the resolved episodes
    "self_correction_eligible",  # episodes with a failing run_tests followed by an edit
    "self_corrected",  # eligible episodes that corrected themselves
    "anti_spin",  # episodes stopped by the anti-spin rule
)

METRICS: dict[str, Metric] = {
    "resolve_rate": Metric("resolved", "episodes", "resolve rate (hidden tests)", rate=True),
    "format_errors": Metric("format_errors", "episodes", "format errors per episode", rate=False),
    "format_error_episodes": Metric("format_error_episodes", "episodes", "episodes with a format error", rate=True),
    "turns_to_resolve": Metric("resolved_turns", "resolved", "turns to resolve", rate=False),
    "self_correction_rate": Metric("self_corrected", "self_correction_eligible", "self-correction rate", rate=True),
    "anti_spin_rate": Metric("anti_spin", "episodes", "anti-spin stops", rate=True),
}
# what a metric's n counts, for reports
UNITS = {"episodes": "episodes", "resolved": "resolved", "self_correction_eligible": "eligible"}


# -------------------------------------------------------------------------------------------------
# the facts of one episode
# -------------------------------------------------------------------------------------------------


def _failing_run(record: ToolCallRecord) -> bool:
    return record.tool == "run_tests" and record.ok and record.data.get("status") != "passed"


def _passing_run(record: ToolCallRecord) -> bool:
    return record.tool == "run_tests" and record.ok and record.data.get("status") == "passed"


def _is_edit(record: ToolCallRecord) -> bool:
    return record.tool in EDIT_TOOLS and record.ok


def _edit_key(record: ToolCallRecord) -> tuple[str, str]:
    return record.tool, json.dumps(record.args, sort_keys=True)


def self_correction(log: Sequence[ToolCallRecord]) -> bool | None:
    """Whether an episode corrected itself after a failing test run; None when it had no occasion.

    Over the tool-call log (``StepRecord``: ``tool``, ``args``, ``ok``, ``data["status"]``):

    - a *failing run* is a ``run_tests`` call that ran (``ok``) with a status other than ``passed``;
      a *passing run* one with status ``passed``;
    - an *edit* is an ``edit`` or ``write_file`` call that succeeded (a refused edit changed nothing);
      two edits are the same when tool and arguments are equal.

    The episode is *eligible* when some failing run is followed, later in the log, by an edit. It
    *self-corrects* when for some failing run the next edit after it differs from every edit made
    before that edit, and a passing run follows that edit. The first test run of a bug-fix task
    usually fails, so the plain loop "run, fix, run green" counts; repeating an earlier edit after a
    failure, or editing without a green run afterwards, does not.
    """
    eligible = False
    for i, record in enumerate(log):
        if not _failing_run(record):
            continue
        j = next((k for k in range(i + 1, len(log)) if _is_edit(log[k])), None)
        if j is None:
            continue
        eligible = True
        earlier = {_edit_key(r) for r in log[:j] if _is_edit(r)}
        if _edit_key(log[j]) not in earlier and any(_passing_run(r) for r in log[j + 1 :]):
            return True
    return False if eligible else None


def episode_facts(episode: EpisodeState) -> dict[str, Any] | None:
    """The JSON-able facts of a finished episode the metrics count; None for an episode that does
    not keep the contract's tool-call log (an older or foreign environment).

    ``turns`` is ``steps`` (every action, submit included).
    """
    log = getattr(episode, "log", None)
    if log is None:
        return None
    return {
        "resolved": bool(episode.done and episode.resolved),
        "turns": int(episode.steps),
        "format_errors": int(episode.format_errors),
        "stop_reason": str(episode.stop_reason),
        "self_correction": self_correction(log),
    }


def _add(counts: dict[str, int], facts: Mapping[str, Any]) -> None:
    resolved = bool(facts["resolved"])
    corrected = facts["self_correction"]
    counts["episodes"] += 1
    counts["resolved"] += resolved
    counts["format_errors"] += int(facts["format_errors"])
    counts["format_error_episodes"] += int(facts["format_errors"]) > 0
    counts["resolved_turns"] += int(facts["turns"]) if resolved else 0
    counts["self_correction_eligible"] += corrected is not None
    counts["self_corrected"] += bool(corrected)
    counts["anti_spin"] += facts["stop_reason"] == "anti_spin"


def task_counts(samples: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """task id -> its family and the :data:`COUNTS` over its episodes, in the order samples come.

    ``samples`` are graded samples (``task_id``, ``family``, ``episode``: the facts); samples
    without facts are left out.
    """
    out: dict[str, dict[str, Any]] = {}
    for sample in samples:
        if sample.episode is None:
            continue
        row = out.setdefault(sample.task_id, {"family": sample.family, **dict.fromkeys(COUNTS, 0)})
        _add(row, sample.episode)
    return out


# -------------------------------------------------------------------------------------------------
# estimation
# -------------------------------------------------------------------------------------------------


def _estimate(draws: np.ndarray, value: float, confidence: float, n: int) -> dict[str, Any]:
    """Percentile interval of the finite bootstrap ``draws``; None where undefined."""
    finite = draws[np.isfinite(draws)]
    if not np.isfinite(value) or finite.size == 0:
        return {"value": None, "low": None, "high": None, "confidence": confidence, "n": n}
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(finite, [tail, 100.0 - tail])
    return {"value": float(value), "low": float(low), "high": float(high), "confidence": confidence, "n": n}


def _ratio(num: Any, den: Any) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)


def _resampled(num: np.ndarray, den: np.ndarray, draws: np.ndarray) -> np.ndarray:
    # num, den: [tasks]; draws: [resamples, tasks] task indices -> ratio of sums per resample [resamples]
    return _ratio(num[draws].sum(axis=1), den[draws].sum(axis=1))


def _draws(tasks: int, resamples: int, rng: np.random.Generator) -> np.ndarray:
    # the same draw as codemoe.evals.stats.bootstrap_mean, so equal seeds give equal intervals
    return rng.integers(0, tasks, size=(resamples, tasks))


def ratio_estimate(
    numerators: Sequence[float],
    denominators: Sequence[float],
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> dict[str, Any]:
    """``sum(numerators) / sum(denominators)`` (one pair per task) with a percentile bootstrap
    interval over tasks; ``n`` is the summed denominator. Undefined (None) when it is zero."""
    num = np.asarray(numerators, dtype=np.float64)  # num: [tasks]
    den = np.asarray(denominators, dtype=np.float64)  # den: [tasks]
    if num.size == 0 or num.shape != den.shape:
        raise ValueError(f"need one numerator and one denominator per task, got {num.size} and {den.size}")
    draws = _draws(num.size, resamples, np.random.default_rng(seed))
    value = float(_ratio(np.array(num.sum()), np.array(den.sum())))
    return _estimate(_resampled(num, den, draws), value, confidence, int(den.sum()))


def _block(rows: Sequence[Mapping[str, Any]], confidence: float, resamples: int, seed: int) -> dict[str, Any]:
    return {
        name: ratio_estimate(
            [r[m.numerator] for r in rows],
            [r[m.denominator] for r in rows],
            confidence=confidence,
            resamples=resamples,
            seed=seed,
        )
        for name, m in METRICS.items()
    }


def agent_summary(
    samples: Sequence[Any], *, confidence: float = 0.95, resamples: int = 2000, seed: int = 0
) -> dict[str, Any] | None:
    """Every metric of :data:`METRICS` with its CI, overall and per family, the stop reasons
    counted, and the per-task counts a comparison pairs on; None when no sample has episode facts."""
    per_task = task_counts(samples)
    if not per_task:
        return None
    by_family: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in per_task.values():
        by_family[row["family"]].append(row)
    reasons = Counter(s.episode["stop_reason"] for s in samples if s.episode is not None)
    return {
        "episodes": sum(r["episodes"] for r in per_task.values()),
        "tasks": len(per_task),
        "confidence": confidence,
        "metrics": _block(list(per_task.values()), confidence, resamples, seed),
        "families": {
            f: {"tasks": len(rows), **_block(rows, confidence, resamples, seed)}
            for f, rows in sorted(by_family.items())
        },
        "stop_reasons": dict(sorted(reasons.items())),
        "per_task": per_task,
    }


def compare_agent(
    baseline: Mapping[str, Any],
    candidate: Mapping[str, Any],
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> dict[str, Any]:
    """Each metric before (``baseline``) and after (``candidate``), with the absolute and relative
    change, all with CIs; paired over tasks (the same tasks drawn for both) when both evaluated the
    same tasks, else each resampled on its own. Arguments are :func:`agent_summary` results.

    Relative is ``after / before - 1``: undefined (None) when ``before`` is zero.
    """
    base, cand = baseline["per_task"], candidate["per_task"]
    rng = np.random.default_rng(seed)
    paired = set(base) == set(cand)
    ids_b = sorted(base)
    ids_c = ids_b if paired else sorted(cand)
    draws_b = _draws(len(ids_b), resamples, rng)
    draws_c = draws_b if paired else _draws(len(ids_c), resamples, rng)
    out: dict[str, Any] = {"paired": paired, "tasks": len(ids_b), "confidence": confidence, "metrics": {}}
    for name, m in METRICS.items():
        nb, db = (np.array([base[i][key] for i in ids_b], dtype=np.float64) for key in (m.numerator, m.denominator))
        nc, dc = (np.array([cand[i][key] for i in ids_c], dtype=np.float64) for key in (m.numerator, m.denominator))
        before, after = float(_ratio(nb.sum(), db.sum())), float(_ratio(nc.sum(), dc.sum()))
        rb, rc = _resampled(nb, db, draws_b), _resampled(nc, dc, draws_c)  # [resamples] each
        out["metrics"][name] = {
            "before": _estimate(rb, before, confidence, int(db.sum())),
            "after": _estimate(rc, after, confidence, int(dc.sum())),
            "absolute": _estimate(rc - rb, after - before, confidence, len(ids_b)),
            "relative": _estimate(_ratio(rc, rb) - 1.0, float(_ratio(after, before)) - 1.0, confidence, len(ids_b)),
        }
    return out


# -------------------------------------------------------------------------------------------------
# presentation
# -------------------------------------------------------------------------------------------------


def headline(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The overall metrics, flat, for a stage's result: ``name`` -> value and ``name_ci`` -> [low,
    high] (4 decimals; None where undefined), and the stop reasons counted."""
    out: dict[str, Any] = {}
    for name, est in summary["metrics"].items():
        out[name] = None if est["value"] is None else round(est["value"], 4)
        out[f"{name}_ci"] = None if est["value"] is None else [round(est["low"], 4), round(est["high"], 4)]
    out["stop_reasons"] = dict(summary["stop_reasons"])
    return out


def _number(metric: Metric, x: float, signed: bool = False) -> str:
    sign = "+" if signed else ""
    return f"{100 * x:{sign}.1f}" if metric.rate else f"{x:{sign}.2f}"


def format_estimate(name: str, est: Mapping[str, Any], *, count: bool = True) -> str:
    """``12.5% [5.0, 20.0] (40 episodes)`` for a share, ``1.20 [0.90, 1.50] (40 episodes)`` for a
    count per unit; ``-`` when undefined. ``count`` adds what the metric was averaged over."""
    metric = METRICS[name]
    n = f" ({est['n']} {UNITS[metric.denominator]})" if count else ""
    if est["value"] is None:
        return f"-{n}"
    unit = "%" if metric.rate else ""
    lo, hi = _number(metric, est["low"]), _number(metric, est["high"])
    return f"{_number(metric, est['value'])}{unit} [{lo}, {hi}]{n}"


def format_change(name: str, est: Mapping[str, Any]) -> str:
    """An absolute change: ``+5.0 points [1.2, 8.8]`` for a share, ``-0.50 [-0.80, -0.20]`` for a count."""
    metric = METRICS[name]
    if est["value"] is None:
        return "-"
    unit = " points" if metric.rate else ""
    lo, hi = _number(metric, est["low"], signed=True), _number(metric, est["high"], signed=True)
    return f"{_number(metric, est['value'], signed=True)}{unit} [{lo}, {hi}]"


def format_comparison(comparison: Mapping[str, Any]) -> str:
    """A :func:`compare_agent` result as lines: each metric before -> after, and the change."""
    pairing = "paired" if comparison["paired"] else "unpaired"
    lines = [f"agent metrics, {comparison['tasks']} tasks ({pairing} bootstrap, {comparison['confidence']:.0%} CI):"]
    for name, m in comparison["metrics"].items():
        before, after = format_estimate(name, m["before"]), format_estimate(name, m["after"])
        lines.append(f"  {METRICS[name].label}: {before} -> {after}, change {format_change(name, m['absolute'])}")
    return "\n".join(lines)
