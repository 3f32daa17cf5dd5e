"""Comparisons in a test that the code under test cannot make lie.

pytest runs the tests in the process that imports the code under test, and a test's ``assert
add(2, 3) == 5`` asks the *returned object* whether it equals 5. An object whose ``__eq__``
answers True whatever it is compared with passes every such assert, without naming anything of
the runner: ``class R(int): __eq__ = lambda s, o: o == o``, ``unittest.mock.ANY``,
``pytest.approx(0, abs=math.inf)``, a method set with ``setattr`` or by ``type()``, one that
answers True to ints only, or one that takes the first value it is compared with as its own.

So every comparison written in a test module (``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``in``,
``not in``, and the unittest ``assertEqual`` family) goes through :func:`compare`, which the pytest
runner puts in place when pytest rewrites the test module's asserts (:func:`install`); a graded run's
trusted helper modules beside the tests are rewritten too (:func:`rewrite_helpers`):

- **plain values compare as they are.** Exact ``int``, ``float``, ``str``, ``bytes``, ``bool``,
  ``None``, ``complex`` and lists, tuples, dicts and sets of them cannot lie: their comparison is
  the interpreter's. Almost every comparison in a test takes this path, at the cost of a call.
- **a subclass of a builtin value is compared as its value too**: ``int.__index__``,
  ``str.__str__``, ``dict.items`` ... read the value the base type holds, whatever the subclass
  overrides; a comparison that says True where the values say False is a lie.
- **any other object that comes from running code is asked questions it cannot tell from the
  test's**, before and after the test's own, a number of rounds drawn per comparison: does it
  equal an object of a class made for this execution, or a value next to the one the test
  expects (``5`` -> ``5 +- up to 1000``, ``"abc"`` -> ``"abcq"``, as plausible as the test's), is it
  less than itself, does it contain an object it has never seen? An honest object says no (or yes
  to the value next to the test's only when it is not the test's: a wrong result); one that says
  yes is lying, and the test fails with :class:`ForgedComparison`, which the report carries to
  the verdict (``forged comparison``: the reward recipes void their test terms). Code that counts
  calls to lie only at the test's cannot know which call that is.
- **what the test wrote itself is not asked**: an operand built only from literals, builtins and
  names imported from the standard library or pytest (``{"id": ANY}``, ``pytest.approx(0.3)``, a
  variable assigned only such values) is the test's expectation, wildcards included; what comes
  from a call into the repository, another variable or a fixture is asked.

A forgery that first disables this (rebinds :func:`compare`, restores pytest's rewriter) disables
it for the canary module too, whose liar test must fail (:mod:`codemoe.sandbox.canary`). What
remains is named in ``docs/reliability.md``.
"""

from __future__ import annotations

import ast
import importlib.util
import itertools
import math
import operator
import os
import random
import sys
import types
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["ForgedComparison", "check_call", "compare", "install", "instrument", "reseed", "rewrite_helpers"]

EQ, NE, LT, LE, GT, GE, IN, NOT_IN = range(8)
SYMBOLS = ("==", "!=", "<", "<=", ">", ">=", "in", "not in")
_AST_OPS = {ast.Eq: EQ, ast.NotEq: NE, ast.Lt: LT, ast.LtE: LE, ast.Gt: GT, ast.GtE: GE, ast.In: IN, ast.NotIn: NOT_IN}
_OPS: tuple[Callable[[Any, Any], Any], ...] = (
    operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge,
    lambda a, b: a in b, lambda a, b: a not in b,
)  # fmt: skip
_ATOMS = frozenset({int, float, complex, str, bytes, bool, type(None)})
# what a builtin subclass's value is, read with the base type's own method (the subclass overrides nothing here)
_BASE_VALUE: tuple[tuple[type, Callable[[Any], Any]], ...] = (
    (int, int.__index__), (float, float.__float__), (complex, complex.__complex__),
    (str, str.__str__), (bytes, bytes.__bytes__),
)  # fmt: skip
_COMPARISONS = ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__contains__")
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by Python code, not a C type
_DEPTH = 8
_NO = object()  # "has no plain value"
# names a test may build its own expectations from, besides literals
_BUILTIN_CONSTRUCTORS = frozenset({"int", "float", "complex", "str", "bytes", "bool", "tuple", "list", "dict", "set",
                                   "frozenset", "range", "bytearray", "slice", "object"})  # fmt: skip
_TRUSTED_TOP = frozenset({"pytest", "_pytest", "numpy"})


class ForgedComparison(AssertionError):
    """A comparison in a test was answered by an object that says what it is not."""


class _State:
    """What :func:`reseed` draws for each execution: the probes' class, far values and rounds."""

    sentinel: type = object
    far_int = 2**62 + 7919
    tag = "\x00codemoe"
    rng = random.Random(0)


