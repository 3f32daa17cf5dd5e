"""Scripted policies for tests and smoke runs: an oracle and a flailing agent.

A policy is anything with ``act(observation) -> str`` returning the next action text.
:class:`OraclePolicy` replays a task's gold patch through the tools (asking for clarification first
when the task has some) and submits. :class:`FlailingPolicy` sends malformed and
useless calls and keeps running failing tests, which is what the format-error count and anti-spin
exist for. :func:`run_episode` drives any policy through an environment.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from codemoe.sandbox.agent.actions import ToolCall, render_tool_call
from codemoe.sandbox.agent.environment import RepoEnvironment
from codemoe.sandbox.agent.episode import Episode
from codemoe.sandbox.agent.tasks import Task

__all__ = ["FlailingPolicy", "OracleConfig", "OraclePolicy", "Policy", "build_oracle", "run_episode"]


class Policy(Protocol):
    """Chooses the next action text from the latest observation."""

    def act(self, observation: str) -> str: ...


class _Scripted:
    """A policy that plays a fixed list of actions, then repeats the last one."""

    def __init__(self, actions: list[str]) -> None:
        self.actions = actions
        self._iter: Iterator[str] = iter(actions)

    def act(self, observation: str) -> str:
        return next(self._iter, self.actions[-1])


class OraclePolicy(_Scripted):
    """Replays ``task``'s gold patch in the fewest actions: [ask_clarification], one write_file per changed file, submit."""

    def __init__(self, task: Task) -> None:
        before, after = task.repo_files(), task.gold_files()
        deleted = sorted(set(before) - set(after))
        if deleted:
            raise ValueError(f"task {task.id}: the gold patch deletes {deleted}; the tools cannot delete files")
        calls = [ToolCall("ask_clarification", {"question": "What exactly is expected?"})] if task.clarification else []
        calls += [ToolCall("write_file", {"path": path, "content": text})
                  for path, text in sorted(after.items()) if before.get(path) != text]
        calls.append(ToolCall("submit", {"summary": "applied the reference solution"}))
        super().__init__([render_tool_call(call) for call in calls])


@dataclass
class OracleConfig:
    """Options of the ``oracle`` scripted agent (none: it plays the task's gold patch)."""


def build_oracle(config: OracleConfig, *, task: Task) -> OraclePolicy:
    """The ``oracle`` scripted agent (kind ``scripted_agent``) for ``task``."""
    return OraclePolicy(task)


class FlailingPolicy:
    """Cycles through malformed text, unknown tools, bad arguments, forbidden commands and failing test runs."""

    ACTIONS = (
        "I think the bug is in the parser, let me look.",
        '<tool_call>{"tool": "read_file", "args": {"path": "README.md",}}</tool_call>',
        render_tool_call(ToolCall("delete_everything", {})),
        render_tool_call(ToolCall("read_file", {"file": "main.py"})),
        render_tool_call(ToolCall("run_tests", {})),
        '{"tool": "run_tests", "args": {}}',
        render_tool_call(ToolCall("shell", {"command": "rm", "args": ["-rf", "."]})),
        render_tool_call(ToolCall("run_tests", {})),
        render_tool_call(ToolCall("edit", {"path": "missing.py", "old": "a", "new": "b"})),
        render_tool_call(ToolCall("run_tests", {})),
    )

    def __init__(self) -> None:
        self._index = 0

    def act(self, observation: str) -> str:
        action = self.ACTIONS[self._index % len(self.ACTIONS)]
        self._index += 1
        return action


def run_episode(env: RepoEnvironment, task: Task, policy: Policy) -> Episode:
    """Reset ``env`` on ``task`` and let ``policy`` act until the episode ends; returns the episode."""
    observation = env.reset(task)
    while True:
        result = env.step(policy.act(observation))
        observation = result.observation
        if result.done:
            assert env.episode is not None
            return env.episode
