"""The ``agentic-core`` suite: repository-level agent tasks read from ``registry/suites/agentic-core/``.

The folder format belongs to the sandbox, which also runs the episodes: the suite reads its folder
through the registry's task format (kind ``task_format``, ``repo`` by default) and hands each loaded
task out wrapped in a :class:`RepoTask`, with the task type as its ``family`` for per-type
breakdowns. An environment resets on ``RepoTask.task``, the object the format loaded, so no task
is read twice.

A task is held out when a hash of ``(seed, task id)`` falls under ``heldout_percent``; by default
every task is held out (the suite is for evaluation), like ``humaneval``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codemoe.core.contracts import RepositoryTask, TaskFormat
from codemoe.evals.tasks import check_split

__all__ = ["AgenticSuite", "AgenticSuiteConfig", "RepoTask", "build_agentic_suite"]


@dataclass
class AgenticSuiteConfig:
    """Options of the ``agentic-core`` suite."""

    path: str = ""  # folder of task folders or a SWE-bench .jsonl; "" = registry/suites/agentic-core of this checkout
    format: Any = field(default_factory=lambda: {"name": "repo"}, metadata={"kind": "task_format"})  # reads the folder
    heldout_percent: int = 100  # share of tasks in the held-out split; the rest is 'train'
    seed: int = 0  # decides the split when heldout_percent < 100
    types: list[str] = field(default_factory=list)  # task types to include; empty: all


@dataclass(frozen=True)
class RepoTask:
    """One repository-level task as the suite hands it out."""

    task: RepositoryTask  # what the task format loaded; environments reset on it

    @property
    def id(self) -> str:
        return self.task.id

    @property
    def family(self) -> str:
        """The task type (per-type tables group by it)."""
        return self.task.type

    @property
    def statement(self) -> str:
        return self.task.statement

    @property
    def prompt(self) -> str:
        """The task as a reviewer reads it (the agent's own first prompt is the environment's)."""
        return f"Task {self.id}\n\n{self.statement}"


class AgenticSuite:
    """Repository-level tasks of ten types, two or more each, graded on hidden tests."""

    name = "agentic-core"

    def __init__(self, config: AgenticSuiteConfig, task_format: TaskFormat) -> None:
        self.config, self.task_format = config, task_format
        known = getattr(task_format, "types", ())
        unknown = sorted(set(self.config.types) - set(known))
        if unknown:
            raise ValueError(f"suite '{self.name}': unknown task types {unknown}; valid: {', '.join(known)}")

    @property
    def path(self) -> Path:
        """The folder holding the task folders."""
        if self.config.path:
            return Path(self.config.path)
        from codemoe.core.config import find_registry_dir

        return find_registry_dir() / "suites" / "agentic-core"

    def _heldout(self, task_id: str) -> bool:
        digest = hashlib.sha256(f"{self.config.seed}:{task_id}".encode()).hexdigest()
        return int(digest, 16) % 100 < self.config.heldout_percent

    def all_tasks(self) -> list[RepoTask]:
        """Every task of the folder (filtered by ``types``), sorted by id."""
        if not (self.path.is_dir() or (self.path.suffix == ".jsonl" and self.path.is_file())):
            raise ValueError(f"suite '{self.name}': no folder or .jsonl file {self.path}")
        tasks = sorted((RepoTask(t) for t in self.task_format.load(self.path)), key=lambda t: t.id)
        return [t for t in tasks if not self.config.types or t.family in self.config.types]

    def tasks(self, split: str) -> list[RepoTask]:
        """The tasks of ``split`` ('train' or 'heldout'), sorted by id."""
        check_split(split, self.name)
        return [t for t in self.all_tasks() if self._heldout(t.id) == (split == "heldout")]


def build_agentic_suite(config: AgenticSuiteConfig, *, registry: Any) -> AgenticSuite:
    """The repository-level agent tasks of ``registry/suites/agentic-core``, read by the task format."""
    return AgenticSuite(config, registry.build("task_format", config.format, where="suite.format"))