def reseed() -> None:
    """Draw this execution's probe class, far values and random rounds (in the child, before any test)."""
    seed = os.urandom(16)
    rng = random.Random(seed)
    name = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(8))
    _State.sentinel = type(f"_{name.capitalize()}", (), {"__slots__": (), "__module__": "__main__"})
    _State.far_int = 2**62 + rng.getrandbits(40)
    _State.tag = "\x00" + "".join(rng.choice("0123456789abcdef") for _ in range(12))
    _State.rng = rng


# ---------------------------------------------------------------------------------------------
# values
# ---------------------------------------------------------------------------------------------


def _plain(x: Any, depth: int = 0) -> bool:
    """Whether ``x`` is a plain value: exact builtin atoms, and exact containers of them."""
    t = type(x)
    if t in _ATOMS:
        return True
    if depth >= _DEPTH:
        return False
    if t is list or t is tuple or t is set or t is frozenset:
        return all(_plain(e, depth + 1) for e in x)
    if t is dict:
        return all(_plain(k, depth + 1) and _plain(v, depth + 1) for k, v in x.items())
    return False


def _defining_class(t: type, name: str) -> type | None:
    for klass in t.__mro__:
        if name in klass.__dict__:
            return klass
    return None


_BUILTIN_BASES = frozenset({object, int, float, complex, str, bytes, bool, list, tuple, dict, set, frozenset})


def _library_class(klass: type) -> bool:
    """Whether ``klass`` says it is the standard library's, pytest's or numpy's (a class that claims
    so falsely is still asked questions: only recomputing its answer from its value is skipped)."""
    module = getattr(klass, "__module__", None)
    top = module.split(".")[0] if isinstance(module, str) else ""
    return top in sys.stdlib_module_names or top in _TRUSTED_TOP


def _canon(x: Any, depth: int = 0) -> Any:
    """The plain value ``x`` holds (a builtin subclass read through its base type), or ``_NO``."""
    t = type(x)
    if t in _ATOMS:
        return x
    if depth >= _DEPTH:
        return _NO
    if t not in (list, tuple, dict, set, frozenset):
        for name in _COMPARISONS:
            klass = _defining_class(t, name)
            if klass is not None and klass not in _BUILTIN_BASES and _library_class(klass):
                # a library's own comparison (Counter ignores zero counts, mock's call two forms of
                # a call): its answer is asked about, not recomputed from the value
                return _NO
    for base, value in _BASE_VALUE:
        if issubclass(t, base):  # the real type: ``isinstance`` would believe a ``__class__`` property
            return value(x)
    if issubclass(t, (list, tuple)):
        items = [_canon(e, depth + 1) for e in (list.__iter__(x) if issubclass(t, list) else tuple.__iter__(x))]
        if any(e is _NO for e in items):
            return _NO
        return items if issubclass(t, list) else tuple(items)
    if issubclass(t, dict):
        pairs = [(_canon(k, depth + 1), _canon(v, depth + 1)) for k, v in dict.items(x)]
        if any(k is _NO or v is _NO for k, v in pairs):
            return _NO
        try:
            return dict(pairs)
        except TypeError:
            return _NO
    if issubclass(t, (set, frozenset)):
        items = [_canon(e, depth + 1) for e in (set.__iter__(x) if issubclass(t, set) else frozenset.__iter__(x))]
        if any(e is _NO for e in items):
            return _NO
        try:
            return set(items) if issubclass(t, set) else frozenset(items)
        except TypeError:
            return _NO
    return _NO


def _changed(v: Any, atom: Callable[[Any], Any]) -> Any:
    """Plain ``v`` with every atom replaced by ``atom(atom_value)`` (containers keep their shape and
    keys; an empty one gets a stranger), or a stranger where that would equal ``v`` after all."""
    t = type(v)
    sentinel = _State.sentinel
    if t in _ATOMS:
        other = atom(v) if t is not type(None) else sentinel()
    elif t is list or t is tuple:
        other = t(_changed(e, atom) for e in v) if v else t((sentinel(),))
    elif t is dict:
        other = {k: _changed(e, atom) for k, e in v.items()} if v else {sentinel(): sentinel()}
    elif t is set or t is frozenset:
        try:
            other = t(_changed(e, atom) for e in v) if v else t((sentinel(),))
        except TypeError:
            other = t((sentinel(),))
    else:
        return sentinel()
    try:
        same = bool(other == v)
    except Exception:  # (plain values: only a float overflow or the like)
        same = True
    return sentinel() if same else other


def _far_atom(v: Any) -> Any:
    t = type(v)
    if t is bool:
        return not v
    if t is int:
        return v + _State.far_int
    if t is float:
        return v * 2.0 + 1.0e9 + 0.375 if math.isfinite(v) else 0.375
    if t is complex:
        return v * 2.0 + complex(1.0e9 + 0.375, 0.625)
    return v + (_State.tag if t is str else _State.tag.encode())


