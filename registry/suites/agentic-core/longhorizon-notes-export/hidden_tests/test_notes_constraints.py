import ast
import csv
import io
import json
import sys
from datetime import date
from pathlib import Path

import notes
from notes.export import to_csv, to_json
from notes.store import Note, NoteStore

PACKAGE = Path(notes.__file__).resolve().parent


def test_public_functions_documented():
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                assert ast.get_docstring(node), f"{path.name}:{node.name} has no docstring"


def test_standard_library_only():
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top == "notes" or top in sys.stdlib_module_names, name


def test_storage_format_kept():
    s = NoteStore()
    s.add(Note("x", date(2024, 1, 1)))
    assert isinstance(s.notes, list) and isinstance(s.notes[0], Note)
    assert isinstance(s.with_tag("none"), NoteStore)


def test_csv_quoting_and_json_indent():
    s = NoteStore([Note("hello, world", date(2024, 2, 2), ["a"]), Note("z", date(2024, 2, 1))])
    rows = list(csv.reader(io.StringIO(to_csv(s))))
    assert rows == [["title", "created", "tags"], ["z", "2024-02-01", ""], ["hello, world", "2024-02-02", "a"]]
    assert to_json(s).startswith('[\n  {')
    assert json.loads(to_json(s.with_tag("a"))) == [{"title": "hello, world", "created": "2024-02-02", "tags": ["a"]}]
