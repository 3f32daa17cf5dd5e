"""What an episode records: the chat transcript, the tool-call log, the grades.

The tool-call log is explicit so that reward components can read it: one :class:`StepRecord` per
action with the tool name, its arguments, whether it succeeded, and the error kind
(``malformed``, ``unknown_tool`` and ``bad_args`` are format errors; ``not_found``, ``denied``,
``no_match`` ... are tool failures). The transcript (``messages``) is chat-format SFT data: a
system turn documenting the action format, the task as the user turn, then alternating assistant
actions and tool observations.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from codemoe.sandbox.agent.actions import CALL_CLOSE, CALL_OPEN
from codemoe.sandbox.agent.patches import make_patch
from codemoe.sandbox.agent.tasks import Task
from codemoe.sandbox.api import ExecutionResult

__all__ = ["FORMAT_ERROR_KINDS", "TOOL_DOCS", "Episode", "StepRecord", "system_prompt"]

FORMAT_ERROR_KINDS = ("malformed", "unknown_tool", "bad_args")


@dataclass
class StepRecord:
    """One action of the tool-call log."""

    tool: str  # the tool named by the action ("" when the action could not be parsed)
    args: dict[str, Any]  # its arguments as sent
    ok: bool = True  # the call was well formed and the tool succeeded
    error_kind: str = ""  # why not: a format error kind or a tool failure kind
    format_error: bool = False  # malformed text, unknown tool or bad arguments
    message: str = ""  # the error text the agent was shown
    step: int = 0  # 1-based action number
    data: dict[str, Any] = field(default_factory=dict)  # small facts the tool reported (status, counts)


@dataclass
class Episode:
    """One episode of the repository environment, from reset to the end."""

    task_id: str
    task_type: str
    step_budget: int
    files_before: dict[str, str]
    messages: list[dict[str, str]]
    tools: list[dict[str, Any]]
    steps: int = 0
    log: list[StepRecord] = field(default_factory=list)
    consecutive_failing_runs: int = 0
    summarising: bool = False  # anti-spin triggered: the next action is the last
    done: bool = False
    stop_reason: str = ""  # submitted, step_budget or anti_spin
    summary: str = ""  # the agent's summary from submit
    files_after: dict[str, str] = field(default_factory=dict)
    visible_before: dict[str, str] = field(default_factory=dict)
    visible_after: dict[str, str] = field(default_factory=dict)
    hidden_before: dict[str, str] = field(default_factory=dict)
    hidden_after: dict[str, str] = field(default_factory=dict)
    status_after: str = ""  # executor status of the final grading run
    integrity_after: list[str] = field(default_factory=list)  # why that run's own account cannot be believed
    resolved: bool = False  # every test the task judges (Task.judged) passes at the end, in a run that can be believed
    probes: Any = None  # the change's probe run (a rewards.types.ProbeRun) when the environment makes one

    @property
    def format_errors(self) -> int:
        """Number of actions that were malformed, named an unknown tool or had bad arguments."""
        return sum(record.format_error for record in self.log)

    def record_grades(self, task: Task, before: ExecutionResult, after: ExecutionResult) -> None:
        """Split the grading runs into visible and hidden outcomes and decide ``resolved``."""
        outcomes_before = expand_collection_errors(before.tests, after.tests)
        outcomes_after = expand_collection_errors(after.tests, before.tests)
        for tests, visible, hidden in ((outcomes_before, self.visible_before, self.hidden_before),
                                       (outcomes_after, self.visible_after, self.hidden_after)):
            for test_id, outcome in tests.items():
                (hidden if task.is_hidden(test_id) else visible)[test_id] = outcome
        from codemoe.sandbox.rewards.inputs import integrity_findings

        self.status_after = after.status
        self.integrity_after = integrity_findings(after)
        # every hidden test that ran on the original repository or after the change (SWE-bench instances:
        # fail_to_pass and pass_to_pass only): a hidden test the change kept from being collected is not passed
        required = task.judged(dict.fromkeys([*self.hidden_before, *self.hidden_after]))
        outcomes = {**self.visible_after, **self.hidden_after}
        self.resolved = (bool(self.hidden_after) and not self.integrity_after
                         and all(outcomes.get(t) == "passed" for t in required))

    def patch(self) -> str:
        """The agent's change as a unified diff."""
        return make_patch(self.files_before, self.files_after)

    def to_reward_input(self) -> Any:
        """The :class:`codemoe.sandbox.rewards.RewardInput` of this episode (visible and hidden tests apart)."""
        from codemoe.sandbox.rewards.types import RewardInput, ToolCall

        calls = [ToolCall(name=r.tool or "<unparsed>", ok=not r.format_error,
                          error=r.message if r.format_error else "",
                          failure="" if r.ok or r.format_error else (r.error_kind or "failed")) for r in self.log]
        return RewardInput(
            task_id=self.task_id,
            visible_before=dict(self.visible_before),
            visible_after=dict(self.visible_after),
            hidden_before=dict(self.hidden_before),
            hidden_after=dict(self.hidden_after),
            status_after=self.status_after,
            integrity=list(self.integrity_after),
            files_before=dict(self.files_before),
            files_after=dict(self.files_after),
            tool_calls=calls,
            steps=self.steps,
            probes=self.probes,
        )

    def to_record(self) -> dict[str, Any]:
        """The JSON-able trajectory: transcript, tool schemas, tool-call log, outcome and patch."""
        return {
            "task_id": self.task_id,
            "task_type": self.task_type,
            "messages": self.messages,
            "tools": self.tools,
            "tool_log": [asdict(record) for record in self.log],
            "steps": self.steps,
            "step_budget": self.step_budget,
            "format_errors": self.format_errors,
            "stop_reason": self.stop_reason,
            "summary": self.summary,
            "resolved": self.resolved,
            "visible_after": self.visible_after,
            "hidden_after": self.hidden_after,
            "patch": self.patch(),
        }