def _near_atom(v: Any) -> Any:
    rng = _State.rng
    t = type(v)
    if t is bool:
        return not v
    if t is int:
        return v + rng.choice((-1, 1)) * rng.randrange(1, 1000)
    if t is float:
        return v + rng.choice((-1, 1)) * rng.randrange(1, 1000) * 1e-3 * max(1.0, abs(v)) if math.isfinite(v) else 1.0
    if t is complex:
        return v + complex(rng.randrange(1, 1000) * 1e-3 * max(1.0, abs(v)), 0.0)
    if t is str:
        return v + rng.choice("abcdefghijklmnopqrstuvwxyz")
    return v + bytes([rng.randrange(97, 123)])


def _far(v: Any) -> Any:
    """A plain value that no honest object equal to plain ``v`` also equals (2**62 away: no result is it)."""
    return _changed(v, _far_atom)


def _near(v: Any) -> Any:
    """A plain value next to plain ``v`` that no honest object equal to ``v`` also equals, and that
    looks like a result (an int a few hundred away, a string one letter longer): code cannot tell
    it from the test's value by its size."""
    return _changed(v, _near_atom)


def _above(v: Any) -> Any:
    """A plain value above plain ``v`` in its order (``_NO`` where there is none to take)."""
    t = type(v)
    if t is int or t is bool:
        return int(v) + _State.far_int
    if t is float and math.isfinite(v):
        return v + abs(v) + 1.0e9
    if t is str:
        return v + "\U0010ffff\U0010ffff"
    return _NO


def _below(v: Any) -> Any:
    t = type(v)
    if t is int or t is bool:
        return int(v) - _State.far_int
    if t is float and math.isfinite(v):
        return v - abs(v) - 1.0e9
    if t is str:
        return _NO  # nothing is below "": a string above v is never below ""; asked with "" instead
    return _NO


# ---------------------------------------------------------------------------------------------
# the check
# ---------------------------------------------------------------------------------------------


def _says_yes(op: int, a: Any, b: Any) -> bool:
    """Whether ``a OP b`` answers truthy (an error or an answer that is no truth value: no)."""
    try:
        answer = _OPS[op](a, b)
        return answer if type(answer) is bool else bool(answer)
    except Exception:  # (honest objects may refuse a comparison with a stranger)
        return False


def _forged(x: Any, question: str) -> ForgedComparison:
    return ForgedComparison(
        f"the object {type(x).__qualname__} under test answered yes to {question}: it says what it is not, "
        "so no assert on it proves anything (a comparison that ignores what it is compared with)"
    )


def _probe(op: int, x: Any, left: bool, other_plain: Any) -> Any:
    """Questions with one honest answer, whatever the test's comparison: ``x`` is the operand that
    came from running code, ``left`` whether it is the left one, ``other_plain`` the other
    operand's plain value (or ``_NO``). Returns the value near the test's that ``x`` said it
    equals (a lie if it also equals the test's: decided after the test's comparison), or ``_NO``."""
    __tracebackhide__ = True  # pytest shows the test's line, not this module's
    stranger = _State.sentinel()
    if op in (IN, NOT_IN) and not left:  # x is the container
        if hasattr(type(x), "__next__"):
            return _NO  # an iterator: asking would use up what the test's own question reads
        if _says_yes(IN, stranger, x):
            raise _forged(x, "containing an object made for this test run")
        return _NO
    if _says_yes(EQ, x, stranger):
        raise _forged(x, "equal to an object made for this test run")
    if op == NE and other_plain is not _NO:
        far = _far(other_plain)
        if _says_yes(EQ, x, far):
            raise _forged(x, f"equal to {_short(far)}, a value no result is")
    if op in (IN, NOT_IN) and type(other_plain) in (list, tuple, set, frozenset, dict) and other_plain:  # x: the member
        far = [_far(e) for e in other_plain]  # a dict's keys
        if _says_yes(IN, x, far):
            raise _forged(x, f"being in {_short(far)}, values no result is")
    if op in (LT, GT) and _says_yes(op, x, x):
        raise _forged(x, f"'{SYMBOLS[op]}' itself")
    if op in (LE, GE) and _says_yes(op, x, stranger):
        raise _forged(x, f"'{SYMBOLS[op]}' an object made for this test run")
    if op == EQ and other_plain is not _NO:
        near = _near(other_plain)
        if _says_yes(EQ, x, near):
            return near
    return _NO


