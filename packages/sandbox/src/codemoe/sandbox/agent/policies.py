"""Scripted policies for tests, smoke runs and reference trajectories: an oracle and a flailing agent.

A policy is anything with ``act(observation) -> str`` returning the next action text.
:class:`OraclePolicy` plays the loop a reference trajectory should teach, plan, act, verify: run the
tests, read the code the gold patch changes (and sometimes the failing test first), make small
``edit`` calls with exact old/new text (``write_file`` only for files the patch creates), run the
tests again, submit. Where the task has a decoy patch (the obvious fix that breaks another test) it
plays the decoy first, sees the failing run, and corrects it; where the task asks for several runs
(debugging) or changes several files it may run the tests between files. A random generator seeded
by ``(seed, task id)`` varies the order of the reads, where the clarification is asked, whether the
code is read before any edit or file by file, and the wording of the summary, so SFT does not see
one path. :class:`FlailingPolicy` sends malformed and useless calls and keeps running failing
tests, which is what the format-error count and anti-spin exist for. :func:`run_episode` drives any
policy through an environment.
"""

from __future__ import annotations

import difflib
import hashlib
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from codemoe.sandbox.agent.actions import ToolCall, render_tool_call
from codemoe.sandbox.agent.environment import RepoEnvironment
from codemoe.sandbox.agent.episode import Episode
from codemoe.sandbox.agent.tasks import Task

__all__ = [
    "FlailingPolicy",
    "OracleConfig",
    "OraclePolicy",
    "Policy",
    "build_oracle",
    "edit_calls",
    "plan_episode",
    "run_episode",
]

RUN_TESTS = ToolCall("run_tests", {})
_QUESTIONS = ("What exactly is expected?", "Which rule should the implementation follow?",
              "The statement leaves the exact behaviour open: what should it be?")
_SUMMARIES = ("fixed {files}; the tests pass", "changed {files} and checked that the tests pass",
              "the tests pass after the change to {files}")
_INTERLEAVE_TYPES = ("debugging-several-runs",)  # tasks whose failures show one at a time
_MAX_PLANNED_FAILING_RUNS = 2  # stay below the environment's anti-spin stop (3 failing runs in a row)


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


def edit_calls(path: str, old_text: str, new_text: str) -> list[ToolCall]:
    """``edit`` calls that turn ``old_text`` into ``new_text`` when applied in order.

    Each call replaces one changed block of lines, widened by the fewest neighbouring lines that
    make its old text occur exactly once in the file as it is at that point (the ``edit`` tool's
    rule). A file that starts empty is written whole.
    """
    if not old_text:
        return [ToolCall("write_file", {"path": path, "content": new_text})]
    calls, current = [], old_text
    while current != new_text:
        a, b = current.splitlines(keepends=True), new_text.splitlines(keepends=True)
        _tag, i1, i2, j1, j2 = next(op for op in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
                                   if op[0] != "equal")
        # everything before the first change is equal, so context can grow backwards freely, and
        # forwards as long as the lines after the change still agree
        while True:
            old, new = "".join(a[i1:i2]), "".join(b[j1:j2])
            if old and current.count(old) == 1:
                break
            if i1 > 0:
                i1, j1 = i1 - 1, j1 - 1
            elif i2 < len(a) and j2 < len(b) and a[i2] == b[j2]:
                i2, j2 = i2 + 1, j2 + 1
            else:
                return [*calls, ToolCall("write_file", {"path": path, "content": new_text})]
        calls.append(ToolCall("edit", {"path": path, "old": old, "new": new}))
        current = current.replace(old, new, 1)
    return calls


def _module_name(path: str) -> str:
    return path[:-3].replace("/", ".").removesuffix(".__init__") if path.endswith(".py") else path


def _dependency_order(paths: list[str], files: dict[str, str]) -> list[str]:
    """``paths`` with the modules that other changed modules import first (fix the callee, then the caller)."""
    def imported_by_others(path: str) -> int:
        name = _module_name(path)
        pattern = re.compile(rf"^\s*(from\s+{re.escape(name)}\s+import|import\s+{re.escape(name)}\b)", re.M)
        return sum(bool(pattern.search(files.get(other, ""))) for other in paths if other != path)

    return sorted(paths, key=lambda p: (-imported_by_others(p), p))


def _identifiers(text: str) -> set[str]:
    return set(re.findall(r"\b[A-Za-z_][A-Za-z0-9_]*\b", text))


