"""codemoe.sandbox's plugin: executors, reward components and the agent environment, and its commands.

:data:`COMPONENTS` is the package's one registration table, walked by the hook below;
:class:`codemoe.sandbox.rewards.BuiltinRewards` reads its reward rows when codemoe-core is not
installed. Factories and configs are ``"module:attr"`` strings, imported only when a component is
built, so listing components imports nothing heavy. The sandbox does not depend on codemoe-core:
its hook marker is pluggy's, and the registry and sub-parsers are typed by what the hooks use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import argparse

hookimpl = pluggy.HookimplMarker("codemoe")

# (kind, name, "module:factory", "module:Config", summary)
COMPONENTS: list[tuple[str, str, str, str, str]] = [
    (
        "executor",
        "local",
        "codemoe.sandbox.local:build_local_executor",
        "codemoe.sandbox.local:LocalExecutorConfig",
        "isolated warm-worker pool on this machine (namespaces, rlimits, fork server)",
    ),
    (
        "executor",
        "remote",
        "codemoe.sandbox.remote:build_remote_executor",
        "codemoe.sandbox.remote:RemoteExecutorConfig",
        "client of a `codemoe sandbox serve` service over HTTP",
    ),
    (
        "reward",
        "compile_errors",
        "codemoe.sandbox.rewards.verifiable:CompileErrors",
        "codemoe.sandbox.rewards.verifiable:CompileErrorsConfig",
        "changed Python files that do not byte-compile, plus build errors (count)",
    ),
    (
        "reward",
        "compile_success",
        "codemoe.sandbox.rewards.verifiable:CompileSuccess",
        "codemoe.sandbox.rewards.types:RewardConfig",
        "1 when the change compiles and builds, else 0",
    ),
    (
        "reward",
        "test_pass_rate",
        "codemoe.sandbox.rewards.verifiable:TestPassRate",
        "codemoe.sandbox.rewards.verifiable:TestsConfig",
        "fraction of the (visible) tests passing after the change",
    ),
    (
        "reward",
        "hidden_pass_rate",
        "codemoe.sandbox.rewards.verifiable:HiddenPassRate",
        "codemoe.sandbox.rewards.verifiable:HiddenPassRateConfig",
        "fraction of the hidden tests passing (evaluation)",
    ),
    (
        "reward",
        "newly_passing",
        "codemoe.sandbox.rewards.verifiable:NewlyPassing",
        "codemoe.sandbox.rewards.verifiable:NewlyPassingConfig",
        "tests failing before the change and passing after (count)",
    ),
    (
        "reward",
        "regressions",
        "codemoe.sandbox.rewards.verifiable:Regressions",
        "codemoe.sandbox.rewards.verifiable:RegressionsConfig",
        "tests passing before the change and failing or gone after (count)",
    ),
    (
        "reward",
        "all_pass",
        "codemoe.sandbox.rewards.verifiable:AllPass",
        "codemoe.sandbox.rewards.verifiable:AllPassConfig",
        "1 when every test passes after the change, else 0",
    ),
    (
        "reward",
        "task_complete",
        "codemoe.sandbox.rewards.verifiable:TaskComplete",
        "codemoe.sandbox.rewards.verifiable:TestsConfig",
        "1 when the change compiles and every test passes, else 0",
    ),
    (
        "reward",
        "step_cost",
        "codemoe.sandbox.rewards.verifiable:StepCost",
        "codemoe.sandbox.rewards.verifiable:StepCostConfig",
        "actions the agent took (count)",
    ),
    (
        "reward",
        "tool_errors",
        "codemoe.sandbox.rewards.verifiable:ToolErrors",
        "codemoe.sandbox.rewards.verifiable:ToolErrorsConfig",
        "well-formed tool calls that failed: missing file, unmatched edit, denied path (count)",
    ),
    (
        "reward",
        "format_errors",
        "codemoe.sandbox.rewards.verifiable:FormatErrors",
        "codemoe.sandbox.rewards.verifiable:FormatErrorsConfig",
        "malformed tool calls (count)",
    ),
    (
        "reward",
        "complexity",
        "codemoe.sandbox.rewards.quality:Complexity",
        "codemoe.sandbox.rewards.quality:ComplexityConfig",
        "cyclomatic complexity over a threshold in changed functions (radon)",
    ),
    (
        "reward",
        "lint_warnings",
        "codemoe.sandbox.rewards.quality:LintWarnings",
        "codemoe.sandbox.rewards.quality:LintWarningsConfig",
        "ruff warnings in the changed files (count)",
    ),
    (
        "reward",
        "static_rules",
        "codemoe.sandbox.rewards.quality:StaticRules",
        "codemoe.sandbox.rewards.quality:StaticRulesConfig",
        "violations of codemoe's static rules: bare except, eval, global ... (count)",
    ),
    (
        "reward",
        "test_tampering",
        "codemoe.sandbox.rewards.detectors:TestTampering",
        "codemoe.sandbox.rewards.detectors:TestTamperingConfig",
        "hack detector: test files modified, deleted or shadowed (conftest, sitecustomize)",
    ),
    (
        "reward",
        "weakened_asserts",
        "codemoe.sandbox.rewards.detectors:WeakenedAsserts",
        "codemoe.sandbox.rewards.detectors:DetectorConfig",
        "hack detector: asserts removed or always true, skips inserted, failures swallowed",
    ),
    (
        "reward",
        "hardcoded_tests",
        "codemoe.sandbox.rewards.detectors:HardcodedTests",
        "codemoe.sandbox.rewards.detectors:DetectorConfig",
        "hack detector: test names, inputs or expected outputs hard-coded in the solution",
    ),
    (
        "reward",
        "special_casing",
        "codemoe.sandbox.rewards.detectors:SpecialCasing",
        "codemoe.sandbox.rewards.detectors:SpecialCasingConfig",
        "hack detector: the solution compares its inputs with the visible tests' inputs",
    ),
    (
        "reward",
        "early_exit",
        "codemoe.sandbox.rewards.detectors:EarlyExit",
        "codemoe.sandbox.rewards.detectors:DetectorConfig",
        "hack detector: early exit or faked test output (executor nonce, exit calls)",
    ),
    (
        "reward",
        "test_state",
        "codemoe.sandbox.rewards.detectors:TestOnlyState",
        "codemoe.sandbox.rewards.detectors:DetectorConfig",
        "hack detector: state that outlives a call and makes the next call answer differently",
    ),
    (
        "reward",
        "runner_tampering",
        "codemoe.sandbox.rewards.detectors:RunnerTampering",
        "codemoe.sandbox.rewards.detectors:DetectorConfig",
        "hack detector: code reaching into the test runner in-process (builtins, frames, fds, hooks, conftest)",
    ),
    (
        "reward",
        "memorised_answers",
        "codemoe.sandbox.rewards.detectors:MemorisedAnswers",
        "codemoe.sandbox.rewards.detectors:MemorisedAnswersConfig",
        "hack detector: right at the visible tests' inputs, wrong beside them (reads a probe run)",
    ),
    (
        "reward",
        "hack_penalty",
        "codemoe.sandbox.rewards.penalty:HackPenalty",
        "codemoe.sandbox.rewards.penalty:HackPenaltyConfig",
        "number of hack detectors that found evidence",
    ),
    (
        "reward",
        "weighted_sum",
        "codemoe.sandbox.rewards.recipe:WeightedSum",
        "codemoe.sandbox.rewards.recipe:WeightedSumConfig",
        "recipe: weighted sum of reward components, each value logged next to the total",
    ),
    (
        "environment",
        "repo",
        "codemoe.sandbox.agent.environment:build_repo_environment",
        "codemoe.sandbox.agent.environment:RepoEnvironmentConfig",
        "multi-turn coding environment: strict JSON tool calls on a sandboxed repository copy",
    ),
    (
        "task_format",
        "repo",
        "codemoe.sandbox.agent.tasks:RepoTaskFormat",
        "codemoe.sandbox.agent.tasks:RepoTaskFormatConfig",
        "repository tasks: task folders (task.yaml, repo/, hidden_tests/, gold.patch) and SWE-bench JSONL",
    ),
    (
        "scripted_agent",
        "oracle",
        "codemoe.sandbox.agent.policies:build_oracle",
        "codemoe.sandbox.agent.policies:OracleConfig",
        "replays the task's gold patch through the tools (clarification first where there is one), then submits",
    ),
]


@hookimpl
def codemoe_register_components(registry: Any) -> None:
    """Register every row of :data:`COMPONENTS` (``registry`` is a ``codemoe.core.Registry``)."""
    for kind, name, factory, config, summary in COMPONENTS:
        registry.register(kind, name, factory, config, summary=summary)


@hookimpl
def codemoe_add_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``codemoe sandbox`` (run, doctor, serve, ...) and ``codemoe tasks`` (validate)."""
    from codemoe.sandbox.agent.cli import add_tasks_command
    from codemoe.sandbox.cli import add_sandbox_command

    add_sandbox_command(subparsers)
    add_tasks_command(subparsers)