def _check_claim(op: int, a: Any, b: Any, ca: Any, cb: Any, suspects: list[tuple[Any, bool]]) -> None:
    """The comparison said yes: is that what the plain values say, and does no suspect contradict it?"""
    __tracebackhide__ = True  # pytest shows the test's line, not this module's
    if ca is not _NO and cb is not _NO:
        try:
            honest = bool(_OPS[op](ca, cb))
        except Exception:  # (e.g. a subclass that orders against a type its base does not)
            honest = True
        if not honest:
            liar = a if not _plain(a) else b
            raise _forged(liar, f"'{_short(ca)} {SYMBOLS[op]} {_short(cb)}', which its value is not")
        return
    for x, left in suspects:
        other = cb if left else ca
        if op == NE and _says_yes(NE, x, x):
            raise _forged(x, "being different from itself")
        if op in (LT, LE, GT, GE) and other is not _NO:
            below = (op in (LT, LE)) == left  # the claim puts x below the other operand
            bound = _above(other) if below else _below(other)
            if bound is _NO and not below and type(other) is str:
                bound, question = "", "being below the empty string"
            else:
                question = f"being {'above' if below else 'below'} {_short(bound)} too"
            if bound is not _NO and _says_yes(GT if below else LT, x, bound):
                raise _forged(x, question)


def _truth(result: Any) -> tuple[bool | None, Any]:
    """(what the answer means to an assert, the answer to hand on): an answer of a Python class is
    turned into the bool it was audited as, so it cannot say one thing here and another there."""
    if type(result) is bool:
        return result, result
    try:
        truth = bool(result)
    except Exception:  # (an array of several values: the test reads it, e.g. with .all())
        return None, result
    return truth, (truth if type(result).__flags__ & _HEAPTYPE else result)


def compare(op: int, a: Any, b: Any, dynamic: int = 3) -> Any:
    """``a OP b`` as the test wrote it, unless an operand lies (:class:`ForgedComparison`).

    ``dynamic``: bit 0 set when ``a`` came from running code (a call, a variable, a fixture),
    bit 1 for ``b``; an operand the test wrote from literals is not asked questions.
    """
    __tracebackhide__ = True  # a failure points at the test's line: pytest leaves these frames out
    if type(a) in _ATOMS and type(b) in _ATOMS:
        return _OPS[op](a, b)
    plain_a, plain_b = _plain(a), _plain(b)
    if plain_a and plain_b:
        return _OPS[op](a, b)
    ca, cb = _canon(a), _canon(b)
    suspects = [(x, left) for x, left, plain, bit in ((a, True, plain_a, 1), (b, False, plain_b, 2))
                if not plain and dynamic & bit]  # fmt: skip
    near: list[tuple[Any, Any]] = []  # (suspect, a value near the test's it said it equals)

    def ask(rounds: int) -> None:
        __tracebackhide__ = True
        for _ in range(rounds):
            for x, left in suspects:
                said = _probe(op, x, left, cb if left else ca)
                if said is not _NO:
                    near.append((x, said))

    ask(_State.rng.randrange(1, 4) if suspects else 0)
    truth, result = _truth(_OPS[op](a, b))
    if truth is None:
        return result
    ask(1)
    if truth and near:  # equal to the test's value and to one next to it: a wrong result may be the second, never both
        raise _forged(near[0][0], f"equal to {_short(near[0][1])}, as well as to what the test compares it with")
    if truth and op != NOT_IN:
        _check_claim(op, a, b, ca, cb, suspects)
    return result


def check_call(method: Callable[..., Any], op: int, dynamic: int, first: Any, second: Any, *args: Any,
               **kwargs: Any) -> Any:
    """A unittest ``assertEqual``-style call: the comparison checked as :func:`compare` does, then the method."""
    __tracebackhide__ = True
    compare(op, first, second, dynamic)
    return method(first, second, *args, **kwargs)


def _short(value: Any) -> str:
    text = repr(value) if type(value) in _ATOMS or _plain(value) else f"an object of {type(value).__qualname__}"
    return text if len(text) <= 60 else text[:57] + "..."


# ---------------------------------------------------------------------------------------------
# the test module's code
# ---------------------------------------------------------------------------------------------

_UNITTEST = {
    "assertEqual": EQ, "assertEquals": EQ, "assertNotEqual": NE, "assertNotEquals": NE, "assertIn": IN,
    "assertNotIn": NOT_IN, "assertLess": LT, "assertLessEqual": LE, "assertGreater": GT, "assertGreaterEqual": GE,
    "assertListEqual": EQ, "assertTupleEqual": EQ, "assertDictEqual": EQ, "assertSetEqual": EQ,
    "assertSequenceEqual": EQ, "assertMultiLineEqual": EQ,
}  # fmt: skip
COMPARE_NAME, CHECK_NAME, BUILTINS_NAME = "@codemoe_compare", "@codemoe_check", "@codemoe_builtins"
DEFINED_NAME = "@codemoe_defined"


