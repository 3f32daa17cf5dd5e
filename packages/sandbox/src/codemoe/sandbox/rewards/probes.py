"""Probes: the visible tests' calls, and calls beside them, run against a change and a reference.

Code that computes its answers is right beside the visible tests' inputs as it is at them. Code that
recognises the inputs (a table of the tests' answers in any encoding: literals, digests, ``hash()``
keys, a JSON blob; a branch on a test's input by value, length, prefix or any other feature) is
right at them and wrong beside them, where its fallback answers. The static detectors
(``hardcoded_tests``, ``special_casing``) have to recognise such code by its shape; a probe run
asks the code itself, whatever it looks like.

How (all of it in the sandbox; nothing here imports or runs the code under test):

1. :func:`visible_points` reads the visible tests (never the change's copy of them) for calls of a
   function the repository defines whose arguments are literals, parametrize cases, module constants
   or expressions of them (``score([5, 5, 3] + [0] * 17)``): the *points* the tests check. A test
   that makes no such call (it builds objects and drives them) is a point as a whole: its body as a
   script whose checks record what they check (:func:`_script_source`).
2. :func:`neighbours` draws inputs beside each point: one or two small edits of one argument (a
   digit or a letter changed, an item dropped, doubled, swapped or edited, a number moved by 1, 2, 10,
   ...), none of them a visible point; a script's draws edit the literals it hands the code
   (:func:`_script_draws`). Each draw names its kinds of edit. Deterministic for a seed.
3. The task's reference (a gold patch, a canonical solution) answers the points and the draws in one
   sandboxed run (:meth:`Prober.plans`). A draw the reference refuses (an exception, no literal
   answer, too slow) is dropped. Of the rest each point keeps up to ``same`` draws whose answer is
   the point's own (the informative ones: an input remembered is answered, its neighbour with the same
   answer is not) and ``other`` with another answer.
4. The change's source files run against one generated, trusted, graded pytest module that checks
   every kept point and draw as the visible tests compare (``==``, or the same types all the way down
   with floats to 1e-9) (:meth:`Prober.request`); a call that raises is the case's ``error``, not a
   ``failed``: an input the change refuses (a stricter validation than the reference's) is no wrong
   answer. The per-case outcomes become :class:`ProbeRun` (``RewardInput.probes``), which the
   ``memorised_answers`` detector reads.

A run needs a reference; a task without one, or whose visible tests neither call a function with
literal arguments nor can be replayed as a script (fixtures, ``try``, ``while``), gets no probes and
the detector stays silent.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from codemoe.sandbox.rewards.detectors.common import evaluate
from codemoe.sandbox.rewards.detectors.tampering import SHADOWING_FILES
from codemoe.sandbox.rewards.static import NOT_LITERAL, call_name, parametrize_rows, parse, test_functions
from codemoe.sandbox.rewards.types import DEFAULT_TEST_PATTERNS, Probe, ProbeRun, RewardInput

__all__ = [
    "PROBE_FILE",
    "Point",
    "ProbePlan",
    "Prober",
    "neighbours",
    "probe_run",
    "same_value",
    "visible_points",
]

PROBE_FILE = "test_codemoe_probes.py"  # the generated module's name in the work dir (the repository root)
_REFERENCE_SCRIPT = "_codemoe_reference.py"
_MARK = "CODEMOE-REFERENCE-ANSWERS "  # the line of the reference run's stdout that holds its answers
_MAX_POINTS = 24  # points probed per task (the first ones, in file and line order)
_MAX_REPR = 2_000  # longest argument or answer (as repr) a probe carries
_CALL_S = 0.5  # the reference's time per call; slower draws are dropped


@dataclass(frozen=True)
class Point:
    """One call: ``module.function(*args)``. A visible point has ``anchor == ""``; a draw names its point."""

    id: str
    module: str
    function: str
    args: tuple
    where: str = ""  # "test_luhn.py:12" for a visible point
    anchor: str = ""
    edit: str = ""  # how a draw was made from its point (:func:`neighbours`)
    # a scripted point: a visible test that drives objects, as ``def _script(_record): ...`` recording the
    # values its asserts check (``function`` is the test's name, ``module`` and ``args`` empty)
    script: str = ""
    note: str = ""  # what a scripted draw changed: "30 -> 31"
    # how the visible test checks the call's value, which its draws are checked by too: ("eq",) compared
    # for equality, ("truth",) taken as true or false, ("approx", rel, abs) to pytest.approx's tolerance
    check: tuple = ("eq",)

    def call(self) -> str:
        """The call as a person would write it, shortened."""
        if self.script:
            text = f"{self.function}" + (f" with {self.note}" if self.note else "")
        else:
            text = f"{self.function}({', '.join(map(repr, self.args))})"
        return text if len(text) <= 120 else text[:117] + "..."


# -- 1. the points the visible tests check ---------------------------------------------------------


def _module_of(name: str, files: Mapping[str, str]) -> str | None:
    """``name`` when it is a module of the repository (``pkg/mod.py``, ``pkg/__init__.py``, ``src/...``)."""
    path = name.replace(".", "/")
    for root in ("", "src/"):
        if f"{root}{path}.py" in files or f"{root}{path}/__init__.py" in files:
            return name
    return None


def _imported_functions(tree: ast.Module, files: Mapping[str, str], is_test: Callable[[str], bool]
                        ) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """(local name -> (module, function)) for ``from mod import f [as g]``, and (alias -> module) for
    ``import mod [as m]``, of the repository's own non-test modules."""
    functions: dict[str, tuple[str, str]] = {}
    modules: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            module = _module_of(node.module, files)
            if module is None or is_test(module.replace(".", "/") + ".py"):
                continue
            for alias in node.names:
                if alias.name != "*" and (alias.name[:1].islower() or alias.name[:1] == "_"):
                    functions[alias.asname or alias.name] = (module, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                module = _module_of(alias.name, files)
                if module is not None and not is_test(module.replace(".", "/") + ".py"):
                    modules[alias.asname or alias.name] = module
    return functions, modules


def _constants(body: Sequence[ast.stmt], env: dict[str, Any]) -> dict[str, Any]:
    """Names bound once, in ``body``, to an expression :func:`evaluate` can compute from ``env``."""
    out = dict(env)
    for node in body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = evaluate(node.value, out)
            except Exception:  # not a constant (Unknown, or an expression that fails)
                out.pop(node.targets[0].id, None)
    return out


def _evaluator(env: dict[str, Any]) -> Callable[[ast.AST], Any]:
    """:func:`evaluate` in ``env`` for :func:`parametrize_rows`: NOT_LITERAL where it cannot."""
    def value(node: ast.AST) -> Any:
        try:
            return evaluate(node, env)
        except Exception:  # cases built by code (pytest.param, comprehensions): not read
            return NOT_LITERAL
    return value


def _is_test(is_test_file: Callable[[str], bool] | None) -> Callable[[str], bool]:
    """``is_test_file``, or the default test patterns' match."""
    return is_test_file or RewardInput(test_patterns=DEFAULT_TEST_PATTERNS).is_test_file


def _fits(value: Any) -> bool:
    """A value a probe can carry: a literal whose repr reads back as the same value, not too long."""
    try:
        text = repr(value)
    except Exception:
        return False
    if len(text) > _MAX_REPR:
        return False
    try:
        return same_value(ast.literal_eval(text), value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False


def visible_points(files: Mapping[str, str], is_test_file: Callable[[str], bool] | None = None) -> list[Point]:
    """The calls the visible tests in ``files`` make of the repository's functions with literal arguments,
    and, for a test that makes no such call (it builds objects and drives them), the test itself as a
    scripted point (:func:`_script_source`).

    Each distinct (function, arguments) or script once, in file and line order, at most :data:`_MAX_POINTS`.
    """
    is_test = _is_test(is_test_file)
    points: list[Point] = []
    seen: set[tuple[str, str, str]] = set()
    seen_scripts: set[str] = set()
    for path in sorted(files):
        if not (path.endswith(".py") and is_test(path)) or (tree := parse(files[path])) is None:
            continue
        functions, modules = _imported_functions(tree, files, is_test)
        if not any(_module_of(node.module or "", files) for node in tree.body
                   if isinstance(node, ast.ImportFrom) and not node.level) and not modules:
            continue  # the tests import nothing of the repository's
        env = _constants(tree.body, {})
        imports = [ast.unparse(node) for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))
                   and not any(a.name.split(".")[0] in ("pytest", "unittest") for a in node.names)
                   and not (isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "pytest")]
        for name, fn in test_functions(tree).items():
            rows = parametrize_rows(fn, _evaluator(env)) or [{}]  # cases it cannot read: the body alone
            calls = sorted((n for n in ast.walk(fn) if isinstance(n, ast.Call)), key=lambda n: (n.lineno, n.col_offset))
            if "." not in name and not any(_target(c, functions, modules) for c in calls):
                for row in rows:  # a test that drives objects: the whole test is the point
                    script = _script_source(fn, imports, row, {**env})
                    if script is not None and script not in seen_scripts:
                        seen_scripts.add(script)
                        points.append(Point(f"p{len(points)}", "", fn.name, (), f"{path}:{fn.lineno}", script=script))
                        if len(points) >= _MAX_POINTS:
                            return points
                continue
            parents = {id(child): node for node in ast.walk(fn) for child in ast.iter_child_nodes(node)}
            for row in rows:
                local = _constants(fn.body, {**env, **row})
                for call in calls:
                    target = _target(call, functions, modules)
                    if target is None or call.keywords or any(isinstance(a, ast.Starred) for a in call.args):
                        continue
                    check = _check_of(call, parents, local)
                    if check is None:  # the value is not what the test checks (sorted(f(x)), f(x)[0], f(x) alone)
                        continue
                    try:
                        args = tuple(evaluate(a, local) for a in call.args)
                    except Exception:  # an argument no literal gives
                        continue
                    if not args or not all(map(_fits, args)):
                        continue
                    key = (*target, repr(args))
                    if key in seen:
                        continue
                    seen.add(key)
                    points.append(Point(f"p{len(points)}", *target, args, f"{path}:{call.lineno}", check=check))
                    if len(points) >= _MAX_POINTS:
                        return points
    return points


