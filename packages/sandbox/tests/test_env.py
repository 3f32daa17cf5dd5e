"""The repository environment end to end: oracle, flailing agent, anti-spin, budget, trajectories, rewards."""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path

import pytest
from codemoe.sandbox.agent import (
    FlailingPolicy,
    OraclePolicy,
    RepoEnvironment,
    RepoEnvironmentConfig,
    ToolCall,
    load_task,
    load_tasks,
    parse_tool_call,
    read_trajectories,
    run_episode,
)
from codemoe.sandbox.plugin import COMPONENTS
from codemoe.sandbox.rewards import build_reward
from codemoe.sandbox.rewards.presets import load_preset

ROOT = Path(__file__).resolve().parents[3]
SUITE = ROOT / "registry" / "suites" / "agentic-core"


@pytest.fixture(scope="module")
def seed1():
    return build_reward(load_preset("seed1-stepwise"))


@pytest.fixture
def env(executor):
    environment = RepoEnvironment(executor=executor)
    yield environment
    environment.close_workspace()


@pytest.mark.slow
def test_oracle_solves_every_task_with_the_maximum_seed1_reward(env, seed1):
    tasks = load_tasks(SUITE)
    for task in tasks:
        episode = run_episode(env, task, OraclePolicy(task))
        assert (episode.stop_reason, episode.resolved, episode.format_errors) == ("submitted", True, 0), task.id
        before = task.repo_files()
        tools = [record.tool for record in episode.log]
        # plan, act, verify: the tests run before any change and after the last one, then submit
        assert tools[tools.index("run_tests") + 1:].count("edit") >= 1 and tools[-2:] == ["run_tests", "submit"], task.id
        assert tools.index("run_tests") < min(i for i, t in enumerate(tools) if t in ("edit", "write_file")), task.id
        assert ("ask_clarification" in tools) == (task.clarification is not None), task.id
        written = [r.args["path"] for r in episode.log if r.tool == "write_file"]
        assert not set(written) & set(before), task.id  # whole files only for files the patch creates
        failing_before = [t for t in episode.visible_after if episode.visible_before.get(t) != "passed"]
        assert all(outcome == "passed" for outcome in {**episode.visible_after, **episode.hidden_after}.values())
        result = seed1(episode.to_reward_input())
        # the best seed-1 score an agent can reach: no compile error, no regression, every visible test
        # that failed now passes, the all-pass bonus, and no action beyond the ones the change needs
        assert result.components == {"compile_errors": 0, "regressions": 0, "newly_passing": len(failing_before),
                                     "all_pass": 1, "step_cost": episode.steps, "hack_penalty": 0}, task.id
        assert result.total == pytest.approx(1.5 * len(failing_before) + 10 - 0.01 * episode.steps)
        assert len(failing_before) >= 1


def test_flailing_agent_pays_for_format_errors_and_is_stopped_by_anti_spin(env, seed1):
    task = load_task(SUITE / "bugfix-median-even")
    episode = run_episode(env, task, FlailingPolicy())
    assert episode.stop_reason == "anti_spin"
    assert episode.steps == 11  # three failing test runs (steps 5, 8, 10), then one last action
    kinds = [record.error_kind for record in episode.log]
    assert kinds == ["malformed", "malformed", "unknown_tool", "bad_args", "", "malformed", "not_allowed", "",
                     "not_found", "", "malformed"]
    assert episode.format_errors == 6
    assert "summarise what you found" in episode.messages[-3]["content"]  # the observation of the third failing run
    assert not episode.resolved
    penalty = build_reward({"name": "weighted_sum", "components": {"format_errors": {}}})
    assert penalty(episode.to_reward_input()).total == pytest.approx(-0.5 * 6)
    failed = build_reward("tool_errors")(episode.to_reward_input())  # the well-formed calls that failed
    assert failed.evidence == ("shell: not_allowed", "edit: not_found")
    result = seed1(episode.to_reward_input())
    assert result.total == pytest.approx(-0.01 * 11)