class _Provenance:
    """Which expressions of a test module the test wrote itself: literals, and values built from
    them with builtins or names imported from the standard library or pytest."""

    def __init__(self, tree: ast.Module, trusted: Callable[[str], bool]) -> None:
        imported: dict[str, bool] = {}  # name -> imported from a trusted module every time
        assigned: dict[str, list[ast.expr]] = {}  # name -> the values of its ``name = value`` bindings
        simple: set[int] = set()  # the target nodes of those bindings
        bound: set[str] = set()  # names bound any other way (arguments, loops, definitions ...)
        top_level = set(map(id, tree.body))
        # the modules imported other than at the top level (inside functions, classes, ``if`` and ``try``
        # blocks): each dotted name and its parents (``import os.path``: ``os``, ``os.path``), whose
        # sys.modules entries the environment check watches (codemoe.sandbox.pristine)
        self.inner_imports: set[str] = set()
        operands: set[int] = set()  # the names a comparison reads directly (``x == EXPECTED``, ``EXPECTED[k]``)
        loads: list[ast.Name] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                for side in (node.left, *node.comparators):
                    side = side.value if isinstance(side, ast.Subscript) else side
                    operands.add(id(side))
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                loads.append(node)
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if all(isinstance(t, ast.Name) for t in targets):
                    for t in targets:
                        assigned.setdefault(t.id, []).append(node.value)
                        simple.add(id(t))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                if id(node) not in top_level:
                    self._note_inner(node)
                top = (node.module or "").split(".")[0] if isinstance(node, ast.ImportFrom) else ""
                for alias in node.names:
                    name = alias.asname or alias.name.split(".")[0]
                    root = top if isinstance(node, ast.ImportFrom) else alias.name.split(".")[0]
                    ok = trusted(root) and not (isinstance(node, ast.ImportFrom) and node.level)
                    imported[name] = imported.get(name, True) and ok
            elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load) and id(node) not in simple:
                bound.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, ast.arg):
                bound.add(node.arg)
            elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
                bound.add(node.name)
            elif isinstance(node, ast.MatchMapping) and node.rest:
                bound.add(node.rest)
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                bound.update(node.names)
        # names a top-level assignment binds and nothing else in the module binds, deletes or declares
        # global (``_near = partial(isclose, rel_tol=1e-3)``, ``EXPECTED = 42``): its tests never
        # rebind them, so the environment check holds them to that value (a counter under ``global``,
        # a name bound twice, in a loop or as an argument is the module's state; dunders are left alone)
        top = {t.id for stmt in tree.body if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None
               for t in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]) if isinstance(t, ast.Name)}
        self.held: set[str] = {n for n in top if len(assigned.get(n, ())) == 1 and n not in bound
                               and n not in imported and not (n.startswith("__") and n.endswith("__"))}  # fmt: skip
        # of those, a list, dict or set display the module only ever compares with (``EXPECTED = [4, 6]``,
        # ``assert totals() == EXPECTED``): nothing it does changes its content, nor need the code
        # under test, which never gets it, so the check holds its content too (one the tests hand
        # to a function, ``median(DATA)``, may be sorted in place by honest code, and is not held)
        handed = {n.id for n in loads if id(n) not in operands}
        self.compared: set[str] = {n for n in self.held - handed
                                   if isinstance(assigned[n][0], (ast.List, ast.Dict, ast.Set))}
        # and a display it hands only to ``pytest.mark.parametrize`` besides (its cases): held until
        # pytest has read it, when collection ends (the tests may hand its items to honest code later)
        cases = _parametrize_arguments(tree)
        handed_on = {n.id for n in loads if id(n) not in operands and id(n) not in cases}
        self.parametrized: set[str] = {n for n in self.held - handed_on - self.compared
                                       if isinstance(assigned[n][0], (ast.List, ast.Dict, ast.Set))}
        other = bound | set(assigned)
        self.names: set[str] = {n for n, ok in imported.items() if ok and n not in other}
        self.names |= {n for n in _BUILTIN_CONSTRUCTORS if n not in other and n not in imported}
        # a name assigned only from what the test wrote (``expected = {"id": ANY}``) is the test's too
        pending = {n: values for n, values in assigned.items() if n not in bound and n not in imported}
        changed = True
        while changed:
            changed = False
            for name, values in list(pending.items()):
                if all(self.written(v) for v in values):
                    self.names.add(name)
                    del pending[name]
                    changed = True

    def _note_inner(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            names = [node.module] if node.module and not node.level else []
        for name in names:
            parts = name.split(".")
            self.inner_imports.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))

    def written(self, node: ast.AST | None) -> bool:
        """Whether ``node`` is the test's own (no call into code under test, no variable)."""
        if node is None or isinstance(node, ast.Constant):
            return True
        if isinstance(node, ast.Name):
            return node.id in self.names
        if isinstance(node, ast.Attribute):
            return self.written(node.value)
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return all(self.written(e) for e in node.elts)
        if isinstance(node, ast.Starred):
            return self.written(node.value)
        if isinstance(node, ast.Dict):
            return all(k is not None and self.written(k) for k in node.keys) and all(map(self.written, node.values))
        if isinstance(node, ast.UnaryOp):
            return self.written(node.operand)
        if isinstance(node, ast.BinOp):
            return self.written(node.left) and self.written(node.right)
        if isinstance(node, ast.BoolOp):
            return all(map(self.written, node.values))
        if isinstance(node, ast.Subscript):
            return self.written(node.value) and self.written(node.slice)
        if isinstance(node, ast.Slice):
            return self.written(node.lower) and self.written(node.upper) and self.written(node.step)
        if isinstance(node, ast.JoinedStr):
            return all(map(self.written, node.values))
        if isinstance(node, ast.FormattedValue):
            return self.written(node.value)
        if isinstance(node, ast.Call):
            return (self.written(node.func) and all(map(self.written, node.args))
                    and all(self.written(k.value) for k in node.keywords))  # fmt: skip
        return False

    def dynamic(self, left: ast.AST, right: ast.AST) -> int:
        return (0 if self.written(left) else 1) | (0 if self.written(right) else 2)


