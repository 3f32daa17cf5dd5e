"""The one action format the agent environment accepts: a strict JSON tool call.

An action is exactly one JSON object with the keys ``tool`` (a string) and ``args`` (an object),
wrapped in ``<tool_call>`` tags, optionally surrounded by whitespace::

    <tool_call>
    {"tool": "read_file", "args": {"path": "src/app.py", "start": 1, "end": 40}}
    </tool_call>

Anything else is rejected with an :class:`ActionFormatError`: text before or after the tags, two
calls, JSON comments, trailing commas, ``NaN``, duplicate keys, extra top-level keys, a missing or
non-object ``args``. Models are trained on what the environment accepts, so the parser is as strict
as a production tool runtime; :func:`render_tool_call` produces the canonical text a chat template
puts in the assistant turn, and :func:`parse_tool_call` inverts it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CALL_CLOSE",
    "CALL_OPEN",
    "ActionFormatError",
    "ToolCall",
    "parse_tool_call",
    "render_observation",
    "render_tool_call",
]

CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"
_WRAPPED = re.compile(r"\A\s*<tool_call>\s*(?P<body>.*?)\s*</tool_call>\s*\Z", re.DOTALL)


class ActionFormatError(ValueError):
    """An action the environment cannot parse or validate; ``kind`` says which rule it broke.

    ``kind`` is one of ``malformed`` (not one wrapped JSON object of the right shape),
    ``unknown_tool`` or ``bad_args``; each counts as one format error of the episode.
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class ToolCall:
    """A parsed action: the tool's name and its arguments."""

    tool: str
    args: dict[str, Any] = field(default_factory=dict)


def _reject_constant(name: str) -> Any:
    raise ActionFormatError("malformed", f"{name} is not valid JSON; use a number or a string")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    duplicates = sorted({key for key in keys if keys.count(key) > 1})
    if duplicates:
        raise ActionFormatError("malformed", f"duplicate key(s) in the tool call: {', '.join(duplicates)}")
    return dict(pairs)


def parse_tool_call(text: str) -> ToolCall:
    """Parse the canonical action text into a :class:`ToolCall`, or raise :class:`ActionFormatError`.

    Only the shape is checked here; whether the tool exists and its arguments fit is the tool
    set's job (:meth:`codemoe.sandbox.agent.tools.ToolSet.validate`).
    """
    if not isinstance(text, str):
        raise ActionFormatError("malformed", f"an action is text, got {type(text).__name__}")
    match = _WRAPPED.match(text)
    if match is None:
        raise ActionFormatError(
            "malformed",
            f"an action is one JSON object inside {CALL_OPEN}...{CALL_CLOSE} and nothing else",
        )
    body = match.group("body")
    if CALL_OPEN in body or CALL_CLOSE in body:
        raise ActionFormatError("malformed", "one tool call per action")
    try:
        data = json.loads(body, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise ActionFormatError("malformed", f"invalid JSON in the tool call: {exc}") from None
    except (ValueError, RecursionError) as exc:  # an integer of over 4300 digits; nesting past the stack
        raise ActionFormatError("malformed", f"invalid JSON in the tool call: {type(exc).__name__}: {str(exc)[:200]}") from None
    if not isinstance(data, dict):
        raise ActionFormatError("malformed", 'the tool call must be a JSON object {"tool": ..., "args": {...}}')
    if set(data) != {"tool", "args"}:
        extra = sorted(set(data) - {"tool", "args"})
        missing = sorted({"tool", "args"} - set(data))
        detail = "; ".join(
            part for part in (f"unexpected keys {extra}" if extra else "", f"missing {missing}" if missing else "") if part
        )
        raise ActionFormatError("malformed", f'the tool call has exactly the keys "tool" and "args" ({detail})')
    if not isinstance(data["tool"], str) or not data["tool"]:
        raise ActionFormatError("malformed", '"tool" must be a non-empty string')
    if not isinstance(data["args"], dict):
        raise ActionFormatError("malformed", '"args" must be a JSON object')
    return ToolCall(data["tool"], data["args"])


def render_tool_call(call: ToolCall) -> str:
    """The canonical text of ``call`` (what an assistant turn contains); parses back to ``call``."""
    body = json.dumps({"tool": call.tool, "args": call.args}, ensure_ascii=False)
    return f"{CALL_OPEN}\n{body}\n{CALL_CLOSE}"


def render_observation(text: str) -> str:
    """The canonical text of a tool result, as a chat template puts it in a ``tool`` turn."""
    return f"<tool_result>\n{text}\n</tool_result>"