def expand_collection_errors(tests: dict[str, str], other: dict[str, str]) -> dict[str, str]:
    """Replace a module-level entry (``path``, a module that failed to import) by its tests.

    pytest reports a module that cannot be collected under the file's path alone. The tests the
    other run found in that file are given the module's outcome, so that "failing before, passing
    after" and "passing before, failing after" compare test by test.
    """
    out: dict[str, str] = {}
    for test_id, outcome in tests.items():
        inner = [t for t in other if t.startswith(test_id + "::")] if "::" not in test_id else []
        out.update(dict.fromkeys(inner, outcome) if inner else {test_id: outcome})
    return out


TOOL_DOCS = ("schemas", "signatures")


def _signature(schema: dict[str, Any]) -> str:
    """``name(arg: type, optional?: type): description`` for one tool schema."""
    params = schema["parameters"]
    required = set(params.get("required", []))
    args = ", ".join(f"{name}{'' if name in required else '?'}: {spec.get('type', 'any')}"
                     for name, spec in params.get("properties", {}).items())
    return f"{schema['name']}({args}): {schema['description']}"


def system_prompt(tools: Any, docs: str = "schemas") -> str:
    """The system turn: how to act, and every tool: its JSON schema (``schemas``) or one line with its
    arguments and their types (``signatures``: a quarter of the tokens, for a small policy's context)."""
    if docs not in TOOL_DOCS:
        raise ValueError(f"tool_docs must be one of {', '.join(TOOL_DOCS)}, got {docs!r}")
    example = '{"tool": "read_file", "args": {"path": "src/app.py", "start": 1, "end": 40}}'
    if docs == "signatures":
        lines = "\n".join(_signature(schema) for schema in tools.schemas())
        return (
            f"You are a coding agent in a repository. Each turn: one tool call, a JSON object inside {CALL_OPEN} tags:\n"
            f"{CALL_OPEN}\n{example}\n{CALL_CLOSE}\nPaths are relative to the repository root "
            f"(? marks an optional argument). Tools:\n{lines}"
        )
    schemas = "\n".join(json.dumps(schema, ensure_ascii=False) for schema in tools.schemas())
    return (
        "You are a coding agent working in a repository. Act with exactly one tool call per turn, written as "
        f"one JSON object inside {CALL_OPEN} tags and nothing else:\n{CALL_OPEN}\n{example}\n{CALL_CLOSE}\n"
        "Malformed calls, unknown tools and wrong arguments are counted as format errors. "
        f"Paths are relative to the repository root. Tools:\n{schemas}"
    )