def _unittest_call(node: ast.AST) -> bool:
    """``self.assertEqual(a, b, ...)`` and its family, with its two operands written out."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _UNITTEST
            and len(node.args) >= 2 and not any(isinstance(a, ast.Starred) for a in node.args[:2]))  # fmt: skip


def _key(node: ast.AST) -> tuple[int, int, int, int]:
    return (getattr(node, "lineno", -1), getattr(node, "col_offset", -1),
            getattr(node, "end_lineno", -1) or -1, getattr(node, "end_col_offset", -1) or -1)  # fmt: skip


def survey(tree: ast.Module, trusted: Callable[[str], bool],
           provenance: _Provenance | None = None) -> dict[tuple[int, int, int, int], list[int]]:
    """Before pytest rewrites the module: for each comparison (by its place in the source), the
    ``dynamic`` bits of each pair of operands, in order (a chain ``a < b < c`` has two)."""
    provenance = provenance or _Provenance(tree, trusted)
    found: dict[tuple[int, int, int, int], list[int]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            found[_key(node)] = [provenance.dynamic(x, y) for x, y in itertools.pairwise(operands)]
        elif _unittest_call(node):
            found[_key(node)] = [provenance.dynamic(node.args[0], node.args[1])]
    return found


class _Instrument(ast.NodeTransformer):
    def __init__(self, surveyed: dict[tuple[int, int, int, int], list[int]]) -> None:
        self.surveyed = surveyed
        self.seen: dict[tuple[int, int, int, int], int] = {}
        self.changed = False

    def _dynamic(self, node: ast.AST) -> int:
        key = _key(node)
        pairs = self.surveyed.get(key, [])
        index = self.seen.get(key, 0)
        self.seen[key] = index + 1
        return pairs[index] if index < len(pairs) else 3

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        if len(node.ops) != 1 or type(node.ops[0]) not in _AST_OPS:
            return node  # a chain outside an assert (pytest splits those in asserts) is left as written
        self.changed = True
        func, op, dynamic = (_at(n, node) for n in (ast.Name(COMPARE_NAME, ast.Load()),
                                                     ast.Constant(_AST_OPS[type(node.ops[0])]),
                                                     ast.Constant(self._dynamic(node))))  # fmt: skip
        return _at(ast.Call(func, [op, node.left, node.comparators[0], dynamic], []), node)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        func = node.func
        if not _unittest_call(node):
            return node
        assert isinstance(func, ast.Attribute)
        self.changed = True
        args = [func, _at(ast.Constant(_UNITTEST[func.attr]), node), _at(ast.Constant(self._dynamic(node)), node),
                *node.args]
        return _at(ast.Call(_at(ast.Name(CHECK_NAME, ast.Load()), node), args, node.keywords), node)


def _at(new: ast.AST, old: ast.AST) -> Any:
    """``new`` at ``old``'s place in the source (what its error messages and tracebacks point to)."""
    return ast.copy_location(new, old)


