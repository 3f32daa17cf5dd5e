"""One evaluation, start to end: sample completions, grade them in the sandbox, summarize.

Where completions come from is a :data:`Sampler`: ``sampler(prompts, n) -> n completions per
prompt``. The ``eval`` stage's sampler drives a generation engine; tests and ``reference_sampler``
return the suite's reference solutions, which is how the HumanEval canonical solutions go through
exactly the evaluation path a model's completions take.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codemoe.evals.grading import GradedSample, grade, outcomes
from codemoe.evals.summary import EVAL_FILE, summarize
from codemoe.evals.tasks import STOP_SEQUENCES, CodeTask, truncate_at_stop

__all__ = [
    "SAMPLES_FILE",
    "EvalOptions",
    "Sampler",
    "evaluate",
    "grade_and_summarize",
    "reference_sampler",
    "sample_completions",
    "write_evaluation",
]

Sampler = Callable[[list[str], int], list[list[str]]]
SAMPLES_FILE = "samples.jsonl"


@dataclass
class EvalOptions:
    """How to evaluate: samples per task, which pass@k, which tests, and the statistics."""

    samples: int = 8  # completions per task (n); every k must be <= n
    ks: Sequence[int] = (1,)  # pass@k values to report
    tests: str = "hidden"  # 'hidden' (evaluation) or 'visible'
    stop: Sequence[str] = STOP_SEQUENCES  # completions are cut at the first of these
    timeout_s: float = 10.0  # sandbox wall and CPU limit per sample
    confidence: float = 0.95  # confidence level of the bootstrap intervals
    resamples: int = 2000  # bootstrap resamples
    seed: int = 0  # seed of the bootstrap


def reference_sampler(tasks: Sequence[CodeTask]) -> Sampler:
    """A sampler that answers every prompt with its task's reference solution."""
    by_prompt = {t.prompt: t.reference_solution for t in tasks}
    return lambda prompts, n: [[by_prompt[p]] * n for p in prompts]


def sample_completions(tasks: Sequence[CodeTask], sampler: Sampler, options: EvalOptions) -> dict[str, list[str]]:
    """task id -> ``options.samples`` completions, each cut at the first stop sequence."""
    if any(k > options.samples for k in options.ks):
        raise ValueError(f"pass@{max(options.ks)} needs samples >= {max(options.ks)}, got samples={options.samples}")
    raw = sampler([t.prompt for t in tasks], options.samples)
    stop = tuple(options.stop)
    return {t.id: [truncate_at_stop(text, stop) for text in outs] for t, outs in zip(tasks, raw, strict=True)}


def grade_and_summarize(
    tasks: Sequence[CodeTask],
    completions: dict[str, list[str]],
    executor: Any,
    options: EvalOptions,
    *,
    advance: Callable[[int], Any] | None = None,
) -> tuple[list[GradedSample], dict[str, Any]]:
    """Grade every completion on the tasks' tests and summarize pass@k with intervals."""
    graded = grade(executor, tasks, completions, tests=options.tests, timeout_s=options.timeout_s, advance=advance)
    summary = summarize(
        outcomes(tasks, graded),
        list(options.ks),
        confidence=options.confidence,
        resamples=options.resamples,
        seed=options.seed,
    )
    return graded, summary


def evaluate(
    tasks: Sequence[CodeTask],
    sampler: Sampler,
    executor: Any,
    options: EvalOptions,
    *,
    advance: Callable[[int], Any] | None = None,
) -> tuple[list[GradedSample], dict[str, Any]]:
    """Sample ``options.samples`` completions per task, grade them, and summarize pass@k."""
    completions = sample_completions(tasks, sampler, options)
    return grade_and_summarize(tasks, completions, executor, options, advance=advance)


def write_evaluation(folder: Path, graded: Sequence[GradedSample], summary: dict[str, Any]) -> Path:
    """Write ``samples.jsonl`` (every graded sample) and ``eval.json`` into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / SAMPLES_FILE).open("w") as fh:
        for sample in graded:
            fh.write(json.dumps(sample.as_dict()) + "\n")
    path = folder / EVAL_FILE
    path.write_text(json.dumps(summary, indent=2))
    return path
