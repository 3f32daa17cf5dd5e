"""The sandbox meets core's contracts by names and fields (it imports nothing of codemoe's); these
tests hold it to them, through the registry as a trainer or an evaluator builds it."""

from __future__ import annotations

from pathlib import Path

import pytest
from codemoe.core import build_plugin_manager, build_registry
from codemoe.core.contracts import (
    Agent,
    Environment,
    EpisodeState,
    ProgramCheck,
    RepositoryTask,
    StepOutcome,
    TaskFormat,
    ToolCallRecord,
    Verdict,
    Verifier,
    play,
    repository_task,
)

ROOT = Path(__file__).resolve().parents[1]
TASK = ROOT / "registry" / "suites" / "agentic-core" / "bugfix-median-even"
TESTS = "assert inc(1) == 2\nassert inc(-1) == 0\n"


@pytest.fixture(scope="module")
def registry():
    return build_registry(build_plugin_manager())


@pytest.fixture(scope="module")
def verifier(registry):
    executor = registry.build("executor", {"name": "local", "workers": 2})
    yield executor
    executor.close()


def test_an_executor_is_a_verifier_and_grades_in_order(verifier):
    assert isinstance(verifier, Verifier)
    checks = [
        ProgramCheck("inc", "def inc(x):\n    return x + 1\n", TESTS, index=0),
        ProgramCheck("inc", "def inc(x):\n    return x + 2\n", TESTS, index=1),
        ProgramCheck("inc", "def inc(x):\n    return x +\n", TESTS, index=2),
    ]
    verdicts = verifier.check_programs(checks, timeout_s=10.0)
    assert all(isinstance(v, Verdict) for v in verdicts)
    assert [v.status for v in verdicts] == ["passed", "failed", "error"]
    assert [v.passed for v in verdicts] == [True, False, False]
    assert verdicts[0].reason == "" and verdicts[1].reason and "SyntaxError" in verdicts[2].reason + verdicts[2].stderr


def test_a_verdict_is_what_the_reward_recipe_scores(registry, verifier):
    recipe = registry.build("reward", {"name": "weighted_sum", "components": {"task_complete": {"weight": 1.0}}})
    good, bad = verifier.check_programs(
        [
            ProgramCheck("inc", "def inc(x):\n    return x + 1\n", TESTS),
            ProgramCheck("inc", "def inc(x):\n    return x\n", TESTS),
        ]
    )
    assert recipe(good.to_reward_input()).total == 1.0
    assert recipe(bad.to_reward_input()).total == 0.0


def test_the_repo_format_environment_and_oracle_meet_the_environment_contract(registry, verifier):
    task_format = registry.build("task_format", "repo")
    assert isinstance(task_format, TaskFormat)
    (task,) = task_format.load(TASK)
    assert isinstance(task, RepositoryTask) and task.type in task_format.types
    env = registry.build("environment", "repo", executor=verifier)
    agent = registry.build("scripted_agent", "oracle", task=task)
    assert isinstance(env, Environment) and isinstance(agent, Agent)
    episode = play(env, task, agent)
    assert isinstance(episode, EpisodeState) and episode.done and episode.resolved
    assert episode.stop_reason == "submitted"
    # the tool-call log the agent metrics read: one record per action, the last one the submit
    assert len(episode.log) == episode.steps > 0 and episode.format_errors == 0
    assert all(isinstance(record, ToolCallRecord) for record in episode.log)
    assert episode.log[-1].tool == "submit" and episode.log[-1].ok
    env.close_workspace()


def test_a_step_outcome_has_the_contract_fields(registry, verifier):
    (task,) = registry.build("task_format", "repo").load(TASK)
    env = registry.build("environment", "repo", executor=verifier)
    env.reset(task)
    outcome = env.step("not a tool call")
    assert isinstance(outcome, StepOutcome) and not outcome.done and outcome.observation.startswith("error (malformed)")
    env.close_workspace()


def test_the_remote_executor_is_a_verifier_over_a_real_service(registry, verifier):
    from codemoe.sandbox.service import SandboxService

    checks = [
        ProgramCheck("inc", "def inc(x):\n    return x + 1\n", TESTS, index=0),
        ProgramCheck("inc", "def inc(x):\n    return x + 2\n", TESTS, index=1),
    ]
    with SandboxService(verifier, token="contract-token") as service:  # HTTP on loopback, a free port
        remote = registry.build("executor", {"name": "remote", "url": service.url, "token": "contract-token"})
        assert isinstance(remote, Verifier)
        verdicts = remote.check_programs(checks, timeout_s=10.0)
    assert [v.status for v in verdicts] == [v.status for v in verifier.check_programs(checks)] == ["passed", "failed"]
    assert all(isinstance(v, Verdict) for v in verdicts) and verdicts[1].reason


def test_a_consumer_that_needs_a_repository_task_is_told_what_it_got():
    with pytest.raises(TypeError, match="'add' is not a repository task: agent evaluation needs a repository suite"):
        repository_task(type("CodeTask", (), {"id": "add"})(), needed_by="agent evaluation")
    assert repository_task(object()) is None