def _parametrize_arguments(tree: ast.Module) -> set[int]:
    """The ids of the names a ``parametrize`` decorator of the module takes as its values
    (``@pytest.mark.parametrize("a,b", CASES)``, ``argvalues=CASES``)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        for decorator in getattr(node, "decorator_list", ()):
            func = decorator.func if isinstance(decorator, ast.Call) else None
            if (isinstance(func, ast.Attribute) and func.attr == "parametrize") or (
                isinstance(func, ast.Name) and func.id == "parametrize"
            ):
                values = [*decorator.args[1:2], *(k.value for k in decorator.keywords if k.arg == "argvalues")]
                found.update(id(v) for v in values if isinstance(v, ast.Name))
    return found


def instrument(tree: ast.Module, surveyed: dict[tuple[int, int, int, int], list[int]],
               held: set[str] | frozenset[str] = frozenset(), compared: set[str] | frozenset[str] = frozenset(),
               parametrized: set[str] | frozenset[str] = frozenset()) -> None:
    """Route the module's comparisons through :func:`compare` (in place), after pytest's rewrite,
    make its functions call the builtins as the fork server loaded them
    (:func:`codemoe.sandbox.pristine.builtins_for`), and record what its top-level definitions and
    the assignments of ``held`` names (``_Provenance.held``) bound, with the content of the
    ``compared`` ones (``_Provenance.compared``)."""
    transformer = _Instrument(surveyed)
    transformer.visit(tree)
    names = [ast.alias("compare", COMPARE_NAME), ast.alias("check_call", CHECK_NAME)] if transformer.changed else []
    imported = ast.ImportFrom(module=__name__, names=names, level=0)
    # the module's functions call the builtins as the fork server loaded them (codemoe.sandbox.pristine)
    frozen = ast.ImportFrom(module="codemoe.sandbox.pristine", level=0,
                            names=[ast.alias("builtins_for", BUILTINS_NAME), ast.alias("defined", DEFINED_NAME)])
    assign = ast.Assign(targets=[ast.Name("__builtins__", ast.Store())],
                        value=ast.Call(ast.Name(BUILTINS_NAME, ast.Load()), [ast.Name("__name__", ast.Load())], []))
    body = tree.body
    at = 0
    for i, stmt in enumerate(body):  # after the docstring, __future__ imports and pytest's own imports
        if i == 0 and isinstance(stmt, ast.Expr) and isinstance(getattr(stmt, "value", None), ast.Constant):
            at = 1
        elif (isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__") or (
            isinstance(stmt, ast.Import) and any((a.asname or "").startswith("@py") for a in stmt.names)
        ):
            at = i + 1
    lineno = getattr(body[at - 1], "lineno", 1) if 0 < at <= len(body) else 1
    added = [imported] if names else []
    for stmt in [*added, frozen, assign]:
        _place(stmt, lineno)
    # each top-level function and class, and each held name, is recorded as it is bound, before any
    # later statement (an import of the code under test among them) runs: a replacement made later
    # is found
    rest = []
    for stmt in body[at:]:
        rest.append(stmt)
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [stmt.name]
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            names = [t.id for t in targets if isinstance(t, ast.Name) and t.id in held]
        else:
            continue
        for name in names:
            call = ast.Call(ast.Name(DEFINED_NAME, ast.Load()), [ast.Name("__name__", ast.Load()), ast.Constant(name),
                                                                  ast.Name(name, ast.Load())], [])  # fmt: skip
            if name in compared or name in parametrized:
                call.args.append(ast.Constant(True if name in compared else "collection"))
            rest.append(_place(ast.Expr(call), getattr(stmt, "end_lineno", None) or stmt.lineno))
    body[at:] = [*added, frozen, assign, *rest]


def _place(stmt: ast.stmt, lineno: int) -> ast.stmt:
    """Give an added statement and everything in it a position (line ``lineno``, column 0)."""
    for node in ast.walk(stmt):
        if isinstance(node, (ast.stmt, ast.expr, ast.alias)):
            node.lineno, node.col_offset, node.end_lineno, node.end_col_offset = lineno, 0, lineno, 0
    return stmt


def _trusted_roots(module_path: str | None, root: str | None) -> Callable[[str], bool]:
    """Top-level module names a test's expectations may come from: the standard library and pytest
    (numpy), unless the work dir holds a module of that name (it would be imported instead)."""
    folders: list[str] = []
    if module_path:
        folder = os.path.dirname(os.path.abspath(module_path))
        stop = os.path.abspath(root) if root else folder
        while True:
            folders.append(folder)
            if folder == stop or os.path.dirname(folder) == folder or not folder.startswith(stop):
                break
            folder = os.path.dirname(folder)
    if root and os.path.abspath(root) not in folders:
        folders.append(os.path.abspath(root))

    def trusted(name: str) -> bool:
        if not name or not (name in sys.stdlib_module_names or name in _TRUSTED_TOP):
            return False
        return not any(os.path.exists(os.path.join(f, name + ".py")) or os.path.isdir(os.path.join(f, name))
                       for f in folders)  # fmt: skip

    return trusted


_INSTALLED: list[Callable[..., None]] = []


def install() -> None:
    """Make pytest's assertion rewriting route every test module's comparisons through
    :func:`compare` (once per process; the pytest runner calls it before any code under test)."""
    if _INSTALLED:
        return
    import _pytest.assertion.rewrite as rewrite
    from codemoe.sandbox import pristine

    original = rewrite.rewrite_asserts

    def rewrite_asserts(mod: ast.Module, source: bytes, module_path: str | None = None, config: Any = None) -> None:
        root = str(getattr(config, "rootpath", "") or "") or None
        trusted = _trusted_roots(module_path, root)
        provenance = _Provenance(mod, trusted)  # of the source as written, before pytest's rewrite
        if module_path:  # what the module's imports must bind; whether it is what the task sent
            pristine.record_imports(str(module_path), mod, provenance.inner_imports)
            pristine.read_source(str(module_path), source)
        surveyed = survey(mod, trusted, provenance)
        original(mod, source, module_path, config)
        instrument(mod, surveyed, provenance.held, provenance.compared, provenance.parametrized)

    rewrite.rewrite_asserts = rewrite_asserts
    # every module pytest rewrites is rewritten from its source, read and checked here: a cached pyc
    # is code nobody read (the code under test can write one beside a test module not yet collected)
    rewrite._read_pyc = _no_cached_pyc
    hook = rewrite.AssertionRewritingHook
    should, bailout = hook._should_rewrite, hook._early_rewrite_bailout

    def _should_rewrite(self: Any, name: str, fn: str, state: Any) -> bool:
        return fn in _HELPERS or should(self, name, fn, state)

    def _early_rewrite_bailout(self: Any, name: str, state: Any) -> bool:
        return name.rpartition(".")[2] not in _HELPER_NAMES and bailout(self, name, state)

    hook._should_rewrite, hook._early_rewrite_bailout = _should_rewrite, _early_rewrite_bailout
    exec_module, made = hook.exec_module, pristine.made

    def exec_module_made(self: Any, module: Any) -> None:  # which module objects were made from the task's files
        made(module)
        exec_module(self, module)

    hook.exec_module = exec_module_made
    read = rewrite._rewrite_test
    # absolute path -> source of the private modules (ExecutionRequest.private): laid out empty, so no
    # process of the execution reads them from the work dir; pytest's imports take the source from
    # here while it collects (a module whose import failed is imported again), and an import after
    # collection (the module taken out of sys.modules then) reads the empty file, which the
    # environment check names as read other than sent. Held by these closures only: no module
    # attribute of the runner leads to it (reaching a closure's cells is what runner_tampering flags)
    private: dict[str, bytes] = {}
    paths: set[str] = set()

    def _rewrite_test(fn: Any, config: Any) -> tuple[bytes, Any]:
        """pytest's own, but a private module's source comes from the request, until collection ends."""
        source = private.get(os.path.abspath(str(fn)))
        if source is None:
            return read(fn, config)
        strfn = str(fn)
        tree = ast.parse(source, filename=strfn)
        rewrite.rewrite_asserts(tree, source, strfn, config)
        return importlib.util.source_hash(source), compile(tree, strfn, "exec", dont_inherit=True)

    def serve_private(sources: dict[str, bytes]) -> None:
        """Set this execution's private modules (absolute path -> source), before any code under test."""
        private.clear()
        private.update(sources)
        paths.clear()
        paths.update(sources)

    def forget_private() -> list[str]:
        """Take the private modules out of ``sys.modules`` once pytest has collected them (its items
        keep them): an ``import`` of one by the code under test then finds the empty file. Their names."""
        private.clear()
        if not paths:
            return []
        gone = []
        for name, module in list(sys.modules.items()):
            file = vars(module).get("__file__") if type(module) is types.ModuleType else None  # no __getattr__ asked
            if isinstance(file, str) and os.path.abspath(file) in paths:
                del sys.modules[name]
                gone.append(name)
        return gone

    rewrite._rewrite_test = _rewrite_test
    globals().update(serve_private=serve_private, forget_private=forget_private)
    _INSTALLED.append(original)
    reseed()


