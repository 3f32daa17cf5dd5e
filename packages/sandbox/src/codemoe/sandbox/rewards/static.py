"""Small AST helpers shared by the hack detectors and the code-quality components.

Everything here parses source text; nothing imports or runs it.
"""

from __future__ import annotations

import ast
import warnings
from collections.abc import Callable, Iterator
from typing import Any

__all__ = [
    "NOT_LITERAL",
    "call_name",
    "functions",
    "is_main_guard",
    "literal",
    "parametrize_rows",
    "parse",
    "test_functions",
    "walk_outside_main_guard",
]

NOT_LITERAL = object()  # returned by :func:`literal` for expressions that are not constants


def parse(text: str) -> ast.Module | None:
    """The module's AST, or None when it does not parse (the compile component reports that)."""
    try:
        with warnings.catch_warnings():  # a policy's odd literals ("1st") must not flood the trainer's console
            warnings.simplefilter("ignore", SyntaxWarning)
            return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # nested past what the parser takes
        return None


def literal(node: ast.AST) -> Any:
    """The value of a literal expression (numbers, strings, tuples, lists ...), else NOT_LITERAL."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return NOT_LITERAL


def call_name(node: ast.AST) -> str:
    """Dotted name of a call's function (``os._exit``, ``pytest.mark.skip``), or '' when not a name."""
    func = node.func if isinstance(node, ast.Call) else node
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
        return ".".join(reversed(parts))
    if isinstance(func, ast.Call):
        return call_name(func)
    return ""


def functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Every function and method in the tree, nested ones included."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def test_functions(tree: ast.AST) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    """Test functions by qualified name (``test_x`` or ``TestCase.test_x``), as pytest collects them."""
    out: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    body = tree.body if isinstance(tree, ast.Module) else []
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            out[node.name] = node
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test"):
                    out[f"{node.name}.{item.name}"] = item
    return out


test_functions.__test__ = False  # type: ignore[attr-defined]  # a helper, not a pytest test


def is_main_guard(node: ast.AST) -> bool:
    """True for ``if __name__ == "__main__":``."""
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    sides = [node.test.left, *node.test.comparators]
    names = any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)
    return names and any(literal(s) == "__main__" for s in sides)


def walk_outside_main_guard(tree: ast.AST) -> Iterator[ast.AST]:
    """Like :func:`ast.walk`, skipping the bodies of ``if __name__ == "__main__":`` blocks."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        todo.extend(child for child in ast.iter_child_nodes(node) if not is_main_guard(child))


def _parametrize(decorator: ast.expr, value: Callable[[ast.AST], Any] = literal) -> list[dict[str, Any]] | None:
    """Rows of one ``@pytest.mark.parametrize("a, b", [(1, 2), ...])``; None for other decorators."""
    if not (
        isinstance(decorator, ast.Call) and call_name(decorator).endswith("parametrize") and len(decorator.args) >= 2
    ):
        return None
    names, values = value(decorator.args[0]), value(decorator.args[1])
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    if not isinstance(names, (list, tuple)) or not isinstance(values, (list, tuple)):
        return []
    rows = []
    for value in values:
        row = value if len(names) > 1 else (value,)
        if isinstance(row, (list, tuple)) and len(row) == len(names):
            rows.append(dict(zip(names, row)))
    return rows


def parametrize_rows(fn: ast.FunctionDef | ast.AsyncFunctionDef,
                     value: Callable[[ast.AST], Any] = literal) -> list[dict[str, Any]]:
    """The argument rows pytest generates from a test's literal ``parametrize`` decorators (``value``
    reads an argument: :func:`literal`, or a caller's evaluation that returns :data:`NOT_LITERAL` where
    it cannot).

    ``[{}]`` for a test without them (it runs once); stacked decorators multiply.
    """
    rows: list[dict[str, Any]] = [{}]
    for decorator in fn.decorator_list:
        found = _parametrize(decorator, value)
        if found is not None:
            rows = [{**row, **extra} for row in rows for extra in found]
    return rows