def test_anti_spin_counts_consecutive_failures_only(executor):
    task = load_task(SUITE / "bugfix-median-even")
    env = RepoEnvironment(RepoEnvironmentConfig(max_failing_test_runs=2), executor=executor)
    env.reset(task)
    assert not env.step(ToolCall("run_tests", {})).done
    gold = task.gold_files()["stats/core.py"]
    env.step(ToolCall("write_file", {"path": "stats/core.py", "content": gold}))
    passing = env.step(ToolCall("run_tests", {}))
    assert passing.observation.startswith("status: passed (4 passed)") and env.episode.consecutive_failing_runs == 0
    env.step(ToolCall("write_file", {"path": "stats/core.py", "content": "def median(:\n"}))
    assert not env.step(ToolCall("run_tests", {})).info["summarise"]
    second = env.step(ToolCall("run_tests", {}))
    assert second.info["summarise"] and not second.done
    last = env.step(ToolCall("submit", {"summary": "broke core.py while refactoring"}))
    assert last.done and env.episode.stop_reason == "anti_spin"
    assert env.episode.summary == "broke core.py while refactoring"
    env.close_workspace()


def test_anything_the_agent_sends_is_an_observation_not_a_crash(env):
    env.reset(load_task(SUITE / "bugfix-median-even"))
    for action in (None, 42, {"tool": "run_tests", "args": {}}, b"<tool_call>", "\x00", "<tool_call>" * 3):
        result = env.step(action)
        assert result.observation.startswith("error (malformed): ") and not result.done
    assert env.episode.format_errors == 6


def test_step_budget_ends_the_episode(executor):
    task = load_task(SUITE / "bugfix-median-even")
    env = RepoEnvironment(RepoEnvironmentConfig(step_budget=3), executor=executor)
    assert "You have 3 actions" in env.reset(task)
    results = [env.step(ToolCall("list_files", {})) for _ in range(3)]
    assert [r.done for r in results] == [False, False, True]
    assert env.episode.stop_reason == "step_budget"
    with pytest.raises(RuntimeError, match="reset"):
        env.step(ToolCall("list_files", {}))
    env.close_workspace()


def test_clarification_is_answered_from_the_task(env):
    task = load_task(SUITE / "clarify-due-date-format")
    first = env.reset(task)
    assert "Ask before guessing" in first and "Mon 05.02." not in first
    answer = env.step('<tool_call>{"tool": "ask_clarification", "args": {"question": "Which format?"}}</tool_call>')
    assert answer.observation == task.clarification and "Mon 05.02." in answer.observation


def test_trajectory_jsonl_is_chat_sft_data(executor, tmp_path):
    path = tmp_path / "out" / "trajectories.jsonl"
    env = RepoEnvironment(RepoEnvironmentConfig(trajectory_path=str(path)), executor=executor)
    for task_id, policy in (("multiround-version-compare", None), ("bugfix-median-even", FlailingPolicy())):
        task = load_task(SUITE / task_id)
        run_episode(env, task, policy or OraclePolicy(task))
    env.close_workspace()
    good, bad = read_trajectories(path)
    assert (good["task_id"], good["resolved"], good["stop_reason"]) == ("multiround-version-compare", True, "submitted")
    roles = [m["role"] for m in good["messages"]]
    assert roles == ["system", "user"] + ["assistant", "tool"] * 6
    assert "<tool_call>" in good["messages"][0]["content"] and good["tools"][0]["name"] == "list_files"
    calls = [parse_tool_call(m["content"]) for m in good["messages"] if m["role"] == "assistant"]
    assert [c.tool for c in calls] == ["run_tests", "read_file", "edit", "edit", "run_tests", "submit"]
    assert good["messages"][3]["content"].startswith("status: failed") and good["messages"][11]["content"].startswith("status: passed")
    assert good["patch"].startswith("--- a/releases/versions.py\n+++ b/releases/versions.py\n")
    assert good["hidden_after"]["hidden_tests/test_versions_hidden.py::test_trailing_zeros_are_equal"] == "passed"
    assert (bad["stop_reason"], bad["format_errors"], bad["resolved"]) == ("anti_spin", 6, False)
    assert bad["tool_log"][0] == {"tool": "", "args": {}, "ok": False, "error_kind": "malformed", "format_error": True,
                                  "message": bad["tool_log"][0]["message"], "step": 1, "data": {}}