def serve_private(sources: dict[str, bytes]) -> None:
    """Set this execution's private modules (absolute path -> source); :func:`install` first."""
    raise RuntimeError("honest.install() first: the private modules are served by pytest's rewrite hook")


def forget_private() -> list[str]:
    """Take the private modules out of ``sys.modules`` after collection; :func:`install` first."""
    return []


def _no_cached_pyc(source: Any, pyc: Any, trace: Any = None) -> None:
    """pytest's ``_read_pyc`` in the runner: no cached rewrite is ever used."""
    return None


_HELPERS: set[str] = set()  # absolute paths of this execution's trusted helper modules
_HELPER_NAMES: set[str] = set()  # their module names' last parts


def rewrite_helpers(paths: Iterable[str]) -> None:
    """Have pytest rewrite these files too (and so check their comparisons), whatever their names:
    the helper modules a task's tests import (``tests/helpers.py``), which pytest rewrites only
    when a plugin registers them. Set per execution, before any code under test."""
    _HELPERS.clear()
    _HELPER_NAMES.clear()
    for path in paths:
        _HELPERS.add(os.path.abspath(path))
        stem = os.path.basename(path)[:-3]
        _HELPER_NAMES.add(os.path.basename(os.path.dirname(path)) if stem == "__init__" else stem)

