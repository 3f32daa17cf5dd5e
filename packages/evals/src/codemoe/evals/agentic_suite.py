"""The ``agentic-core`` suite: repository-level agent tasks read from ``registry/suites/agentic-core/``.

Each task folder holds ``task.yaml`` (statement, type, visible test command, fail_to_pass,
pass_to_pass, optional clarification, step budget, read-only patterns), ``repo/``,
``hidden_tests/`` and ``gold.patch``; the format is defined by the sandbox's agent environment,
which runs the episodes (``codemoe.sandbox.agent``). This module only reads the folders, because
the evals package does not import the sandbox: a :class:`RepoTask` carries everything an episode
runner or a report needs, with the task type as its ``family`` for per-type breakdowns.

A task is held out when a hash of ``(seed, task id)`` falls under ``heldout_percent``; by default
every task is held out (the suite is for evaluation), like ``humaneval``.
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from codemoe.evals.tasks import check_split

__all__ = ["TASK_TYPES", "AgenticSuite", "AgenticSuiteConfig", "RepoTask", "build_agentic_suite", "load_repo_task"]

# the ten task types of the seeds; the sandbox's task loader accepts the same names
TASK_TYPES = (
    "cross-file-refactor",
    "test-driven-bug-fix",
    "multi-round-error-correction",
    "dependency-upgrade",
    "performance-optimisation",
    "multi-file-edit",
    "build-external-dependency",
    "debugging-several-runs",
    "clarification-needed",
    "long-horizon-constraints",
)
_REQUIRED = ("id", "type", "statement", "test_command", "fail_to_pass")
_SKIP = {"__pycache__", ".pytest_cache", ".git"}


@dataclass
class AgenticSuiteConfig:
    """Options of the ``agentic-core`` suite."""

    path: str = ""  # folder of task folders; "" = registry/suites/agentic-core of this checkout
    heldout_percent: int = 100  # share of tasks in the held-out split; the rest is 'train'
    seed: int = 0  # decides the split when heldout_percent < 100
    types: list[str] = field(default_factory=list)  # task types to include; empty: all


@dataclass(frozen=True)
class RepoTask:
    """One repository-level task as the suite hands it out."""

    id: str  # the task folder's name
    family: str  # the task type, one of TASK_TYPES
    statement: str  # what the agent is asked to do
    folder: str  # the task folder (repo/, hidden_tests/, gold.patch, task.yaml)
    files: dict[str, str]  # the starting repository: path -> text
    hidden_tests: dict[str, str]  # hidden_tests/<path> -> text; never shown to the agent
    gold_patch: str  # unified diff that solves the task
    test_command: list[str]  # the visible test command
    fail_to_pass: list[str]  # pytest node ids
    pass_to_pass: list[str]
    clarification: str | None  # the answer to ask_clarification, if the task has one
    step_budget: int  # actions allowed in an episode
    readonly: list[str]  # glob patterns the agent cannot write

    @property
    def prompt(self) -> str:
        """The first user turn: the statement and the repository's file list."""
        return f"Task {self.id}\n\n{self.statement}\n\nRepository files:\n" + "\n".join(sorted(self.files))


def _read_tree(root: Path) -> dict[str, str]:
    return {
        path.relative_to(root).as_posix(): path.read_text(encoding="utf-8")
        for path in sorted(root.rglob("*"))
        if path.is_file() and not _SKIP & set(path.relative_to(root).parts)
    }


def load_repo_task(folder: Path) -> RepoTask:
    """Read one task folder; a ValueError names the file and what is wrong."""
    spec_path = folder / "task.yaml"
    spec: Any = yaml.safe_load(spec_path.read_text(encoding="utf-8")) if spec_path.is_file() else None
    if not isinstance(spec, dict):
        raise ValueError(f"{spec_path}: missing or not a mapping")
    missing = [key for key in _REQUIRED if key not in spec]
    if missing:
        raise ValueError(f"{spec_path}: missing keys {missing}")
    if spec["type"] not in TASK_TYPES:
        raise ValueError(f"{spec_path}: type {spec['type']!r} is not one of {', '.join(TASK_TYPES)}")
    command = spec["test_command"]
    return RepoTask(
        id=str(spec["id"]),
        family=spec["type"],
        statement=str(spec["statement"]).strip(),
        folder=str(folder),
        files=_read_tree(folder / "repo"),
        hidden_tests={f"hidden_tests/{p}": t for p, t in _read_tree(folder / "hidden_tests").items()},
        gold_patch=(folder / "gold.patch").read_text(encoding="utf-8"),
        test_command=shlex.split(command) if isinstance(command, str) else list(command),
        fail_to_pass=list(spec["fail_to_pass"]),
        pass_to_pass=list(spec.get("pass_to_pass") or []),
        clarification=str(spec["clarification"]).strip() if spec.get("clarification") else None,
        step_budget=int(spec.get("step_budget", 30)),
        readonly=list(spec.get("readonly") or []),
    )


class AgenticSuite:
    """Repository-level tasks of ten types, two or more each, graded on hidden tests."""

    name = "agentic-core"

    def __init__(self, config: AgenticSuiteConfig | None = None) -> None:
        self.config = config or AgenticSuiteConfig()
        unknown = sorted(set(self.config.types) - set(TASK_TYPES))
        if unknown:
            raise ValueError(f"suite '{self.name}': unknown task types {unknown}; valid: {', '.join(TASK_TYPES)}")

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
        folders = sorted(p for p in self.path.iterdir() if (p / "task.yaml").is_file()) if self.path.is_dir() else []
        if not folders:
            raise ValueError(f"suite '{self.name}': no task folders in {self.path}")
        tasks = [load_repo_task(folder) for folder in folders]
        return [t for t in tasks if not self.config.types or t.family in self.config.types]

    def tasks(self, split: str) -> list[RepoTask]:
        """The tasks of ``split`` ('train' or 'heldout'), sorted by id."""
        check_split(split, self.name)
        return [t for t in self.all_tasks() if self._heldout(t.id) == (split == "heldout")]


def build_agentic_suite(config: AgenticSuiteConfig) -> AgenticSuite:
    """The repository-level agent tasks of ``registry/suites/agentic-core``."""
    return AgenticSuite(config)
