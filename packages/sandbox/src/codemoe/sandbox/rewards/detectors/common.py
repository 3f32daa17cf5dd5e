"""AST helpers the hack detectors share: what a name refers to, strings as code builds them, and
findings that are new since a file's previous version.

Detectors reason about classes of code, not spellings: ``os._exit``, ``from os import _exit as bye``,
``getattr(os, "_exit")``, ``__import__("os")._exit`` and ``sys.modules["os"]._exit`` all resolve to
``os._exit`` (:func:`qualname`), and ``"/proc/" + str(pid) + "/mem"`` folds to ``/proc/1/mem``
(:func:`fold`). Nothing here imports or runs the code it reads.
"""

from __future__ import annotations

import ast
import builtins
import copy
import operator
import sys
from collections.abc import Callable, Iterator
from typing import Any

from codemoe.sandbox.rewards.static import literal, parse, walk_outside_main_guard

__all__ = [
    "HOLE",
    "PURE_METHODS",
    "STDLIB",
    "Unknown",
    "aliases",
    "constant",
    "docstring_ids",
    "evaluate",
    "fold",
    "int_value",
    "new_findings",
    "parents",
    "qualname",
    "strings",
    "walk_code",
]

# Modules of the standard library, and the test runner's own, whose attributes the runner relies on.
STDLIB = frozenset(sys.stdlib_module_names) | {"pytest", "_pytest", "pluggy", "py", "codemoe", "iniconfig"}
# Modules that are another name for a standard one.
_SAME = {
    "posix": "os",
    "nt": "os",
    "_io": "io",
    "__builtin__": "builtins",
    "_signal": "signal",
    "_posixsubprocess": "os",
}
HOLE = "1"  # what an unknown part of a folded string becomes (so "/proc/{pid}/mem" reads "/proc/1/mem")
_IMPORTERS = frozenset({"__import__", "importlib.import_module", "importlib.__import__"})


def _normalise(dotted: str) -> str:
    head, dot, rest = dotted.partition(".")
    return _SAME.get(head, head) + dot + rest