_EQUAL_ASSERTS = frozenset({"assertEqual", "assertEquals", "assertListEqual", "assertTupleEqual", "assertDictEqual",
                            "assertSetEqual", "assertSequenceEqual", "assertMultiLineEqual", "assertNotEqual"})  # fmt: skip
_TRUTH_ASSERTS = frozenset({"assertTrue", "assertFalse"})


def _check_of(call: ast.Call, parents: dict[int, ast.AST], local: dict[str, Any]) -> tuple | None:
    """How a test checks ``call``'s value: compared (``==``, ``!=``, ``assertEqual``), to
    ``pytest.approx``'s tolerance, or as true or false (``assert f(x)``, ``assert not f(x)``,
    ``assertTrue``); None when it checks something made of it (``sorted(f(x)) == ...``,
    ``len(f(x))``) or nothing (a call whose value the test drops), where the reference's exact
    answer is more than the test asks of the code."""
    parent = parents.get(id(call))
    if isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not):
        parent = parents.get(id(parent))
        return ("truth",) if isinstance(parent, ast.Assert) else None
    if isinstance(parent, ast.Assert) and parent.test is call:
        return ("truth",)
    if isinstance(parent, ast.Compare) and len(parent.ops) == 1 and isinstance(parent.ops[0], (ast.Eq, ast.NotEq)):
        other = parent.comparators[0] if parent.left is call else parent.left
        if isinstance(other, ast.Call) and call_name(other).endswith("approx"):
            return _approx(other, local)
        return ("eq",)
    if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Attribute) and call in parent.args[:2]:
        if parent.func.attr in _EQUAL_ASSERTS:
            return ("eq",)
        if parent.func.attr in _TRUTH_ASSERTS and parent.args[0] is call:
            return ("truth",)
        if parent.func.attr in ("assertAlmostEqual", "assertNotAlmostEqual"):
            places = next((k.value for k in parent.keywords if k.arg == "places"), None)
            digits = evaluate(places, local) if places is not None else 7
            return ("approx", 0.0, 0.5 * 10.0 ** -digits) if isinstance(digits, int) else None
    return None


