"""The agent's tools: each a registered function with a typed argument schema.

Tools: ``list_files``, ``read_file`` (line ranges), ``search`` (grep-like), ``write_file``,
``edit`` (exact replace that must match once), ``run_tests`` (visible tests, per-test outcomes),
``shell`` (allow-listed commands, arguments as a list), ``ask_clarification`` and ``submit``.

:meth:`ToolSet.validate` checks a :class:`ToolCall` against the schema (unknown tool, unknown,
missing or mistyped argument: an :class:`ActionFormatError`, which the environment counts as a
format error). A valid call that fails (a missing file, a denied path) raises :class:`ToolError`.
Tools never see a host path: every path goes through :meth:`Workspace.resolve`.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, Protocol

import regex
from codemoe.sandbox.agent.actions import ActionFormatError, ToolCall
from codemoe.sandbox.agent.workspace import ToolError, Workspace
from codemoe.sandbox.api import ExecutionResult

__all__ = ["SHELL_ALLOW_LIST", "Param", "ToolContext", "ToolOutput", "ToolSet", "ToolSpec", "check_shell_args"]

# Commands the shell tool runs. Each gets its arguments as a list; no shell ever parses them.
SHELL_ALLOW_LIST = (
    "cat", "diff", "echo", "find", "grep", "head", "ls", "pip", "printf", "python", "sort", "tail", "uniq", "wc",
)
MAX_LISTED = 300  # entries list_files returns
MAX_MATCHES = 100  # lines search returns
MAX_OUTPUT_CHARS = 6000  # characters of command output an observation keeps (head and tail)
MAX_READ_LINES = 400  # lines read_file returns at once
SEARCH_SECONDS = 2.0  # time one search may take matching its pattern


class ToolContext(Protocol):
    """What a tool may use: the workspace, the task's clarification, and the sandbox executor."""

    workspace: Workspace
    clarification: str | None
    test_output: str  # 'full' or 'short': how run_tests reports a failing run

    def run_tests(self, targets: list[str]) -> ExecutionResult:
        """Run the visible tests (optionally only ``targets``) on the workspace."""
        ...

    def run_command(self, argv: list[str]) -> ExecutionResult:
        """Run ``argv`` in the sandbox on a copy of the workspace."""
        ...


@dataclass
class ToolOutput:
    """A tool's observation text plus structured facts the environment records."""

    text: str
    data: dict[str, Any] = field(default_factory=dict)
    done: bool = False  # the episode ends after this call (submit)


@dataclass(frozen=True)
class Param:
    """One argument of a tool."""

    name: str
    type: type | tuple[type, ...]
    required: bool = True
    doc: str = ""

    def type_name(self) -> str:
        types = self.type if isinstance(self.type, tuple) else (self.type,)
        names = {str: "string", int: "integer", bool: "boolean", list: "array"}
        return " or ".join(names.get(t, t.__name__) for t in types)


@dataclass(frozen=True)
class ToolSpec:
    """A tool: its name, what it does, its parameters and its implementation."""

    name: str
    doc: str
    params: tuple[Param, ...]
    fn: Callable[[ToolContext, dict[str, Any]], ToolOutput]

    def schema(self) -> dict[str, Any]:
        """A JSON-schema description (the shape chat templates expect for tool definitions)."""
        json_types = {str: "string", int: "integer", bool: "boolean", list: "array"}
        props = {}
        for p in self.params:
            types = p.type if isinstance(p.type, tuple) else (p.type,)
            prop: dict[str, Any] = {"type": json_types[types[0]], "description": p.doc}
            if types[0] is list:
                prop["items"] = {"type": "string"}
            props[p.name] = prop
        return {
            "name": self.name,
            "description": self.doc,
            "parameters": {
                "type": "object",
                "properties": props,
                "required": [p.name for p in self.params if p.required],
                "additionalProperties": False,
            },
        }


_TOOLS: dict[str, ToolSpec] = {}


def tool(name: str, doc: str, *params: Param) -> Callable[[Callable[..., ToolOutput]], Callable[..., ToolOutput]]:
    """Register a tool function under ``name``."""

    def register(fn: Callable[..., ToolOutput]) -> Callable[..., ToolOutput]:
        _TOOLS[name] = ToolSpec(name, doc, params, fn)
        return fn

    return register


