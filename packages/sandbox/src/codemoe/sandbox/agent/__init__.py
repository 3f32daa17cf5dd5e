"""codemoe.sandbox.agent: the multi-turn coding environment over repository-level tasks.

``RepoEnvironment.reset(task)`` copies a task's repository into a private workspace;
``step(action)`` takes one strict JSON tool call (see :mod:`.actions`) and returns the observation.
Tasks load from folders (:func:`load_tasks`) or SWE-bench JSONL (:func:`load_swebench_jsonl`);
:func:`validate_tasks` proves them; :class:`OraclePolicy` and :class:`FlailingPolicy` are scripted
agents; :class:`TrajectoryWriter` stores episodes as chat-format JSONL.
"""

from __future__ import annotations

from codemoe.sandbox.agent.actions import ActionFormatError, ToolCall, parse_tool_call, render_tool_call
from codemoe.sandbox.agent.environment import RepoEnvironment, RepoEnvironmentConfig, StepResult
from codemoe.sandbox.agent.episode import Episode, StepRecord
from codemoe.sandbox.agent.patches import PatchError, apply_patch, make_patch
from codemoe.sandbox.agent.policies import FlailingPolicy, OraclePolicy, run_episode
from codemoe.sandbox.agent.tasks import TASK_TYPES, Task, TaskFormatError, load_swebench_jsonl, load_task, load_tasks
from codemoe.sandbox.agent.tools import SHELL_ALLOW_LIST, ToolSet
from codemoe.sandbox.agent.trajectory import TrajectoryWriter, read_trajectories
from codemoe.sandbox.agent.validate import TaskReport, validate_tasks
from codemoe.sandbox.agent.workspace import ToolError, Workspace

__all__ = [
    "SHELL_ALLOW_LIST",
    "TASK_TYPES",
    "ActionFormatError",
    "Episode",
    "FlailingPolicy",
    "OraclePolicy",
    "PatchError",
    "RepoEnvironment",
    "RepoEnvironmentConfig",
    "StepRecord",
    "StepResult",
    "Task",
    "TaskFormatError",
    "TaskReport",
    "ToolCall",
    "ToolError",
    "ToolSet",
    "TrajectoryWriter",
    "Workspace",
    "apply_patch",
    "load_swebench_jsonl",
    "load_task",
    "load_tasks",
    "make_patch",
    "parse_tool_call",
    "read_trajectories",
    "render_tool_call",
    "run_episode",
    "validate_tasks",
]