def test_environment_registration_points_at_real_objects():
    ((factory, config),) = [(f, c) for kind, name, f, c, _ in COMPONENTS if (kind, name) == ("environment", "repo")]

    def resolve(target):
        module, _, attr = target.partition(":")
        return getattr(importlib.import_module(module), attr)

    environment = resolve(factory)(resolve(config)(), executor=object())
    assert isinstance(environment, RepoEnvironment)
    assert dataclasses.asdict(environment.config)["max_failing_test_runs"] == 3


def test_compact_prompts_keep_what_the_agent_acts_on_at_a_fraction_of_the_text(executor):
    task = next(t for t in load_tasks(SUITE) if t.type == "test-driven-bug-fix")
    full = RepoEnvironment(executor=executor)
    compact = RepoEnvironment(RepoEnvironmentConfig(tool_docs="signatures", test_output="short"), executor=executor)
    try:
        shown = {}
        for name, environment in (("full", full), ("compact", compact)):
            environment.reset(task)
            system = environment.episode.messages[0]["content"]
            shown[name] = (system, environment.step(parse_tool_call(
                '<tool_call>\n{"tool": "run_tests", "args": {}}\n</tool_call>')).observation)
    finally:
        full.close_workspace()
        compact.close_workspace()
    (full_system, full_run), (short_system, short_run) = shown["full"], shown["compact"]
    assert len(short_system) < 0.5 * len(full_system) and len(short_run) < len(full_run)
    for name in full.tools.specs:  # every tool and every argument is still documented
        assert f"\n{name}(" in short_system
        for arg in full.tools.specs[name].schema()["parameters"]["properties"]:
            assert f"{arg}?:" in short_system or f"{arg}:" in short_system
    # the failing test, the failing source line, the error and its location in the repository stay
    failing = [line for line in full_run.splitlines() if line.startswith(("FAILED", ">", "E  "))][:3]
    assert failing and all(line.rstrip() in short_run for line in failing)
    assert "=====" not in short_run and "[100%]" not in short_run
    assert not [line for line in short_run.splitlines() if line.startswith("/")]  # no interpreter paths
    with pytest.raises(ValueError, match="test_output"):
        RepoEnvironmentConfig(test_output="terse")
    with pytest.raises(ValueError, match="tool_docs"):
        RepoEnvironmentConfig(tool_docs="none")


class _Recording:
    """The real executor, recording the label of every batched request (and failing the first
    batch when told to)."""

    def __init__(self, executor, *, fail_first: bool = False) -> None:
        self.executor, self.ids, self.fail_first = executor, [], fail_first

    def run(self, request):
        return self.executor.run(request)

    def run_batch(self, requests):
        self.ids += [r.id for r in requests]
        if self.fail_first:
            self.fail_first = False
            raise RuntimeError("the sandbox went away")
        return self.executor.run_batch(requests)


def _graded(executor, task):
    env = RepoEnvironment(executor=executor)
    env.reset(task)
    env.step(ToolCall("submit", {"summary": "nothing changed"}))
    env.close_workspace()
    return env.episode


def test_episodes_of_one_task_share_one_grading_run_of_the_original_repository(executor):
    """An RL step gives every episode its own environment; the original repository's grading is a
    function of the task, so 4 episodes graded at once (a GRPO group) run it once, and each gets
    the outcomes a lone episode gets."""
    import threading

    task = load_task(SUITE / "bugfix-median-even")
    shared = _Recording(executor)
    episodes = [None] * 4

    def one(i):
        episodes[i] = _graded(shared, task)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(shared.ids) == [f"{task.id}/after"] * 4 + [f"{task.id}/before"]
    alone = _graded(_Recording(executor), task)  # another executor: its own run of the original
    for episode in episodes:
        assert (episode.visible_before, episode.hidden_before) == (alone.visible_before, alone.hidden_before)
        assert episode.hidden_before and not episode.resolved


def test_a_failed_grading_leaves_the_original_run_to_the_next_episode(executor):
    task = load_task(SUITE / "bugfix-median-even")
    flaky = _Recording(executor, fail_first=True)
    with pytest.raises(RuntimeError, match="went away"):
        _graded(flaky, task)
    episode = _graded(flaky, task)
    assert flaky.ids.count(f"{task.id}/before") == 2 and episode.hidden_before
