"""The agent-environment contract: repository tasks, the environment an agent acts in, scripted agents.

Three kinds of component meet here:

- ``task_format``: reads a task format from disk (the sandbox's ``repo``: task folders and
  SWE-bench JSONL) into :class:`RepositoryTask` objects. There is one loader per format; a suite
  (kind ``suite``) that hands out repository tasks wraps it and keeps each loaded task as its
  ``task``, so nothing is loaded twice.
- ``environment``: runs one episode at a time (:class:`Environment`). ``reset`` renders the agent's
  whole first prompt as text (for scripted agents); a policy sees the episode's ``messages``
  rendered by its tokenizer's chat template (:class:`codemoe.core.chat.ChatFormat`), so SFT, the
  trainer and the evaluator show it exactly the same thing.
- ``scripted_agent``: agents that need no model (the ``oracle`` that replays a task's reference
  solution through the tools, ...), built with ``task=``; each is an :class:`Agent`.

An episode ends graded: ``episode.resolved`` says whether the task was solved, and
``episode.to_reward_input()`` is what the reward recipe (kind ``reward``) scores.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

__all__ = [
    "Agent",
    "Environment",
    "EpisodeState",
    "RepositoryTask",
    "StepOutcome",
    "TaskFormat",
    "ToolCallRecord",
    "play",
    "repository_task",
]


@runtime_checkable
class RepositoryTask(Protocol):
    """A repository-level task as its format loaded it."""

    id: str
    type: str  # the task type (the seeds' ten, or "swe-bench")
    statement: str
    step_budget: int


@runtime_checkable
class TaskFormat(Protocol):
    """Reads tasks of one format."""

    types: tuple[str, ...]  # the task types its tasks may have

    def load(self, path: str | Path) -> list[RepositoryTask]:
        """Every task under ``path`` (one task, a folder of tasks, or a file of instances), in a fixed order.

        Raises ``ValueError`` naming the file and what is wrong.
        """
        ...


@runtime_checkable
class StepOutcome(Protocol):
    observation: str  # the tool's answer (or the format error), the agent's next input
    done: bool


@runtime_checkable
class ToolCallRecord(Protocol):
    """One action of an episode's tool-call log, as the agent metrics read it."""

    tool: str  # the tool the action named ("" when it could not be parsed)
    args: dict  # its arguments as sent
    ok: bool  # well formed, and the tool succeeded
    format_error: bool  # malformed text, an unknown tool or bad arguments
    data: dict  # small facts the tool reported; run_tests: "status" ("passed" when every test passed)


@runtime_checkable
class EpisodeState(Protocol):
    done: bool
    resolved: bool  # graded: every required visible test and every hidden test passes
    stop_reason: str  # submitted, step_budget, anti_spin, ...
    steps: int  # actions taken, submit included
    format_errors: int  # actions that were not a well-formed call of a known tool
    log: list[ToolCallRecord]  # one record per action, in order
    # the transcript as chat messages: system (how to act, the tools), user (the task), then
    # assistant actions and tool observations; what codemoe.core.chat renders for the policy
    messages: list[dict[str, str]]

    def to_reward_input(self) -> object: ...


@runtime_checkable
class Environment(Protocol):
    """A multi-turn environment over :class:`RepositoryTask` objects; one episode at a time."""

    episode: EpisodeState | None  # the current (or last) episode

    def reset(self, task: RepositoryTask) -> str:
        """Start an episode on ``task``; returns the agent's first prompt (instructions, tools, the task)."""
        ...

    def step(self, action: str) -> StepOutcome:
        """Run one action (the agent's completion text)."""
        ...

    def close_workspace(self) -> None:
        """Drop the episode's private copy of the repository."""
        ...


@runtime_checkable
class Agent(Protocol):
    """Chooses the next action text from the latest observation (the first prompt, then each answer)."""

    def act(self, observation: str) -> str: ...


def repository_task(task: object, *, needed_by: str = "") -> RepositoryTask | None:
    """The task-format object a suite's repository task carries (``task.task``); None for other
    tasks, or with ``needed_by`` (what needs one, e.g. "agent evaluation") a TypeError saying so."""
    inner = getattr(task, "task", None)
    if isinstance(inner, RepositoryTask):
        return inner
    if needed_by:
        raise TypeError(
            f"task {getattr(task, 'id', task)!r} is not a repository task: {needed_by} needs a repository suite "
            "such as 'agentic-core'"
        )
    return None


def play(environment: Environment, task: RepositoryTask, agent: Agent) -> EpisodeState:
    """Reset ``environment`` on ``task`` and let ``agent`` act until the episode ends."""
    observation = environment.reset(task)
    while True:
        outcome = environment.step(agent.act(observation))
        observation = outcome.observation
        if outcome.done:
            if environment.episode is None:
                raise RuntimeError(f"{type(environment).__name__} ended a step without an episode")
            return environment.episode