def _is_type(value: Any, expected: type | tuple[type, ...]) -> bool:
    types = expected if isinstance(expected, tuple) else (expected,)
    if isinstance(value, bool) and bool not in types:
        return False
    if isinstance(value, list):
        return list in types and all(isinstance(v, str) for v in value)
    return isinstance(value, types)


def _is_text(value: str) -> bool:
    """Whether ``value`` is text a path, a file's UTF-8 content and a command argument can all hold."""
    if "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate ("\\ud800" in the JSON, or "x\\udcff" for a byte)
        return False
    return True


class ToolSet:
    """The tools an environment offers, with argument validation and dispatch."""

    def __init__(self, names: tuple[str, ...] | None = None) -> None:
        self.specs = {n: _TOOLS[n] for n in (names or tuple(_TOOLS))}

    def validate(self, call: ToolCall) -> None:
        """Raise :class:`ActionFormatError` (``unknown_tool`` or ``bad_args``) for a call that does not fit."""
        spec = self.specs.get(call.tool)
        if spec is None:
            raise ActionFormatError("unknown_tool", f"unknown tool {call.tool!r}; tools: {', '.join(self.specs)}")
        known = {p.name: p for p in spec.params}
        unknown = sorted(set(call.args) - set(known))
        if unknown:
            raise ActionFormatError("bad_args", f"{call.tool}: unknown argument(s) {unknown}; arguments: {list(known)}")
        for p in spec.params:
            if p.name not in call.args:
                if p.required:
                    raise ActionFormatError("bad_args", f"{call.tool}: missing required argument {p.name!r} ({p.type_name()})")
                continue
            value = call.args[p.name]
            if not _is_type(value, p.type):
                raise ActionFormatError(
                    "bad_args", f"{call.tool}: argument {p.name!r} must be {p.type_name()}, got {value!r}"
                )
            if not all(_is_text(v) for v in (value if isinstance(value, list) else [value]) if isinstance(v, str)):
                raise ActionFormatError("bad_args", f"{call.tool}: argument {p.name!r} holds a NUL character or a lone "
                                                    "surrogate, which no file name, file or command argument can hold")

    def call(self, ctx: ToolContext, call: ToolCall) -> ToolOutput:
        """Validate and run ``call``; raises ActionFormatError or ToolError."""
        self.validate(call)
        return self.specs[call.tool].fn(ctx, dict(call.args))

    def schemas(self) -> list[dict[str, Any]]:
        """The JSON schemas of every tool, for a system prompt or a chat template's ``tools=``."""
        return [spec.schema() for spec in self.specs.values()]


def _clip(text: str, limit: int = MAX_OUTPUT_CHARS) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n... [{len(text) - limit} characters cut] ...\n{text[-half:]}"


# -------------------------------------------------------------------------------------------------
# file tools
# -------------------------------------------------------------------------------------------------


@tool("list_files", "List the files under a folder of the repository (recursively).",
      Param("path", str, False, "folder relative to the repository root (default '.')"))