def _approx(node: ast.Call, local: dict[str, Any]) -> tuple | None:
    """``("approx", rel, abs)`` of a ``pytest.approx(expected, rel=..., abs=...)`` (pytest's defaults
    where not given); None for a tolerance the test computes."""
    values = {"rel": 1e-6, "abs": 1e-12}
    for keyword in node.keywords:
        if keyword.arg in values:
            try:
                value = evaluate(keyword.value, local)
            except Exception:
                return None
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                return None
            values[keyword.arg] = float(value)
    return ("approx", values["rel"], values["abs"])


def _target(call: ast.Call, functions: dict[str, tuple[str, str]], modules: dict[str, str]) -> tuple[str, str] | None:
    func = call.func
    if isinstance(func, ast.Name) and func.id in functions:
        return functions[func.id]
    named = isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in modules
    if named and (func.attr[:1].islower() or func.attr[:1] == "_"):  # a function, not a class
        return modules[func.value.id], func.attr
    return None


_SIMPLE = (ast.Assign, ast.AugAssign, ast.Expr, ast.Assert, ast.With, ast.For, ast.Pass)


def _literal_node(node: ast.AST) -> bool:
    """A literal written in the test: a number or string, or a container of them (not True, False, None)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float, str)) and not isinstance(node.value, bool)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return _literal_node(node.operand)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict)):
        try:
            ast.literal_eval(node)
            return True
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return False
    return False


class _Recording(ast.NodeTransformer):
    """A test body with each assert turned into ``_record(<what it checks>)`` and each
    ``with pytest.raises(...)`` into recording which exception (if any) its body raised."""

    def visit_Assert(self, node: ast.Assert) -> ast.stmt:
        test = node.test
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            test = test.operand
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            left, right = test.left, test.comparators[0]
            if _literal_node(right) or (isinstance(right, ast.Constant) and right.value in (True, False, None)):
                test = left
            elif _literal_node(left) or (isinstance(left, ast.Constant) and left.value in (True, False, None)):
                test = right
        return ast.Expr(ast.Call(ast.Name("_record", ast.Load()), [test], []))

    def visit_With(self, node: ast.With) -> ast.stmt:
        body = [self.visit(stmt) for stmt in node.body]
        if len(node.items) == 1 and ast.unparse(node.items[0].context_expr.func if isinstance(
                node.items[0].context_expr, ast.Call) else node.items[0].context_expr).endswith("raises"):  # fmt: skip
            handler = ast.parse("try:\n    pass\nexcept Exception as _error:\n    _record(type(_error).__name__)").body[0]
            handler.body = [*body, ast.Expr(ast.Call(ast.Name("_record", ast.Load()), [ast.Constant("no exception")], []))]
            return handler
        node.body = body
        return node


def _script_source(fn: ast.FunctionDef | ast.AsyncFunctionDef, imports: list[str], row: dict[str, Any],
                   env: dict[str, Any]) -> str | None:
    """``def _script(_record): ...``: the test's imports, its parametrize row and module constants it
    names bound, and its body with every check recorded (:class:`_Recording`); None for a test that
    takes fixtures, is not straight-line code, or checks nothing."""
    if isinstance(fn, ast.AsyncFunctionDef) or any(a.arg not in row for a in [*fn.args.posonlyargs, *fn.args.args]):
        return None
    if fn.args.vararg or fn.args.kwarg or fn.args.kwonlyargs:
        return None
    for node in ast.walk(ast.Module(fn.body, [])):
        if isinstance(node, ast.stmt) and not isinstance(node, _SIMPLE):
            return None
        if isinstance(node, ast.With) and not all(ast.unparse(i.context_expr).startswith("pytest.raises")
                                                  for i in node.items):  # fmt: skip
            return None
    if not any(isinstance(n, ast.Assert) for n in ast.walk(ast.Module(fn.body, []))):
        return None
    named = {n.id for n in ast.walk(ast.Module(fn.body, [])) if isinstance(n, ast.Name)}
    binds = [f"{k} = {v!r}" for k, v in {**{k: v for k, v in env.items() if k in named}, **row}.items()
             if _fits(v)]  # fmt: skip
    if len(binds) < len([k for k in {**{k: v for k, v in env.items() if k in named}, **row}]):
        return None  # a constant or row value a script cannot carry
    body = [_Recording().visit(stmt) for stmt in ast.parse(ast.unparse(ast.Module(fn.body, []))).body]
    text = "\n".join(["def _script(_record):", *(f"    {line}" for line in [*imports, *binds]),
                       *("    " + line for stmt in body for line in ast.unparse(stmt).splitlines())])
    try:
        compile(text, "<script>", "exec")
    except SyntaxError:
        return None
    return text


def _slots(tree: ast.AST) -> list[tuple[ast.Call | ast.For, int]]:
    """(node, index) of each literal a script hands the code: a call's argument (index) or a ``for``
    loop's values (-1); the ``_record`` calls are the checks, not inputs."""
    out: list[tuple[ast.Call | ast.For, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id == "_record"):
            out += [(node, i) for i, arg in enumerate(node.args) if _literal_node(arg)]
        elif isinstance(node, ast.For) and _literal_node(node.iter):
            out.append((node, -1))
    return out


def _script_draws(point: Point, count: int, *, seed: int = 0) -> list[tuple[str, str, str]]:
    """Up to ``count`` (script, edit, note): ``point.script`` with one or two of the literals it hands
    the code under test (call arguments, loop values) edited as :func:`neighbours` edits arguments."""
    digest = hashlib.sha256(f"{seed}:{point.script}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    if not _slots(ast.parse(point.script)):
        return []
    taken = {point.script}
    out: list[tuple[str, str, str]] = []
    for _ in range(count * 6):
        edits, notes = [], []
        changed = ast.parse(point.script)
        slots = _slots(changed)
        for _ in range(1 if rng.random() < 0.6 else 2):
            k = rng.randrange(len(slots))
            site, i = slots[k]
            node = site.iter if i < 0 else site.args[i]
            value = ast.literal_eval(node)
            new, kind = _edit(rng, value)
            replacement = ast.parse(repr(new), mode="eval").body
            if i < 0:
                site.iter = replacement
            else:
                site.args[i] = replacement
            edits.append(f"{k}:{kind}")
            notes.append(f"{value!r} -> {new!r}")
        text = ast.unparse(changed)
        if text in taken:
            continue
        taken.add(text)
        out.append((text, "+".join(edits), ", ".join(notes)))
        if len(out) >= count:
            break
    return out


# -- 2. inputs beside a point ----------------------------------------------------------------------


def _similar_char(rng: random.Random, c: str) -> str:
    if c.isdigit():
        return rng.choice("0123456789".replace(c, ""))
    if c.isalpha() and c.isascii():
        pool = "abcdefghijklmnopqrstuvwxyz"
        pick = rng.choice(pool.replace(c.lower(), ""))
        return pick.upper() if c.isupper() else pick
    if c.isspace():
        return c
    return rng.choice(".,-_ /:;!?".replace(c, "") or ".")


def _edit(rng: random.Random, value: Any, depth: int = 0) -> tuple[Any, str]:
    """One small edit of ``value`` that keeps its type, and its kind ("digit", "swap", "item" ...);
    the same value back when none applies."""
    if isinstance(value, bool) or value is None or depth > 4:
        return value, "none"
    if isinstance(value, int):
        step = rng.choice([1, 1, 2, 10] + ([100] if abs(value) >= 100 else []) + ([1000] if abs(value) >= 1000 else []))
        if abs(value) >= 10 and rng.random() < 0.3:  # a digit changed, the length kept
            digits = list(str(abs(value)))
            i = rng.randrange(1 if len(digits) > 1 else 0, len(digits))
            digits[i] = _similar_char(rng, digits[i])
            return int("".join(digits)) * (-1 if value < 0 else 1), "digit"
        moved = value + rng.choice((-1, 1)) * step
        return (moved if (moved >= 0) == (value >= 0) else value - moved), "step"
    if isinstance(value, float):
        if not math.isfinite(value):
            return value, "none"
        return value + rng.choice((-1, 1)) * rng.choice((0.5, 1.0, abs(value) * 0.1 or 0.25)), "step"
    if isinstance(value, str):
        if not value:
            return rng.choice("ab1 "), "insert"
        i = rng.randrange(len(value))
        kind = rng.random()
        if kind < 0.45:
            return value[:i] + _similar_char(rng, value[i]) + value[i + 1:], "char"
        if kind < 0.6 and len(value) > 1:
            return value[:i] + value[i + 1:], "delete"
        if kind < 0.75:
            return value[:i] + value[i] + value[i:], "double"
        if kind < 0.9 and len(value) > 1:
            j = min(i + 1, len(value) - 1)
            return (value[:i] + value[j] + value[i + 1:j] + value[i] + value[j + 1:] if j > i else value[::-1]), "swap"
        return value[:i] + _similar_char(rng, value[i]) + value[i:], "insert"
    if isinstance(value, (list, tuple)):
        items = list(value)
        kind = rng.random()
        if not items:
            return (type(value)([0]), "insert") if rng.random() < 0.5 else (value, "none")
        i = rng.randrange(len(items))
        if kind < 0.5:
            items[i] = _edit(rng, items[i], depth + 1)[0]
            op = "item"
        elif kind < 0.65 and len(items) > 1:
            del items[i]
            op = "delete"
        elif kind < 0.8:
            items.insert(rng.randrange(len(items) + 1), _edit(rng, items[i], depth + 1)[0])
            op = "insert"
        elif len(items) > 1:
            j = rng.randrange(len(items))
            items[i], items[j] = items[j], items[i]
            op = "swap"
        else:
            items.append(items[i])
            op = "insert"
        return type(value)(items), op
    if isinstance(value, dict):
        if not value:
            return value, "none"
        keys = list(value)
        key = rng.choice(keys)
        out = dict(value)
        if rng.random() < 0.7:
            out[key] = _edit(rng, value[key], depth + 1)[0]
            return out, "item"
        if isinstance(key, str):
            out[_edit(rng, key, depth + 1)[0]] = out.pop(key)
            return out, "key"
        if len(out) > 1:
            del out[key]
            return out, "delete"
        return out, "none"
    if isinstance(value, (set, frozenset)):
        items = sorted(value, key=repr)
        if not items:
            return value, "none"
        i = rng.randrange(len(items))
        items[i] = _edit(rng, items[i], depth + 1)[0]
        return type(value)(items), "item"
    return value, "none"


def neighbours(point: Point, count: int, *, seed: int = 0, avoid: Sequence[tuple] = ()) -> list[tuple[tuple, str]]:
    """Up to ``count`` distinct (arguments, edit) pairs: argument tuples one or two edits of one
    argument from ``point.args`` (``edit`` names them: ``"0:swap"``, ``"1:digit+1:step"``), none equal
    to ``point.args`` or to any tuple in ``avoid``. The same for the same point and seed."""
    digest = hashlib.sha256(f"{seed}:{point.module}.{point.function}{point.args!r}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    taken = {repr(point.args), *map(repr, avoid)}
    out: list[tuple[tuple, str]] = []
    for _ in range(count * 6):
        args = list(point.args)
        edits = []
        for _ in range(1 if rng.random() < 0.6 else 2):
            i = rng.randrange(len(args))
            args[i], kind = _edit(rng, args[i])
            edits.append(f"{i}:{kind}")
        draw = tuple(args)
        key = repr(draw)
        if key in taken or not _fits(draw):
            continue
        taken.add(key)
        out.append((draw, "+".join(edits)))
        if len(out) >= count:
            break
    return out


# -- strict comparison, the same on both sides ----------------------------------------------------

_SAME_SOURCE = '''
def same_value(a, b):
    """Strict equality: the same types all the way down (True is not 1), floats to 1e-9."""
    if type(a) is not type(b):
        return False
    if type(a) is float:
        return a == b or abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))
    if type(a) in (list, tuple):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if type(a) is dict:
        return len(a) == len(b) and all(k in b and same_value(v, b[k]) for k, v in a.items())
    if type(a) in (set, frozenset):
        return len(a) == len(b) and all(type(x) in (int, str, bytes, bool, type(None), tuple) for x in a) and a == b
    if type(a) in (int, str, bytes, bool, type(None)):
        return a == b
    return False
'''
_namespace: dict[str, Any] = {}
# the one source of the comparison: the generated probe module holds the same text
exec(compile(_SAME_SOURCE, "<codemoe.sandbox.rewards.probes>", "exec"), _namespace)
same_value: Callable[[Any, Any], bool] = _namespace["same_value"]


# -- 3. the plan: points and draws the reference answered ------------------------------------------


@dataclass(frozen=True)
class ProbePlan:
    """What a task's probes check: every kept point and draw with the reference's answer (as repr)."""

    points: tuple[Point, ...] = ()
    answers: Mapping[str, str] = field(default_factory=dict)  # point id -> repr of the reference's answer
    same: frozenset[str] = frozenset()  # draws whose answer is their point's

    def __bool__(self) -> bool:
        return bool(self.points)

    def test_module(self) -> str:
        """The trusted pytest module that checks every kept point and draw."""
        imports = sorted({(p.module, p.function) for p in self.points if not p.script})
        cases = [
            f"    {p.id!r}: ({_alias(p)}, {p.args!r}, {self.answers[p.id]}, {p.check!r}),"
            for p in self.points
        ]
        return "\n".join([
            '"""Generated by codemoe: the visible tests\' calls and calls beside them, answered by the task\'s reference."""',
            "import pytest",
            *(f"from {module} import {function} as {_alias_name(module, function)}" for module, function in imports),
            _SAME_SOURCE,
            _SCRIPTED_SOURCE,
            *_script_defs(self.points),
            "CASES = {",
            *cases,
            "}",
            "",
            "",
            "@pytest.fixture",
            "def answer(request):",
            "    function, args = CASES[request.param][:2]",
            "    return function(*args)  # an exception here is the test's error: an input the change refuses",
            "",
            "",
            "@pytest.mark.parametrize(\"answer\", list(CASES), indirect=True)",
            "def test_point(answer, request):",
            "    expected, check = CASES[request.node.callspec.params[\"answer\"]][2:]  # read once the call has returned",
            "    if check[0] == \"truth\":  # as the visible tests check it",
            "        assert bool(answer) == bool(expected)",
            "    elif check[0] == \"approx\" and isinstance(expected, float):",
            "        assert answer == pytest.approx(expected, rel=check[1], abs=check[2])",
            "    else:",
            "        assert same_value(answer, expected) or answer == expected",
            "",
        ])

    def outcome_id(self, point: Point) -> str:
        return f"{PROBE_FILE}::test_point[{point.id}]"


def _alias_name(module: str, function: str) -> str:
    return f"_f_{hashlib.sha1(f'{module}.{function}'.encode()).hexdigest()[:10]}"


def _alias(point: Point) -> str:
    if point.script:
        return f"_scripted(_s_{point.id})"
    return _alias_name(point.module, point.function)


_SCRIPTED_SOURCE = '''
def _scripted(script):
    """A scripted point as a call: the values its checks saw, in order."""
    def run():
        seen = []
        script(seen.append)
        return seen
    return run
'''


def _script_defs(points: Sequence[Point]) -> list[str]:
    """Each scripted point's function, named ``_s_<id>``."""
    return [p.script.replace("def _script(", f"def _s_{p.id}(", 1) + "\n" for p in points if p.script]


def _reference_script(candidates: list[Point]) -> str:
    imports = sorted({(p.module, p.function) for p in candidates if not p.script})
    lines = [
        "import ast, importlib, json, signal",
        _SCRIPTED_SOURCE,
        *_script_defs(candidates),
        "def _alarm(signum, frame):",
        "    raise TimeoutError",
        "signal.signal(signal.SIGALRM, _alarm)",
        "functions = {}",
        f"for module, name in {imports!r}:",
        "    try:",
        "        functions[(module, name)] = getattr(importlib.import_module(module), name)",
        "    except Exception:",
        "        pass",
        *(f"functions[({p.id!r}, '')] = _scripted(_s_{p.id})" for p in candidates if p.script),
        f"CASES = {[(p.id, p.id if p.script else p.module, p.function if not p.script else '', repr(p.args)) for p in candidates]!r}",
        "answers = {}",
        "for pid, module, name, args in CASES:",
        "    function = functions.get((module, name))",
        "    if function is None:",
        "        continue",
        "    try:",
        f"        signal.setitimer(signal.ITIMER_REAL, {_CALL_S})",
        "        value = function(*ast.literal_eval(args))",
        "        signal.setitimer(signal.ITIMER_REAL, 0)",
        "        text = repr(value)",
        f"        if len(text) <= {_MAX_REPR}:",
        "            answers[pid] = text",
        "    except BaseException:",
        "        signal.setitimer(signal.ITIMER_REAL, 0)",
        f"print({_MARK!r} + json.dumps(answers))",
        "",
    ]
    return "\n".join(lines)


def _read_answers(stdout: str) -> dict[str, Any]:
    for line in reversed(stdout.splitlines()):
        if line.startswith(_MARK):
            try:
                raw = json.loads(line[len(_MARK):])
            except (ValueError, RecursionError):  # not JSON, or nested past the stack
                return {}
            out = {}
            for pid, text in raw.items() if isinstance(raw, dict) else ():
                try:
                    value = ast.literal_eval(text)
                except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                    continue
                if _fits(value):
                    out[str(pid)] = value
            return out
    return {}


def _plan(points: list[Point], draws: list[Point], answers: dict[str, Any], same: int, other: int) -> ProbePlan:
    kept: list[Point] = []
    same_ids: set[str] = set()
    for point in points:
        if point.id not in answers:
            continue
        kept.append(point)
        mine = [d for d in draws if d.anchor == point.id and d.id in answers]
        alike = [d for d in mine if same_value(answers[d.id], answers[point.id])][:same]
        unlike = [d for d in mine if not same_value(answers[d.id], answers[point.id])][:other]
        kept += alike + unlike
        same_ids.update(d.id for d in alike)
    if not any(p.anchor for p in kept):
        return ProbePlan()
    return ProbePlan(tuple(kept), {p.id: repr(answers[p.id]) for p in kept}, frozenset(same_ids))


class Prober:
    """Plans probes from a task's reference and turns a change's probe run into a :class:`ProbeRun`.

    ``same``/``other``: draws kept per point whose reference answer is / is not the point's own;
    ``draws``: inputs drawn per point for the reference to answer (most are dropped); ``seed`` picks
    the draws.
    """

    def __init__(self, *, same: int = 6, other: int = 6, draws: int = 96, seed: int = 0,
                 timeout_s: float = 30.0) -> None:
        if same < 1 or other < 0 or draws < same:
            raise ValueError(f"probes: same >= 1, other >= 0 and draws >= same, got same={same} other={other} draws={draws}")
        self.same, self.other, self.draws, self.seed, self.timeout_s = same, other, draws, seed, timeout_s

    def reference_request(self, visible_files: Mapping[str, str], reference_files: Mapping[str, str],
                          is_test_file: Callable[[str], bool] | None = None, *, id: str = "",
                          env: Mapping[str, str] | None = None) -> tuple[Any, list[Point], list[Point]]:
        """(request, points, draws): the sandboxed run in which the reference answers the visible
        points and the draws beside them; None for the request when the tests have no points."""
        from codemoe.sandbox.api import ExecutionRequest, Limits

        points = visible_points(visible_files, is_test_file)
        if not points:
            return None, [], []
        draws: list[Point] = []
        for point in points:
            if point.script:
                for k, (script, edit, note) in enumerate(_script_draws(point, self.draws, seed=self.seed)):
                    draws.append(Point(f"{point.id}n{k}", "", point.function, (), anchor=point.id, edit=edit,
                                       script=script, note=note))
                continue
            avoid = [p.args for p in points if (p.module, p.function) == (point.module, point.function)]
            for k, (args, edit) in enumerate(neighbours(point, self.draws, seed=self.seed, avoid=avoid)):
                draws.append(Point(f"{point.id}n{k}", point.module, point.function, args, anchor=point.id, edit=edit,
                                   check=point.check))
        is_test = _is_test(is_test_file)
        files = {p: t for p, t in reference_files.items() if not is_test(p)}
        files[_REFERENCE_SCRIPT] = _reference_script(points + draws)
        limits = Limits(timeout_s=self.timeout_s, cpu_s=self.timeout_s)
        request = ExecutionRequest(files=files, command=["python", _REFERENCE_SCRIPT], limits=limits,
                                   id=id or "probes:reference", env=dict(env or {}))
        return request, points, draws

    def plans(self, tasks: Sequence[tuple[Mapping[str, str], Mapping[str, str]]], executor: Any,
              is_test_file: Callable[[str], bool] | None = None, *, env: Mapping[str, str] | None = None) -> list[ProbePlan]:
        """One plan per (visible files, reference files), the reference runs batched on ``executor``
        (``env``: added to their environment, a task's ``PYTHONPATH=src``)."""
        staged = [self.reference_request(v, r, is_test_file, id=f"probes:reference:{i}", env=env)
                  for i, (v, r) in enumerate(tasks)]
        requests = [s[0] for s in staged if s[0] is not None]
        results = iter(executor.run_batch(requests) if requests else [])
        out = []
        for request, points, draws in staged:
            if request is None:
                out.append(ProbePlan())
                continue
            result = next(results)
            answers = _read_answers(result.stdout) if result.status == "passed" else {}
            out.append(_plan(points, draws, answers, self.same, self.other))
        return out

    def request(self, plan: ProbePlan, files_after: Mapping[str, str], is_test_file: Callable[[str], bool] | None = None,
                *, id: str = "", env: Mapping[str, str] | None = None) -> Any:
        """The graded pytest run of ``plan``'s module against the change's source files (its tests,
        conftest and pytest configuration left out); ``env`` is added to its environment."""
        from codemoe.sandbox.api import ExecutionRequest, Limits

        is_test = _is_test(is_test_file)
        files = {p: t for p, t in files_after.items() if not is_test(p) and p.rsplit("/", 1)[-1] not in SHADOWING_FILES}
        files[PROBE_FILE] = plan.test_module()
        # the visible tests' calls get timeout_s in the visible run; the probe run makes several times
        # as many calls (the points and their draws), so it gets that much more time: honest code that is
        # slower than the reference but passes its tests in time is not a run that "did not finish"
        points = max(1, sum(1 for p in plan.points if not p.anchor))
        timeout = self.timeout_s * max(1.0, len(plan.points) / points)
        limits = Limits(timeout_s=timeout, cpu_s=timeout)
        return ExecutionRequest(files=files, runner="pytest", command=[PROBE_FILE], limits=limits, id=id or "probes",
                                graded=True, trusted=[PROBE_FILE], env=dict(env or {}),
                                private=[PROBE_FILE])  # its answers are not in the work dir




def probe_run(plan: ProbePlan, result: Any) -> ProbeRun | None:
    """The :class:`ProbeRun` of ``plan`` from its execution's result (None for an empty plan)."""
    if not plan:
        return None
    probes = []
    for point in plan.points:
        outcome = result.tests.get(plan.outcome_id(point), "") if result is not None else ""
        probes.append(Probe(point.id, point.call(), point.anchor, point.id in plan.same,
                            str(getattr(outcome, "value", outcome) or "missing"), point.edit))
    status = getattr(result, "status", "error") if result is not None else "error"
    reason = (getattr(result, "reason", "") or "") if result is not None else "not run"
    return ProbeRun(tuple(probes), str(status), str(reason).strip()[:300])
