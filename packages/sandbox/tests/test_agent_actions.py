"""The strict tool-call format: what parses, what is rejected and with which error kind."""

from __future__ import annotations

import pytest
from codemoe.sandbox.agent.actions import (
    ActionFormatError,
    ToolCall,
    parse_tool_call,
    render_observation,
    render_tool_call,
)
from codemoe.sandbox.agent.tools import ToolSet


def test_canonical_call_parses():
    text = '<tool_call>\n{"tool": "read_file", "args": {"path": "a.py", "start": 2}}\n</tool_call>'
    assert parse_tool_call(text) == ToolCall("read_file", {"path": "a.py", "start": 2})


def test_render_round_trips_unicode_and_quotes():
    call = ToolCall("write_file", {"path": "é.py", "content": 'print("a\\nb") # ; </x>\n'})
    text = render_tool_call(call)
    assert text.startswith("<tool_call>\n{") and text.endswith("}\n</tool_call>")
    assert parse_tool_call(text) == call
    assert parse_tool_call("  \n" + text + "\n\n") == call


@pytest.mark.parametrize(
    "text",
    [
        '{"tool": "run_tests", "args": {}}',  # no tags
        'Sure! <tool_call>{"tool": "run_tests", "args": {}}</tool_call>',  # text before
        '<tool_call>{"tool": "run_tests", "args": {}}</tool_call> done',  # text after
        '<tool_call>{"tool": "run_tests", "args": {},}</tool_call>',  # trailing comma
        '<tool_call>{"tool": "run_tests", "args": {}} // go</tool_call>',  # comment
        '<tool_call>{"tool": "read_file", "args": {"start": NaN}}</tool_call>',  # NaN
        '<tool_call>{"tool": "a", "tool": "b", "args": {}}</tool_call>',  # duplicate key
        '<tool_call>{"tool": "run_tests"}</tool_call>',  # missing args
        '<tool_call>{"tool": "run_tests", "args": {}, "id": 1}</tool_call>',  # extra key
        '<tool_call>{"tool": "run_tests", "args": []}</tool_call>',  # args not an object
        '<tool_call>{"tool": "", "args": {}}</tool_call>',  # empty tool
        '<tool_call>["run_tests", {}]</tool_call>',  # not an object
        '<tool_call>{"tool": "run_tests", "args": {}}</tool_call><tool_call>{"tool": "submit", "args": {}}</tool_call>',
        "",
        '<tool_call>{"tool": "read_file", "args": {"path": "a", "start": ' + "9" * 5000 + '}}</tool_call>',  # int too long
        '<tool_call>{"tool": "run_tests", "args": {"x": ' + "[" * 100_000 + "]" * 100_000 + '}}</tool_call>',  # too deep
    ],
    ids=lambda text: text[:60],
)
def test_malformed_actions_are_rejected(text):
    with pytest.raises(ActionFormatError) as info:
        parse_tool_call(text)
    assert info.value.kind == "malformed"


def test_non_text_action_is_malformed():
    with pytest.raises(ActionFormatError) as info:
        parse_tool_call({"tool": "run_tests", "args": {}})
    assert info.value.kind == "malformed"


@pytest.mark.parametrize(
    ("call", "kind", "fragment"),
    [
        (ToolCall("rm", {}), "unknown_tool", "unknown tool 'rm'"),
        (ToolCall("read_file", {}), "bad_args", "missing required argument 'path'"),
        (ToolCall("read_file", {"path": "a", "lines": 3}), "bad_args", "unknown argument(s) ['lines']"),
        (ToolCall("read_file", {"path": "a", "start": "1"}), "bad_args", "'start' must be integer"),
        (ToolCall("read_file", {"path": "a", "start": True}), "bad_args", "'start' must be integer"),
        (ToolCall("shell", {"command": "ls", "args": "-la"}), "bad_args", "'args' must be array"),
        (ToolCall("shell", {"command": "ls", "args": ["-l", 3]}), "bad_args", "'args' must be array"),
    ],
)
def test_schema_validation(call, kind, fragment):
    with pytest.raises(ActionFormatError) as info:
        ToolSet().validate(call)
    assert info.value.kind == kind
    assert fragment in str(info.value)


def test_tool_schemas_for_chat_templates():
    schemas = {s["name"]: s for s in ToolSet().schemas()}
    assert set(schemas) == {"list_files", "read_file", "search", "write_file", "edit", "run_tests", "shell",
                            "ask_clarification", "submit"}
    shell = schemas["shell"]["parameters"]
    assert shell["required"] == ["command"]
    assert shell["properties"]["args"] == {"type": "array", "description": "its arguments, one string each",
                                           "items": {"type": "string"}}
    assert shell["additionalProperties"] is False


def test_observation_rendering():
    assert render_observation("3 passed") == "<tool_result>\n3 passed\n</tool_result>"