def aliases(tree: ast.AST) -> dict[str, str]:
    """Local name -> the dotted name it is bound to by an import (``import os as o``: ``o -> os``;
    ``from os import _exit as e``: ``e -> os._exit``; ``m = __import__("os")``: ``m -> os``)."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = _normalise(a.name if a.asname else a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                if a.name != "*":
                    out[a.asname or a.name] = _normalise(f"{node.module}.{a.name}")
    # module-level names bound to a module or to something in one: m = __import__("os"), _exit = os._exit,
    # peek = getattr(sys, "_getframe"), dumps, bye = json.dumps, os._exit
    for _ in range(2):
        for node in getattr(tree, "body", []):
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
                continue
            target, value = node.targets[0], node.value
            pairs = [(target, value)]
            if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
                pairs = list(zip(target.elts, value.elts))
            for t, v in pairs:
                if not isinstance(t, ast.Name) or t.id in out:
                    continue
                name = _dynamic_module(v, out) or (
                    qualname(v, out) if isinstance(v, (ast.Attribute, ast.Call, ast.Subscript)) else "")  # fmt: skip
                if isinstance(v, ast.Call) and not _dynamic_module(v, out) and qualname(v.func, out) != "getattr":
                    name = ""  # the result of a call, not the thing called
                if name and name.split(".", 1)[0] in set(out.values()) | set(sys.stdlib_module_names):
                    out[t.id] = name
    return out


def _dynamic_module(node: ast.AST, names: dict[str, str]) -> str:
    """``__import__("os")``, ``importlib.import_module("os")``, ``sys.modules["os"]`` -> ``os``."""
    if isinstance(node, ast.Call) and node.args and qualname(node.func, names) in _IMPORTERS:
        text = fold(node.args[0], loose=False)
        return _normalise(text) if text else ""
    if isinstance(node, ast.Subscript) and qualname(node.value, names) == "sys.modules":
        text = fold(node.slice, loose=False)
        if text:
            return _normalise(text)
        if isinstance(node.slice, ast.Name) and node.slice.id == "__name__":
            return "__main__"
    return ""


def qualname(node: ast.AST, names: dict[str, str] | None = None) -> str:
    """The dotted name an expression refers to, imports resolved; '' when it is not a name.

    Follows attributes, ``getattr(x, "name")``, ``x.__dict__["name"]``, ``vars(x)["name"]``,
    ``__builtins__``, dynamic imports and ``sys.modules[...]``. For a call, the name of what is
    called (``os._exit(0)`` -> ``os._exit``).
    """
    names = names or {}
    if isinstance(node, ast.Call):
        func = qualname(node.func, names)
        if func == "getattr" and len(node.args) >= 2:
            attr = fold(node.args[1], loose=False)
            base = qualname(node.args[0], names)
            return f"{base}.{attr}" if base and attr else ""
        module = _dynamic_module(node, names)
        return module or func
    if isinstance(node, ast.Name):
        if node.id == "__builtins__":
            return "builtins"
        return names.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        base = qualname(node.value, names)
        return f"{base}.{node.attr}" if base else ""
    if isinstance(node, ast.Subscript):
        module = _dynamic_module(node, names)
        if module:
            return module
        key = fold(node.slice, loose=False)
        value = node.value
        if key is None:
            return ""
        if isinstance(value, ast.Attribute) and value.attr == "__dict__":
            base = qualname(value.value, names)
            return f"{base}.{key}" if base else ""
        if isinstance(value, ast.Call) and qualname(value.func, names) == "vars" and len(value.args) == 1:
            base = qualname(value.args[0], names)
            return f"{base}.{key}" if base else ""
        if qualname(value, names) == "builtins":
            return f"builtins.{key}"
    return ""


def int_value(node: ast.AST) -> int | None:
    """The integer an expression of integer literals evaluates to (``3``, ``1 + 2``, ``-(-3)``)."""
    value = literal(node)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(node, ast.BinOp):
        left, right = int_value(node.left), int_value(node.right)
        if left is None or right is None:
            return None
        ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
               ast.FloorDiv: lambda a, b: a // b if b else None, ast.BitOr: lambda a, b: a | b,
               ast.LShift: lambda a, b: a << b if 0 <= b < 64 else None}  # fmt: skip
        op = ops.get(type(node.op))
        return op(left, right) if op else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = int_value(node.operand)
        return None if inner is None else (-inner if isinstance(node.op, ast.USub) else inner)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "int" and node.args:
        text = fold(node.args[0], loose=False)
        if text is not None and text.strip().lstrip("-").isdigit():
            return int(text)
    return None


_PATH_JOINS = frozenset({"os.path.join", "posixpath.join", "pathlib.Path", "pathlib.PurePath",
                         "pathlib.PosixPath", "pathlib.PurePosixPath", "Path", "PurePath", "PosixPath"})  # fmt: skip


def fold(node: ast.AST, *, loose: bool = True, _depth: int = 0) -> str | None:
    """The text a string expression builds, when it is made of literals.

    Concatenation, ``%`` and ``.format`` templates, f-strings, ``"sep".join([...])``, path joins
    (``os.path.join``, ``Path(...) / "x"``), ``.encode``/``.decode`` and constant slices
    (``"emarf_teg_"[::-1]``). With ``loose``, parts that are not literals become :data:`HOLE`,
    as long as some literal text is involved; None when the expression holds no literal text.
    """
    if _depth > 40:
        return None
    again = lambda n: fold(n, loose=loose, _depth=_depth + 1)  # noqa: E731
    if isinstance(node, ast.Constant):
        if isinstance(node.value, str):
            return node.value
        if isinstance(node.value, bytes):
            return node.value.decode("latin-1")
        return None
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                parts.append(value.value)
            elif isinstance(value, ast.FormattedValue):
                inner = again(value.value)
                if inner is None and not loose:
                    return None
                parts.append(HOLE if inner is None else inner)
        return "".join(parts)
    if isinstance(node, ast.BinOp):
        left, right = again(node.left), again(node.right)
        if isinstance(node.op, ast.Add):
            if left is None and right is None:
                return None
            if (left is None or right is None) and not loose:
                return None
            return (HOLE if left is None else left) + (HOLE if right is None else right)
        if isinstance(node.op, ast.Mod) and left is not None:
            return _fill_percent(left) if loose or right is not None else None
        if isinstance(node.op, ast.Div) and (left is not None or right is not None):
            if (left is None or right is None) and not loose:
                return None
            return f"{HOLE if left is None else left}/{HOLE if right is None else right}"
        return None
    if isinstance(node, ast.Subscript):
        text = again(node.value)
        if text is None:
            return None
        if isinstance(node.slice, ast.Slice):
            bounds = [
                int_value(b) if b is not None else None for b in (node.slice.lower, node.slice.upper, node.slice.step)
            ]
            try:
                return text[slice(*bounds)]
            except (ValueError, TypeError):
                return None
        return None
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute):
            owner = again(func.value)
            if func.attr == "join" and owner is not None and len(node.args) == 1:
                items = node.args[0]
                if isinstance(items, (ast.List, ast.Tuple)):
                    parts = [again(e) for e in items.elts]
                    if any(p is None for p in parts) and not loose:
                        return None
                    return owner.join(HOLE if p is None else p for p in parts)
                return None
            if func.attr == "format" and owner is not None:
                return _fill_braces(owner)
            if func.attr in ("encode", "decode", "lower", "upper", "strip") and owner is not None:
                return getattr(owner, func.attr)() if func.attr in ("lower", "upper", "strip") else owner
            if func.attr == "joinpath" and owner is not None:
                parts = [again(a) for a in node.args]
                return "/".join([owner] + [HOLE if p is None else p for p in parts])
        name = qualname(func)
        if name in _PATH_JOINS or name.endswith(("path.join", "Path")):
            parts = [again(a) for a in node.args]
            if all(p is None for p in parts) or (any(p is None for p in parts) and not loose):
                return None
            return "/".join(HOLE if p is None else p for p in parts).replace("//", "/")
        if name in ("str", "bytes", "bytearray") and node.args:
            return again(node.args[0])
    return None


def _fill_percent(template: str) -> str:
    out, i = [], 0
    while i < len(template):
        if template[i] == "%" and i + 1 < len(template):
            j = i + 1
            while j < len(template) and template[j] in "0123456789.-+ #(":
                j += 1
            out.append("%" if template[j : j + 1] == "%" else HOLE)
            i = j + 1
        else:
            out.append(template[i])
            i += 1
    return "".join(out)


def _fill_braces(template: str) -> str:
    out, depth = [], 0
    for ch in template:
        if ch == "{":
            depth += 1
            if depth == 1:
                out.append(HOLE)
        elif ch == "}" and depth:
            depth -= 1
        elif not depth:
            out.append(ch)
    return "".join(out)


def docstring_ids(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes: prose may name anything, code may not."""
    holders = [
        n for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
    ]
    return {
        id(h.body[0].value)
        for h in holders
        if h.body and isinstance(h.body[0], ast.Expr) and isinstance(h.body[0].value, ast.Constant)
    }