def _list_files(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
    ws = ctx.workspace
    base = ws.resolve(args.get("path", ".") or ".")
    paths = [ws.relative(p) for p in ws.iter_files(base)]
    shown = paths[:MAX_LISTED]
    more = f"\n... and {len(paths) - MAX_LISTED} more" if len(paths) > MAX_LISTED else ""
    return ToolOutput("\n".join(shown) + more if shown else "(no files)", {"count": len(paths)})


@tool("read_file", f"Read a text file, optionally only lines start..end (1-based, inclusive; at most {MAX_READ_LINES} at once).",
      Param("path", str, True, "file relative to the repository root"),
      Param("start", int, False, "first line (default 1)"),
      Param("end", int, False, "last line (default: end of file)"))
def _read_file(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
    lines = ctx.workspace.read_text(args["path"]).splitlines()
    start, end = args.get("start", 1), args.get("end", len(lines))
    if start < 1 or end < start - 1:
        raise ToolError("bad_range", f"bad line range {start}..{end}; lines are 1..{len(lines)}")
    shown_end = min(end, start + MAX_READ_LINES - 1)
    body = "\n".join(f"{n:>5}| {text}" for n, text in enumerate(lines[start - 1:shown_end], start))
    if shown_end < min(end, len(lines)):
        body += f"\n... {min(end, len(lines)) - shown_end} more lines: read from line {shown_end + 1}"
    return ToolOutput(body or "(empty)", {"lines": len(lines)})


@tool("search", "Find lines containing a text (or matching a regular expression) in the repository's files.",
      Param("pattern", str, True, "the text to find"),
      Param("path", str, False, "file or folder to search (default '.')"),
      Param("regex", bool, False, "treat pattern as a Python regular expression (default false)"))
def _search(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
    """The policy's pattern runs on the host: through ``regex`` (``re``'s syntax), whose matching takes
    a time limit and lets other threads run, so a pattern that backtracks exponentially
    (``^(a|aa)+$``) costs at most ``SEARCH_SECONDS`` and never stalls the other episodes."""
    ws = ctx.workspace
    try:
        matcher = regex.compile(args["pattern"] if args.get("regex") else regex.escape(args["pattern"]))
    except (regex.error, OverflowError, ValueError, RecursionError) as exc:  # a{99999999999}: OverflowError
        raise ToolError("bad_pattern", f"invalid regular expression: {str(exc)[:200]}") from None
    hits: list[str] = []
    deadline = time.monotonic() + SEARCH_SECONDS
    for path in ws.iter_files(ws.resolve(args.get("path", ".") or ".")):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            left = deadline - time.monotonic()
            try:
                if left <= 0:
                    raise TimeoutError
                found = matcher.search(line, timeout=left, concurrent=True)
            except TimeoutError:
                raise ToolError("timeout", f"the search took over {SEARCH_SECONDS:g} s; use a simpler pattern or a "
                                           "narrower path") from None
            if found:
                hits.append(f"{ws.relative(path)}:{n}: {line}")
    more = f"\n... and {len(hits) - MAX_MATCHES} more" if len(hits) > MAX_MATCHES else ""
    return ToolOutput("\n".join(hits[:MAX_MATCHES]) + more if hits else "no matches", {"matches": len(hits)})


@tool("write_file", "Create or overwrite a text file with the given content.",
      Param("path", str, True, "file relative to the repository root"),
      Param("content", str, True, "the whole new content"))
def _write_file(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
    created = ctx.workspace.write_text(args["path"], args["content"])
    verb = "created" if created else "wrote"
    return ToolOutput(f"{verb} {args['path']} ({len(args['content'].splitlines())} lines)", {"path": args["path"]})


@tool("edit", "Replace an exact piece of text in a file; it must occur exactly once.",
      Param("path", str, True, "file relative to the repository root"),
      Param("old", str, True, "the exact text to replace (include enough context to be unique)"),
      Param("new", str, True, "the replacement text"))
def _edit(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
    text = ctx.workspace.read_text(args["path"])
    count = text.count(args["old"]) if args["old"] else 0
    if count == 0:
        raise ToolError("no_match", f"{args['path']}: the text to replace was not found; read the file and copy it exactly")
    if count > 1:
        raise ToolError("multiple_matches", f"{args['path']}: the text occurs {count} times; include more context")
    ctx.workspace.write_text(args["path"], text.replace(args["old"], args["new"], 1))
    return ToolOutput(f"edited {args['path']}", {"path": args["path"]})


# -------------------------------------------------------------------------------------------------
# execution tools
# -------------------------------------------------------------------------------------------------


TEST_OUTPUTS = ("full", "short")
_SHORT_LOCATION = re.compile(r"^[^/\s]\S*\.py:\d+: ")  # "tests/test_x.py:5: AssertionError" (not the interpreter's files)
_MAX_E_LINES = 3  # error lines kept after each failing source line in a short report


def short_failures(output: str) -> str:
    """pytest's failure report cut to what locates and explains each failure: the failing source line
    (``>``), the first error lines after it (``E``) and the ``file:line:`` location; banners, progress
    dots, summaries and context lines go."""
    kept: list[str] = []
    errors = 0
    for line in output.splitlines():
        if line.startswith(">"):
            kept.append(line.rstrip())
            errors = 0
        elif line.startswith("E ") and errors < _MAX_E_LINES and line[1:].strip():
            kept.append(line.rstrip())
            errors += 1
        elif _SHORT_LOCATION.match(line):
            kept.append(line.rstrip())
    return "\n".join(kept)


def format_test_result(result: ExecutionResult, output: str = "full") -> str:
    """The observation of a test run: status, counts, per-test outcomes, then the output's tail
    (``full``) or the failures' source lines, errors and locations only (``short``)."""
    counts: dict[str, int] = {}
    for outcome in result.tests.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    summary = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items())) or "no tests ran"
    lines = [f"status: {result.status} ({summary})"]
    if result.reason:
        lines.append(f"reason: {result.reason}")
    lines += [f"{outcome.upper():7} {test_id}" for test_id, outcome in sorted(result.tests.items())]
    if result.status != "passed":
        text = (result.stdout + ("\n" + result.stderr if result.stderr else "")).strip()
        if output == "short":
            text = short_failures(text) or text  # nothing pytest-shaped (a crash, a setup error): the output
        if text:
            lines += ["", _clip(text)]
    return "\n".join(lines)


@tool("run_tests", "Run the repository's visible tests and report each test's outcome.",
      Param("targets", list, False, "test files or node ids to run (default: the task's visible tests)"))
def _run_tests(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
    targets = list(args.get("targets", []))
    for target in targets:
        ctx.workspace.resolve(target.split("::", 1)[0])
    result = ctx.run_tests(targets)
    text = format_test_result(result, ctx.test_output)
    return ToolOutput(text, {"status": result.status, "tests": dict(result.tests)})


def check_shell_args(args: list[str]) -> None:
    """Refuse arguments that name a path outside the workspace (absolute, ``~`` or with ``..``).

    Options of the form ``--opt=value`` are checked on their value too.
    """
    for arg in args:
        values = [arg]
        if arg.startswith("-") and "=" in arg:
            values.append(arg.split("=", 1)[1])
        for value in values:
            if value.startswith(("/", "~")) or ".." in PurePosixPath(value).parts:
                raise ToolError("denied", f"argument {arg!r} points outside the repository; use relative paths")


@tool("shell", "Run an allow-listed command on a copy of the repository. Arguments are passed as a list, "
      "each exactly as given (no shell: no pipes, globs or variables). File changes are not kept: use "
      f"write_file or edit. Allowed: {', '.join(SHELL_ALLOW_LIST)}.",
      Param("command", str, True, "the program to run"),
      Param("args", list, False, "its arguments, one string each"))
def _shell(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
    command, argv = args["command"], list(args.get("args", []))
    if command not in SHELL_ALLOW_LIST:
        raise ToolError("not_allowed", f"{command!r} is not allowed; allowed commands: {', '.join(SHELL_ALLOW_LIST)}")
    check_shell_args(argv)
    result = ctx.run_command([command, *argv])
    parts = [f"$ {shlex.join([command, *argv])}", f"exit code: {result.exit_code} ({result.status})"]
    if result.stdout:
        parts.append(_clip(result.stdout.rstrip("\n")))
    if result.stderr:
        parts.append("stderr:\n" + _clip(result.stderr.rstrip("\n")))
    return ToolOutput("\n".join(parts), {"exit_code": result.exit_code, "status": result.status})


# -------------------------------------------------------------------------------------------------
# conversation tools
# -------------------------------------------------------------------------------------------------


@tool("ask_clarification", "Ask the task's author a question about the requirements.",
      Param("question", str, True, "what is unclear"))
def _ask_clarification(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
    if ctx.clarification is None:
        return ToolOutput("No further information: the statement is complete as written.", {"answered": False})
    return ToolOutput(ctx.clarification, {"answered": True})


@tool("submit", "Finish the episode; the work is graded as it is now.",
      Param("summary", str, False, "what was done and what is left"))
def _submit(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
    return ToolOutput("submitted", {"summary": args.get("summary", "")}, done=True)