def _opening(task: Task, rng: random.Random, before: dict[str, str], after: dict[str, str]) -> list[ToolCall]:
    """Before any change: [ask], run the tests, [read a failing test], [search for the name a rename removes]."""
    calls: list[ToolCall] = []
    ask = ToolCall("ask_clarification", {"question": rng.choice(_QUESTIONS)}) if task.clarification else None
    ask_first = ask is not None and rng.random() < 0.5
    calls += [ask] if ask is not None and ask_first else []
    calls.append(RUN_TESTS)
    calls += [ask] if ask is not None and not ask_first else []
    tests = sorted({t.split("::", 1)[0] for t in task.fail_to_pass if not task.is_hidden(t)} & set(before))
    if tests and rng.random() < 0.5:
        calls.append(ToolCall("read_file", {"path": rng.choice(tests)}))
    if task.type == "cross-file-refactor":
        gone = sorted(_identifiers("".join(before.values())) - _identifiers("".join(after.values())))
        if gone:
            calls.append(ToolCall("search", {"pattern": max(gone, key=len)}))
    return calls


def _change(task: Task, rng: random.Random, current: dict[str, str], target: dict[str, str], read: set[str],
            failing_runs: int) -> tuple[list[ToolCall], int]:
    """Read and edit ``current`` (in place) into ``target``, then run the tests; returns the calls and
    the failing runs in a row so far (runs between files stop short of the anti-spin limit)."""
    calls: list[ToolCall] = []
    paths = [p for p in sorted(target) if current.get(p) != target[p]]
    if task.type in _INTERLEAVE_TYPES:
        paths = _dependency_order(paths, current)
    else:
        rng.shuffle(paths)
    interleave = len(paths) > 1 and (task.type in _INTERLEAVE_TYPES or rng.random() < 0.3)
    upfront = paths if not interleave and rng.random() < 0.4 else []  # read everything first, then edit
    for k, path in enumerate([*upfront, *paths]):
        if path in current and path not in read:
            calls.append(ToolCall("read_file", {"path": path}))
            read.add(path)
        if k < len(upfront):
            continue
        calls += edit_calls(path, current.get(path, ""), target[path])
        current[path] = target[path]
        if interleave and k < len(upfront) + len(paths) - 1 and failing_runs < _MAX_PLANNED_FAILING_RUNS:
            calls.append(RUN_TESTS)
            failing_runs += 1
    calls.append(RUN_TESTS)
    return calls, failing_runs + 1


def plan_episode(task: Task, rng: random.Random) -> list[ToolCall]:
    """The reference trajectory for ``task``: [ask], run the tests, read, small edits, run again, submit;
    through the decoy and its failing run first when the task has one."""
    before, after = task.repo_files(), task.gold_files()
    deleted = sorted(set(before) - set(after))
    if deleted:
        raise ValueError(f"task {task.id}: the gold patch deletes {deleted}; the tools cannot delete files")
    calls = _opening(task, rng, before, after)
    failing_runs = 1  # a valid task fails its first run (fail_to_pass)
    decoy = task.decoy_files()
    current, read = dict(before), set()
    for target in ([decoy] if decoy is not None else []) + [after]:
        step, failing_runs = _change(task, rng, current, target, read, failing_runs)
        calls += step
    changed = ", ".join(f"`{p}`" for p in sorted(p for p in after if before.get(p) != after[p]))
    calls.append(ToolCall("submit", {"summary": rng.choice(_SUMMARIES).format(files=changed)}))
    return calls


class OraclePolicy(_Scripted):
    """Plays ``task``'s reference trajectory (:func:`plan_episode`); with ``imitate=False`` it submits at once."""

    def __init__(self, task: Task, *, seed: int = 0, imitate: bool = True) -> None:
        calls = (plan_episode(task, random.Random(f"{seed}:{task.id}")) if imitate
                 else [ToolCall("submit", {"summary": "not imitated (left out by imitate_fraction)"})])
        super().__init__([render_tool_call(call) for call in calls])


@dataclass
class OracleConfig:
    """Options of the ``oracle`` scripted agent."""

    seed: int = 0  # varies the reference trajectories (order of reads, where to ask, summaries)
    # share of tasks whose reference trajectory is played; on the others the oracle submits at once,
    # an unresolved episode that SFT's resolved_only leaves out (imitation of a fraction of tasks)
    imitate_fraction: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.imitate_fraction <= 1.0:
            raise ValueError(f"oracle: imitate_fraction must be between 0 and 1, got {self.imitate_fraction}")


def imitated(task_id: str, seed: int, fraction: float) -> bool:
    """Whether the oracle plays ``task_id`` under ``imitate_fraction=fraction`` (a hash of seed and id)."""
    digest = int(hashlib.sha256(f"{seed}:imitate:{task_id}".encode()).hexdigest(), 16)
    return digest % 10_000 < round(fraction * 10_000)


def build_oracle(config: OracleConfig, *, task: Task) -> OraclePolicy:
    """The ``oracle`` scripted agent (kind ``scripted_agent``) for ``task``."""
    return OraclePolicy(task, seed=config.seed, imitate=imitated(task.id, config.seed, config.imitate_fraction))


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