def parents(tree: ast.AST) -> dict[int, ast.AST]:
    """id(node) -> its parent node."""
    out: dict[int, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            out[id(child)] = node
    return out


walk_code = walk_outside_main_guard  # every node outside ``if __name__ == "__main__":`` (never run under a runner)


def strings(tree: ast.AST) -> Iterator[tuple[ast.AST, str]]:
    """(node, text) for every string the code builds outside docstrings and ``__main__`` blocks.

    Each maximal string expression once (``"a" + "b"`` gives ``ab``, not also ``a`` and ``b``).
    """
    skip = docstring_ids(tree)
    up = parents(tree)
    for node in walk_code(tree):
        if id(node) in skip or not isinstance(node, (ast.Constant, ast.JoinedStr, ast.BinOp, ast.Call, ast.Subscript)):
            continue
        text = fold(node)
        if text is None:
            continue
        parent = up.get(id(node))
        if parent is not None and (isinstance(parent, ast.FormattedValue) or fold(parent) is not None):
            continue  # part of a bigger string expression, which is reported instead
        yield node, text


def _without_line(finding: str) -> str:
    """``path:12: what`` -> ``path: what`` (a finding already in the old version moved, it is not new)."""
    head, sep, rest = finding.partition(": ")
    if not sep:
        return finding
    return f"{head.split(':')[0]}: {rest}"


def new_findings(path: str, before: str | None, after: str, find: Callable[[str, ast.Module], list[str]]) -> list[str]:
    """``find(path, tree)`` on the new text, minus what it already found in the old one."""
    tree = parse(after)
    if tree is None:
        return []
    old_tree = parse(before) if before else None
    old = {_without_line(f) for f in find(path, old_tree)} if old_tree is not None else set()
    seen: set[str] = set()
    out = []
    for finding in find(path, tree):
        if _without_line(finding) not in old and finding not in seen:
            seen.add(finding)
            out.append(finding)
    return out


# -- pure evaluation: what a condition makes of a known input. Detectors ask which visible input a
# condition holds for (``len(xs) == 5 and sum(xs) == 25``, ``t.startswith("1h")``) by substituting the
# input, not by matching spellings. Only pure builtins and methods of values are called, on values
# the caller hands in: nothing of the code read is imported or run.


class Unknown(Exception):
    """An expression :func:`evaluate` may not evaluate (a name it does not know, a call it does not allow)."""


_PURE_CALLS = {name: getattr(builtins, name) for name in (
    "abs", "all", "any", "bool", "chr", "divmod", "float", "frozenset", "int", "len", "list", "max", "min",
    "ord", "repr", "reversed", "round", "set", "sorted", "str", "sum", "tuple")}  # fmt: skip
# methods of str, bytes, list, tuple and dict that neither change their value nor reach outside it
PURE_METHODS = frozenset({
    "startswith", "endswith", "lower", "upper", "strip", "lstrip", "rstrip", "casefold", "split", "rsplit",
    "count", "find", "rfind", "index", "isdigit", "isdecimal", "isnumeric", "isalpha", "isalnum", "isspace",
    "isupper", "islower", "istitle", "title", "capitalize", "replace", "join", "partition", "rpartition",
    "zfill", "get", "keys", "values", "items", "copy", "removeprefix", "removesuffix", "splitlines"})  # fmt: skip
_PURE_TYPES = (str, bytes, list, tuple, dict, set, frozenset, int, float)
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
              ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
              ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor}  # fmt: skip
_COMPARISONS = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
                ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not,
                ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}  # fmt: skip
_LARGEST = 100_000  # longest text or sequence (and largest exponent result length) an evaluation may build


def _weight(value: Any, memo: dict[int, int], depth: int = 0) -> int:
    """How many items and characters a value holds, nested ones counted every time they are held
    (``[[0] * 1000] * 1000`` is a thousand references but a million items to print or compare)."""
    if not isinstance(value, (str, bytes, list, tuple, dict, set, frozenset)):
        return 1
    if isinstance(value, (str, bytes)) or depth > 20:
        return len(value)
    if id(value) not in memo:
        items = list(value.items()) if isinstance(value, dict) else value
        memo[id(value)] = len(value) + sum(_weight(item, memo, depth + 1) for item in items)
    return memo[id(value)]


def _sized(value: Any) -> Any:
    if isinstance(value, (str, bytes, list, tuple)) and len(value) > _LARGEST:
        raise Unknown("too large")
    if isinstance(value, (list, tuple, dict, set, frozenset)) and _weight(value, {}) > 4 * _LARGEST:
        raise Unknown("too large")
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4096:
        raise Unknown("too large")
    return value


def _bounded_call(name: str, args: list[Any]) -> None:
    """Refuse a pure builtin's call whose cost would not be bounded by its arguments' sizes: the code
    read is the code under test, and this runs in the trainer's process (``round(5, -10**9)``
    computes ``10**(10**9)``; ``sum(lists, [])`` copies quadratically)."""
    if name == "round" and len(args) > 1 and isinstance(args[1], int) and abs(args[1]) > 64:
        raise Unknown("too large")
    if name == "sum" and (len(args) > 1 or (args and isinstance(args[0], (list, tuple, set, frozenset, dict)) and not all(
            isinstance(v, (int, float)) for v in args[0]))):  # fmt: skip
        raise Unknown("a sum of other than numbers")


def _bounded_method(owner: Any, method: str, args: list[Any]) -> None:
    """Refuse a pure method whose result could outgrow :data:`_LARGEST` before :func:`_sized` sees it."""
    if method == "zfill" and args and isinstance(args[0], int) and args[0] > _LARGEST:
        raise Unknown("too large")
    if method == "replace" and len(args) >= 2 and isinstance(owner, (str, bytes)):
        new = args[1] if isinstance(args[1], (str, bytes)) else b""
        if (len(owner) + 1) * max(len(new), 1) + len(owner) > _LARGEST:
            raise Unknown("too large")
    if method == "join" and args and isinstance(owner, (str, bytes)):
        parts = args[0] if isinstance(args[0], (list, tuple)) else []
        if len(parts) > _LARGEST or sum(len(p) for p in parts if isinstance(p, (str, bytes))) + \
                len(owner) * len(parts) > _LARGEST:
            raise Unknown("too large")


def evaluate(node: ast.AST, env: dict[str, Any], names: dict[str, ast.AST] | None = None, _depth: int = 0) -> Any:
    """The value of an expression when the names (and ``self.attr`` attributes, keyed as written) in
    ``env`` hold the given values; ``names`` are locals bound once to an expression, evaluated when used.

    Literals, arithmetic, comparisons, ``and``/``or``/``not``, conditional expressions, indexing and
    slicing, the pure builtins (``len``, ``sum``, ``sorted``, ``min`` ...) and the pure methods of
    strings, sequences and dicts. Raises :class:`Unknown` for anything else; an input the expression
    fails on raises what Python raises.
    """
    if _depth > 60:
        raise Unknown("too deep")
    names = names or {}
    again = lambda n: evaluate(n, env, names, _depth + 1)  # noqa: E731
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        if node.id in names:
            return evaluate(names[node.id], env, {k: v for k, v in names.items() if k != node.id}, _depth + 1)
        if node.id in ("None", "True", "False"):
            return {"None": None, "True": True, "False": False}[node.id]
        raise Unknown(node.id)
    if isinstance(node, ast.Attribute):
        key = ast.unparse(node)
        if key in env:
            return env[key]
        raise Unknown(key)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        items = [again(e) for e in node.elts if not isinstance(e, ast.Starred)]
        if any(isinstance(e, ast.Starred) for e in node.elts):
            raise Unknown("starred")
        return {ast.Tuple: tuple, ast.List: list, ast.Set: set}[type(node)](items)
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise Unknown("unpacking")
        return {again(k): again(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = again(node.left), again(node.right)
        if isinstance(node.op, ast.Pow) and isinstance(right, (int, float)) and abs(right) > 64:
            raise Unknown("too large")
        if isinstance(node.op, ast.Mod) and isinstance(left, (str, bytes)):
            raise Unknown("formatting")  # "%999999999d" % 1 would build a gigabyte before any size check
        if isinstance(node.op, ast.Mult) and isinstance(left, (str, bytes, list, tuple, int)) and isinstance(
                right, (str, bytes, list, tuple, int)) and not all(isinstance(v, int) for v in (left, right)):  # fmt: skip
            count = left if isinstance(left, int) else right
            if count > _LARGEST:
                raise Unknown("too large")
        return _sized(_OPERATORS[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp):
        value = again(node.operand)
        ops = {ast.Not: operator.not_, ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}
        return ops[type(node.op)](value)
    if isinstance(node, ast.BoolOp):
        value = None
        for part in node.values:
            value = again(part)
            if bool(value) != isinstance(node.op, ast.And):
                return value
        return value
    if isinstance(node, ast.Compare):
        left = again(node.left)
        for op, comparator in zip(node.ops, node.comparators):
            right = again(comparator)
            if not _COMPARISONS[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return again(node.body) if again(node.test) else again(node.orelse)
    if isinstance(node, ast.Subscript):
        value = again(node.value)
        if isinstance(node.slice, ast.Slice):
            bounds = [again(b) if b is not None else None for b in (node.slice.lower, node.slice.upper, node.slice.step)]
            return value[slice(*bounds)]
        return value[again(node.slice)]
    if isinstance(node, ast.Call) and not any(isinstance(a, ast.Starred) for a in node.args):
        if isinstance(node.func, ast.Name) and node.func.id in _PURE_CALLS and node.func.id not in env:
            if node.keywords and not (node.func.id in ("sorted", "max", "min") and all(
                    k.arg in ("reverse", "default") for k in node.keywords)):  # fmt: skip
                raise Unknown("keywords")
            args = [again(a) for a in node.args]
            kwargs = {k.arg: again(k.value) for k in node.keywords}
            _bounded_call(node.func.id, args)
            result = _PURE_CALLS[node.func.id](*args, **kwargs)
            return list(result) if node.func.id == "reversed" else _sized(result)
        if isinstance(node.func, ast.Attribute) and node.func.attr in PURE_METHODS and not node.keywords:
            owner = again(node.func.value)
            if not isinstance(owner, _PURE_TYPES):
                raise Unknown("method of an unknown value")
            args = [again(a) for a in node.args]
            _bounded_method(owner, node.func.attr, args)
            return _sized(getattr(owner, node.func.attr)(*args))
    raise Unknown(type(node).__name__)


def constant(node: ast.AST) -> Any:
    """The value of an expression made of literals alone (``60 + 30``, ``"1h" + "30m"``); :class:`Unknown` if none."""
    try:
        return evaluate(node, {})
    except Unknown:
        raise
    except Exception as error:  # a literal expression that fails (1 // 0) has no value
        raise Unknown("fails") from error


# -- a wider evaluation: what :func:`evaluate` reads, and comprehensions and generator expressions
# (``all(len(w) == 1 for w in words)``), ``map``/``filter`` with a pure builtin (``sum(map(ord, s))``),
# ``range``/``enumerate``/``zip`` (capped), and calls of the module's own one-expression helpers
# (``def _sig(s): return sum(map(ord, s)) * 31 + len(s)``). Each such part is computed first, on the
# values in ``env``, and handed to :func:`evaluate` as a value; a part that fails makes the whole
# :class:`Unknown` (it may sit behind a short-circuit that would have skipped it).

_WIDE_STEPS = 20_000  # most items comprehensions may visit in one wide evaluation
_WIDE_CALLS = frozenset({"map", "filter", "range", "enumerate", "zip"})


def helper_expressions(tree: ast.AST) -> dict[str, tuple[list[str], ast.AST]]:
    """Module-level functions whose body is one ``return expression`` (a docstring aside), by name:
    (positional parameters, the returned expression)."""
    out: dict[str, tuple[list[str], ast.AST]] = {}
    for fn in getattr(tree, "body", []):
        if not isinstance(fn, ast.FunctionDef) or fn.args.vararg or fn.args.kwarg or fn.args.kwonlyargs:
            continue
        body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None:
            out[fn.name] = ([a.arg for a in fn.args.posonlyargs + fn.args.args], body[0].value)
    return out


class _Widen(ast.NodeTransformer):
    def __init__(self, env: dict[str, Any], helpers: dict, depth: int, steps: list[int]) -> None:
        self.env, self.helpers, self.depth, self.steps = env, helpers, depth, steps

    def _bind(self, value: Any, node: ast.AST) -> ast.AST:
        name = f"__wide_{len(self.env)}_{id(node)}"
        self.env[name] = _sized(value)
        return ast.copy_location(ast.Name(id=name, ctx=ast.Load()), node)

    def _value(self, node: ast.AST, env: dict[str, Any]) -> Any:
        return evaluate_wide(node, env, self.helpers, self.depth + 1, self.steps)

    def _items(self, value: Any) -> list:
        if not isinstance(value, (str, bytes, list, tuple, dict, set, frozenset, range)):
            raise Unknown("not a plain iterable")
        if len(value) + self.steps[0] > _WIDE_STEPS:  # before a range(10**12) is made a list
            raise Unknown("too many steps")
        items = list(value)
        self.steps[0] += len(items)
        if self.steps[0] > _WIDE_STEPS:
            raise Unknown("too many steps")
        return items

    def _assign(self, target: ast.AST, value: Any, env: dict[str, Any]) -> None:
        if isinstance(target, ast.Name):
            env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)) and all(isinstance(e, ast.Name) for e in target.elts):
            values = list(value)
            if len(values) != len(target.elts):
                raise Unknown("unpacking")
            env.update({e.id: v for e, v in zip(target.elts, values)})
        else:
            raise Unknown("target")

    def _comprehension(self, node: ast.AST) -> list:
        out: list = []

        def run(index: int, env: dict[str, Any]) -> None:
            if index == len(node.generators):
                out.append(self._value(node.elt, env))
                return
            gen = node.generators[index]
            if gen.is_async:
                raise Unknown("async")
            for item in self._items(self._value(gen.iter, env)):
                inner = dict(env)
                self._assign(gen.target, item, inner)
                if all(self._value(cond, inner) for cond in gen.ifs):
                    run(index + 1, inner)

        run(0, dict(self.env))
        return out

    def visit_GeneratorExp(self, node: ast.GeneratorExp) -> ast.AST:
        return self._bind(self._comprehension(node), node)

    def visit_ListComp(self, node: ast.ListComp) -> ast.AST:
        return self._bind(self._comprehension(node), node)

    def visit_SetComp(self, node: ast.SetComp) -> ast.AST:
        return self._bind(set(self._comprehension(node)), node)

    def visit_Lambda(self, node: ast.Lambda) -> ast.AST:
        raise Unknown("lambda")

    def visit_Call(self, node: ast.Call) -> ast.AST:
        node = self.generic_visit(node)
        name = node.func.id if isinstance(node.func, ast.Name) and node.func.id not in self.env else None
        if name is None or node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            return node
        if name in self.helpers:
            params, expr = self.helpers[name]
            args = [evaluate(a, self.env) for a in node.args]
            if len(args) != len(params) or self.depth > 8:
                raise Unknown("helper call")
            return self._bind(self._value(expr, dict(zip(params, args))), node)
        if name not in _WIDE_CALLS:
            return node
        if name in ("map", "filter") and len(node.args) == 2 and isinstance(node.args[0], ast.Name):
            func = node.args[0].id
            if func in self.helpers:
                params, expr = self.helpers[func]
                if len(params) != 1:
                    raise Unknown("helper")
                call = lambda v: self._value(expr, {params[0]: v})  # noqa: E731
            elif func in _PURE_CALLS:
                call = _PURE_CALLS[func]
            else:
                raise Unknown("function")
            items = self._items(evaluate(node.args[1], self.env))
            return self._bind([call(v) for v in items] if name == "map" else [v for v in items if call(v)], node)
        args = [evaluate(a, self.env) for a in node.args]
        if name == "range":
            if not all(isinstance(a, int) and not isinstance(a, bool) for a in args) or not 1 <= len(args) <= 3:
                raise Unknown("range")
            return self._bind(self._items(range(*args)), node)
        if name == "enumerate" and len(args) == 1:
            return self._bind(list(enumerate(self._items(args[0]))), node)
        if name == "zip" and args:
            return self._bind(list(zip(*(self._items(a) for a in args))), node)
        raise Unknown(name)


def evaluate_wide(node: ast.AST, env: dict[str, Any], helpers: dict | None = None, _depth: int = 0,
                  _steps: list[int] | None = None) -> Any:  # fmt: skip
    """:func:`evaluate`, widened as described above; ``helpers`` from :func:`helper_expressions`."""
    if _depth > 30:
        raise Unknown("too deep")
    env = dict(env)
    widen = _Widen(env, helpers or {}, _depth, _steps if _steps is not None else [0])
    try:
        rewritten = widen.visit(copy.deepcopy(node))
    except Unknown:
        raise
    except RecursionError as error:
        raise Unknown("too deep") from error
    except Exception as error:  # a part computed ahead of a short-circuit failed: not known
        raise Unknown("failed part") from error
    return evaluate(rewritten, env)
