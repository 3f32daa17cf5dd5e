"""What a test calls is what the runner loaded: names the code under test replaced are a forgery.

A test's ``assert math.isclose(area(), 0.3)``, ``with pytest.raises(ValueError)`` or
``assert len(evens(xs)) == 2`` calls names the code under test can rebind in the same process:
``math.isclose = lambda *a, **k: True`` at import makes the first pass whatever ``area`` returns,
``pytest.raises = contextlib.suppress`` the second, and a ``len`` that says 2 for the list type the
code returns the third. The comparison itself is honest (:mod:`codemoe.sandbox.honest`); what was
asked was not.

So the pytest fork server takes a :class:`Snapshot` before any code under test exists, of
everything loaded then (the standard library, ``builtins``, pytest and its plugins, the runner):
each module's functions, classes, submodules and constant values, and every entry of each class
those modules define. The runner's reporter takes the state when the session starts as the one to
keep (pytest's own setup swaps ``pdb.set_trace``), checks it after collection and when the session
finishes, and names what was replaced or deleted in the report (``tampered``); the verdict is then
``failed`` with a reason that starts ``forged test environment``, which voids the reward's test
terms. A trusted test module's functions, classes and modules are checked the same way from the end
of collection on, each held to what its ``def`` or ``class`` bound (:func:`defined`, called by the
module's rewrite right after each; so is a name a top-level assignment binds and nothing else in the
module rebinds, constants included: ``EXPECTED = 42``; a list, dict or set display the module only
compares with is held to its content too), and what its top-level imports bound must be what the snapshotted modules hold
(a fake module put in ``sys.modules`` before the test module imported it is named; so is a fake
in the ``sys.modules`` entry of a snapshotted module the test module imports inside a function). Builtins are
closed by design: a test module's functions call a copy of them as the server loaded them
(:func:`builtins_for`), so a replaced ``len`` never reaches a test, even one put back before a check.

A check costs one read per dictionary: CPython gives every dict a version tag that changes with
each insertion, replacement or deletion (PEP 509), read here through ``ctypes`` without touching
the objects the dict holds (so a forked execution copies few of the server's pages for it): about
0.15 ms for the 1,900 dicts of a warm pytest server. Only a dict whose tag moved is compared entry
by entry; where the interpreter has no such tag (checked when the snapshot is taken), every one is.

Not covered (``docs/reliability.md``): a replacement of a module's function undone before the next
check (one that restores the original the first time it is called), and code that rewrites the
snapshot or memory itself (``ctypes``, which the ``runner_tampering`` detector flags).
"""

from __future__ import annotations

import ast
import builtins
import ctypes
import functools
import gc
import hashlib
import importlib.machinery
import importlib.util
import itertools
import operator
import os
import sys
import time
import types
import zipimport
from collections.abc import Callable, Iterable
from operator import attrgetter
from typing import Any

__all__ = [
    "Snapshot",
    "audit_functions",
    "builtins_for",
    "changed_contents",
    "changed_data",
    "changed_files",
    "classes",
    "defined",
    "defined_code",
    "definitions",
    "expect_files",
    "foreign_names",
    "guard_tracing",
    "imports",
    "impostors",
    "made",
    "made_from",
    "read_source",
    "recoded",
    "record_imports",
    "recorded_imports",
    "recorded_inner_imports",
    "resolved_name",
    "source_only",
    "take",
    "taken",
    "traced",
]

_ATOMS = (int, float, complex, str, bytes, bool, type(None), tuple, frozenset, range)
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by Python code (a C type's dict cannot be written)
_MISSING = object()
_LIVE = sys.modules  # bound at import: what the interpreter holds now, for modules loaded after the snapshot
_VALUE = attrgetter("value")
# module attributes that running code rebinds as a matter of course (streams, hooks pytest swaps per
# test, the last exception); what they hold is data, not something a test calls for its answer
_MUTABLE = {
    "sys": frozenset({"stdin", "stdout", "stderr", "displayhook", "excepthook", "unraisablehook",
                      "breakpointhook", "last_type", "last_value", "last_traceback"}),
    "threading": frozenset({"excepthook"}),
    "time": frozenset({"tzname", "timezone", "altzone", "daylight"}),  # time.tzset() rebinds them
    "builtins": frozenset({"_"}),
}  # fmt: skip
# modules whose constants are settings a program may set (sys.dont_write_bytecode, sys.tracebacklimit):
# only their functions, classes and submodules are checked
_SETTINGS = frozenset({"sys"})

# The modules (and their classes) that run a test and record its outcome: check_runner's share.
RUNNER_PREFIXES = ("_pytest", "pytest", "pluggy", "codemoe.sandbox", "builtins", "unittest")

# What pytest's own setup replaces or adds in the snapshotted modules before the session starts
# (pytest 8-9: `legacypath` gives seven classes their py.path properties, `debugging` puts its own
# pdb.set_trace), and the comparison probes the reporter draws again at the session's start. These,
# none of which a test's outcome goes through, are all the changes the rebase takes as the state to
# keep; anything else changed by then was changed by the code under test.
SESSION_SETUP: dict[str, frozenset[str]] = {
    "pdb": frozenset({"set_trace"}),
    "_pytest.config.Config": frozenset({"_getini_unknown_type", "invocation_dir", "rootdir", "inifile"}),
    "_pytest.nodes.Node": frozenset({"fspath"}),
    "_pytest.main.Session": frozenset({"startdir"}),
    "_pytest.fixtures.FixtureRequest": frozenset({"fspath"}),
    "_pytest.cacheprovider.Cache": frozenset({"makedir"}),
    "_pytest.terminal.TerminalReporter": frozenset({"startdir"}),
    "codemoe.sandbox.honest._State": frozenset({"sentinel", "far_int", "tag", "rng"}),
}  # fmt: skip


def _kept(value: Any, constants: bool = True) -> bool:
    """Whether rebinding ``value`` can change a test's answer: what it calls, or a constant it reads."""
    return callable(value) or isinstance(value, (types.ModuleType, *_ATOMS) if constants else types.ModuleType)


def _tag_offset() -> int | None:
    """Where a dict's version tag lies on this interpreter (CPython 3.8+), verified; None if not."""
    if sys.implementation.name != "cpython":
        return None
    offset = 2 * ctypes.sizeof(ctypes.c_void_p) + ctypes.sizeof(ctypes.c_ssize_t)  # after the header and ma_used
    probe: dict[str, object] = {"a": 1}
    tag = ctypes.c_uint64.from_address(id(probe) + offset)
    seen = [tag.value]
    for change in (lambda: probe.__setitem__("a", 2), lambda: probe.__setitem__("b", 3), lambda: probe.pop("b")):
        change()
        seen.append(tag.value)
    grows = all(b > a for a, b in itertools.pairwise(seen))
    return offset if grows and len(probe) == 1 else None


class _Watched:
    """One dictionary and the entries of it that are checked; for a class, ``closed`` holds the
    names it may have: one added (``PurePosixPath.__eq__``, a helper class's ``SUM`` that its base
    defines) answers in place of its bases' and is a change as well. A library class may cache data
    in its own dict (pygments' lexers their token tables), so there (not ``strict``) only an added
    special method, function, class or other descriptor is."""

    __slots__ = ("closed", "entries", "label", "mapping", "strict")

    def __init__(self, label: str, mapping: dict[str, Any], entries: tuple[tuple[str, Any], ...],
                 closed: frozenset[str] | None = None, strict: bool = False) -> None:
        self.label = label
        self.mapping = mapping
        self.entries = entries
        self.closed = closed
        self.strict = strict

    def changed(self) -> list[str]:
        """Entries replaced or deleted; one that held None may be set (a lazily made global, like
        pytest's doctest runner class: nothing a test called was replaced). For a class, entries
        added but those a trusted module assigns somewhere and unittest's own (no key of another
        type than ``str`` is hashed or compared here: its ``__eq__`` would run); none, for a trusted
        class, where a trusted module sets attributes by names it computes (``setattr(cls, name, f)``)."""
        mapping = self.mapping
        get = mapping.get
        found = [name for name, value in self.entries if get(name, _MISSING) is not value and value is not None]
        if self.closed is None or (self.strict and _ANY in _ASSIGNED):
            return found
        closed = self.closed
        for name in list(mapping):
            if type(name) is not str:
                found.append("<a key that is not a str>")
            elif not (name in closed or name in _ASSIGNED or name in _CLASS_STATE) and \
                    (self.strict or name[:2] == name[-2:] == "__" or _behaves(mapping[name])):
                found.append(name)
        return found

    def accept(self, names: frozenset[str]) -> None:
        """Take what the dict holds now under ``names`` as their state (one that is gone stays gone)."""
        get = self.mapping.get
        entries = ((name, get(name, _MISSING) if name in names else value) for name, value in self.entries)
        self.entries = tuple((name, value) for name, value in entries if value is not _MISSING)
        if self.closed is not None:
            self.closed = self.closed | frozenset(name for name in names if name in self.mapping)


_MRO = type.__dict__["__mro__"].__get__  # the type's own slots: no metaclass of the code under test answers
_DICT = type.__dict__["__dict__"].__get__


def _behaves(value: Any) -> bool:
    """Whether a value put in a class answers for it: anything callable (a function, a class) or a
    descriptor (a property). Read from the value's type's own dicts: nothing of it runs."""
    return callable(value) or any("__get__" in _DICT(k) for k in _MRO(type(value)))


# what the interpreter caches in a class's dict when asked (`cls.__annotations__` makes an empty
# one, copyreg its slot names) and unittest keeps on a test case's class as it runs it
_CLASS_STATE = frozenset({"__annotations__", "__slotnames__", "tearDown_exceptions", "_classSetupFailed",
                          "_class_cleanups"})


class Snapshot:
    """The names of everything loaded so far, to check later that none was replaced or deleted."""

    def __init__(self, watched: list[_Watched], offset: int | None,
                 modules: dict[str, types.ModuleType] | None = None) -> None:
        self._watched = watched
        self._modules = dict(modules or {})  # name -> the module sys.modules held when the snapshot was taken
        self._inside: dict[str, types.ModuleType] = {}  # those whose sys.modules entries are checked
        self.builtins = dict(vars(builtins))  # the builtins as they were, which test modules' functions use
        self._offset = offset
        self._views: list[Any] = []
        self._tags: list[int] = []
        self._reported: set[str] = set()
        self._runner: list[int] | None = None  # the watched dicts check_runner looks at
        self._retag()

    def holds_namespace(self, namespace: Any) -> bool:
        """Whether ``namespace`` is the ``__dict__`` of a module the snapshot holds (loaded before any
        code under test existed), by identity."""
        name = namespace.get("__name__") if type(namespace) is dict else None
        module = self._modules.get(name) if type(name) is str else None
        return module is not None and vars(module) is namespace

    @classmethod
    def take(cls, modules: Iterable[tuple[str, types.ModuleType]] | None = None) -> Snapshot:
        """Of ``modules`` (default: every module in ``sys.modules`` but ``__main__``)."""
        pairs = [(n, m) for n, m in (list(sys.modules.items()) if modules is None else modules)
                 if isinstance(m, types.ModuleType) and n != "__main__"]  # fmt: skip
        modules = {n: m for n, m in pairs if sys.modules.get(n) is m}
        watched: list[_Watched] = []
        classes: dict[int, tuple[str, type]] = {}
        seen: set[int] = set()
        for key, module in pairs:
            if id(module) in seen:  # one module under two names (os.path is posixpath): watched once
                continue
            seen.add(id(module))
            name = getattr(module, "__name__", None)
            name = name if isinstance(name, str) else key
            exempt = _MUTABLE.get(name, frozenset())
            constants = name not in _SETTINGS
            entries = tuple((k, v) for k, v in vars(module).items() if k not in exempt and _kept(v, constants))
            watched.append(_Watched(name, vars(module), entries))
            for _, value in entries:
                if isinstance(value, type) and value.__flags__ & _HEAPTYPE and value.__module__ == name:
                    classes.setdefault(id(value), (f"{name}.{value.__qualname__}", value))
        for label, klass in classes.values():
            real = [r for r in gc.get_referents(vars(klass)) if isinstance(r, dict)]  # the dict behind the mappingproxy
            if len(real) == 1:
                watched.append(_Watched(label, real[0], tuple(real[0].items()), frozenset(real[0])))
        return cls(watched, _tag_offset(), modules)

    def watch(self, label: str, mapping: dict[str, Any], originals: dict[str, Any] | None = None,
              closed: bool = False) -> None:
        """Check ``mapping``'s functions, classes and modules from now on (a trusted test module's
        names; its other globals are its own state, which its tests may change), held to
        ``originals`` where given (what each name was bound to when it was defined): then it is
        compared entry by entry at the next check, since it may differ already. ``closed`` (a
        trusted class's dict): any name ``originals`` does not hold is a change too."""
        entries = {k: v for k, v in mapping.items() if _kept(v, constants=False)}
        entries.update(originals or {})
        allowed = frozenset(k for k in (originals or {}) if type(k) is str) if closed else None
        self._watched.append(_Watched(label, mapping, tuple(entries.items()), allowed, strict=closed))
        if self._offset is not None:
            self._views.append(ctypes.c_uint64.from_address(id(mapping) + self._offset))
            self._tags.append(-1 if originals else self._views[-1].value)

    def _retag(self) -> None:
        if self._offset is None:
            return
        offset, view = self._offset, ctypes.c_uint64.from_address
        self._views = [view(id(w.mapping) + offset) for w in self._watched]
        self._tags = list(map(_VALUE, self._views))

    def _moved(self) -> Iterable[int]:
        """Indices of the dicts that may have changed since the last check."""
        if self._offset is None:
            return range(len(self._watched))
        tags = list(map(_VALUE, self._views))
        if tags == self._tags:
            return ()
        moved = list(itertools.compress(itertools.count(), map(operator.ne, tags, self._tags)))
        self._tags = tags
        return moved

    def rebase(self) -> list[str]:
        """At the session's start: take what pytest's own setup changed since the snapshot as the
        state to keep (:data:`SESSION_SETUP`), and name any other change, as :meth:`check` does. The
        code under test can run before the session starts (a warning category a config file names is
        imported while pytest configures), and what it changed then is a change like any other."""
        found: list[str] = []
        for i in self._moved():
            watched = self._watched[i]
            setup = SESSION_SETUP.get(watched.label, frozenset())
            changed = watched.changed()
            watched.accept(setup.intersection(changed))
            for name in changed:
                label = f"{watched.label}.{name}"
                if name not in setup and label not in self._reported:
                    self._reported.add(label)
                    found.append(label)
        return found

    def watch_modules(self, names: Iterable[str]) -> None:
        """Check from now on that the ``sys.modules`` entries of these snapshotted modules (what a
        test module imports inside its functions) are the snapshot's modules. Only these: reading
        every entry would write the reference count of every module object, and so copy a page of
        the server's memory into the fork for most of them."""
        self._inside.update((n, self._modules[n]) for n in names if n in self._modules)

    def _replaced_modules(self) -> list[str]:
        """Watched modules whose ``sys.modules`` entry is now another object: a fake ``math`` that a
        test's ``import math`` inside a function would get, or a fresh copy imported after the entry
        was deleted (not the module whose names the snapshot holds). A deleted entry alone is not
        named: the next import loads the module's own code."""
        get = sys.modules.get
        return [name for name, module in self._inside.items() if get(name, module) is not module]

    def check_runner(self) -> list[str]:
        """:meth:`check` of the test runner's own modules and classes only (:data:`RUNNER_PREFIXES`:
        pytest's, pluggy's, the sandbox's reporter and checks, ``builtins``): cheap enough for after
        every test, where a replacement of what records the outcomes, put back before the end's
        check, would otherwise go unseen. The full check names it again at no cost: once each."""
        if self._runner is None:
            self._runner = [i for i, w in enumerate(self._watched) if w.label.startswith(RUNNER_PREFIXES)]
        if self._offset is None:
            return self._changed(self._runner)
        tags, views = self._tags, self._views
        moved = [i for i in self._runner if views[i].value != tags[i]]
        for i in moved:
            tags[i] = views[i].value
        return self._changed(moved)

    def _changed(self, indices: Iterable[int]) -> list[str]:
        """The entries replaced or deleted in these watched dicts, as ``module.name``, each once."""
        found: list[str] = []
        for i in indices:
            watched = self._watched[i]
            for name in watched.changed():
                label = f"{watched.label}.{name}"
                if label not in self._reported:
                    self._reported.add(label)
                    found.append(label)
        return found

    def check(self) -> list[str]:
        """What was replaced or deleted since the snapshot (or the last :meth:`rebase`), as
        ``module.name``; each name once, at the first check that finds it."""
        found = self._changed(self._moved())
        for name in self._replaced_modules():
            label = f"sys.modules[{name!r}]"
            if label not in self._reported:
                self._reported.add(label)
                found.append(label)
        return found

    def imported(self, label: str, mapping: dict[str, Any], imports: Iterable[tuple[str, str, str | None]]) -> list[str]:
        """Names a test module bound with ``import`` that are not what the module they came from holds:
        a fake put in ``sys.modules`` for a snapshotted module before the test module imported it, or
        a later statement that rebound the name (``from calc import *`` after ``from helpers import
        EXPECTED``: the code under test's ``EXPECTED``); each once. A module loaded since the
        snapshot is the one ``sys.modules`` holds now; a relative import is resolved in the test
        module's package."""
        found = []
        for bound, module_name, attr in imports:
            module_name = resolved_name(module_name, mapping)
            module = self._modules.get(module_name)
            if module is None:
                module = _LIVE.get(module_name)
                if type(module) is not types.ModuleType:
                    continue
            expected = module if attr is None else vars(module).get(attr, _MISSING)
            label_of = f"{label}.{bound} (imported from {module_name})"
            if expected is not _MISSING and mapping.get(bound, _MISSING) is not expected and label_of not in self._reported:
                self._reported.add(label_of)
                found.append(label_of)
        return found


def imports(tree: ast.Module) -> list[tuple[str, str, str | None]]:
    """(name bound, module, attribute or None) of each import statement at a module's top level."""
    found: list[tuple[str, str, str | None]] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    found.append((alias.asname, alias.name, None))
                else:
                    head = alias.name.split(".", 1)[0]
                    found.append((head, head, None))
        elif isinstance(node, ast.ImportFrom) and (node.module or node.level):
            module = "." * node.level + (node.module or "")
            found += [(a.asname or a.name, module, a.name) for a in node.names if a.name != "*"]
    return found


def resolved_name(module_name: str, namespace: dict[str, Any]) -> str:
    """``module_name`` as an import in the module of ``namespace`` means it (a relative one resolved in
    its ``__package__``), or "" where it cannot be resolved."""
    if not module_name.startswith("."):
        return module_name
    package = namespace.get("__package__")
    try:
        return importlib.util.resolve_name(module_name, package) if type(package) is str else ""
    except (ImportError, ValueError):
        return ""


def _rebound(tree: ast.Module) -> set[str]:
    """Names a module binds at its top level other than by importing (an assignment, ``def``,
    ``class``, a loop or ``with`` target), anywhere outside its functions and classes: a name the
    module rebinds itself after importing it need not stay what it imported."""
    names: set[str] = set()
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        stack.extend(ast.iter_child_nodes(node))
    return names


_IMPORTS: dict[str, list[tuple[str, str, str | None]]] = {}
_OWN: dict[str, set[str]] = {}  # path -> every name the module's own top-level statements bind
_STARS: dict[str, list[str]] = {}  # path -> the modules its top-level star imports name
_INNER: dict[str, set[str]] = {}
_DEFINED: dict[str, dict[str, Any]] = {}
_EVER: dict[str, list[Any]] = {}  # module -> every value its top-level definitions bound (two conftests share a name)
_CASES: dict[str, dict[str, tuple[Any, Any]]] = {}  # the same, for a module's parametrize cases
_CONTENT: dict[str, dict[str, tuple[Any, Any]]] = {}  # module -> name -> (value, what it held when bound)


def defined(module: str, name: str, value: Any, content: bool | str = False) -> None:
    """Record what a test module's top-level ``def``, ``class`` or once-bound assignment bound, right
    after it ran (the rewrite adds the call after each one), for :meth:`Snapshot.watch`; with
    ``content``, what the value holds too (a list, dict or set the module only compares with; with
    ``"collection"``, one it hands to ``parametrize``, held until collection ends); and for a class of
    the module's own, what its class statement put in it."""
    _DEFINED.setdefault(module, {})[name] = value
    _EVER.setdefault(module, []).append(value)
    if content:
        held = _CASES if content == "collection" else _CONTENT
        held.setdefault(module, {})[name] = (value, _frozen(value))
    if isinstance(value, type) and value.__flags__ & _HEAPTYPE and value.__dict__.get("__module__") == module:
        real = [r for r in gc.get_referents(vars(value)) if type(r) is dict]  # the dict behind the mappingproxy
        if len(real) == 1:
            _CLASSES.setdefault(module, []).append((name, real[0], tuple(real[0].items())))


# module -> (name, the class's own dict, what its class statement put there) of its classes
_CLASSES: dict[str, list[tuple[str, dict[str, Any], tuple[tuple[str, Any], ...]]]] = {}
_ASSIGNED: set[str] = set()  # attribute names the trusted modules assign (`Tracker.calls += 1`): their state
_ANY = "*"  # in _ASSIGNED: a trusted module sets attributes whose names it computes


def classes(module: str) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """``module``'s own classes (a trusted test module's or helper's) as (name, the class's dict, the
    entries to hold it to): what its class statement bound, but attributes a trusted module assigns
    somewhere (a counter its tests keep). The code under test gave a helper's ``Expected.SUM`` the
    value its wrong answer has."""
    return [(name, real, {k: v for k, v in items if k not in _ASSIGNED}) for name, real, items in _CLASSES.get(module, ())]


def _frozen(value: Any, depth: int = 0) -> Any:
    """What ``value`` holds, by exact type: plain values by value (floats by their text, so a NaN
    equals itself), containers element by element, anything else by identity; compared without
    calling any method of the objects inside."""
    kind = type(value)
    if kind in (int, str, bytes, bool, type(None)):
        return kind, value
    if kind in (float, complex):
        return kind, repr(value)
    if depth < 32 and kind in (list, tuple):
        return kind, tuple(_frozen(v, depth + 1) for v in value)
    if depth < 32 and kind is dict:
        return kind, tuple((_frozen(k, depth + 1), _frozen(v, depth + 1)) for k, v in value.items())
    if depth < 32 and kind in (set, frozenset):
        return kind, frozenset(_frozen(v, depth + 1) for v in value)
    return kind, id(value)


def changed_contents(module: str, collection: bool = False) -> list[str]:
    """The values :func:`defined` recorded with their content in ``module`` that hold something
    else now (changed in place), as ``module.name (its content)``; with ``collection``, the
    parametrize cases too (checked when collection ends: the code under test, imported after them
    and before the decorator read them, took out the cases it fails)."""
    held = [*_CONTENT.get(module, {}).items(), *(_CASES.get(module, {}).items() if collection else ())]
    return [f"{module}.{name} (its content)" for name, (value, frozen) in held if _frozen(value) != frozen]


def definitions(module: str) -> dict[str, Any]:
    """What :func:`defined` recorded for ``module`` (its ``__name__``)."""
    return _DEFINED.get(module, {})


def defined_code(modules: Iterable[str]) -> set[int]:
    """The ids of the code objects of every function the top-level definitions of ``modules`` bound
    (their ``def``, the functions of their ``class`` bodies, a fixture's wrapped function, and the
    functions nested in each): code compiled from those modules' own source, whatever else their
    namespaces came to hold (a star import brings the code under test's functions in too)."""
    from _pytest.fixtures import FixtureFunctionDefinition

    stack = [value for module in modules for value in _EVER.get(module, ())]
    codes: set[int] = set()
    classes: set[int] = set()
    while stack:
        value = stack.pop()
        kind = type(value)
        if kind is FixtureFunctionDefinition:
            stack.append(FixtureFunctionDefinition._get_wrapped_function(value))
        elif kind is types.FunctionType:
            stack.append(value.__code__)
        elif kind in (staticmethod, classmethod):
            stack.append(value.__func__)
        elif kind is types.CodeType:
            if id(value) not in codes:
                codes.add(id(value))
                stack.extend(const for const in value.co_consts if type(const) is types.CodeType)
        elif isinstance(value, type) and id(value) not in classes:  # a class the module's own class statement made
            classes.add(id(value))
            stack.extend(type.__dict__["__dict__"].__get__(value).values())
    return codes


# A trace (or profile) function sees every frame that starts while it is set, and on Python 3.11 the
# interpreter writes back what it changes in a frame's f_locals: set at import of the code under
# test, one rewrote a test's `result` before its assert (or the arguments of the comparison check),
# and could take itself out again before any check. So every call that sets one is recorded as it
# happens; a graded run with one is a forged environment (codemoe.sandbox.pytest_report).
_TRACED: list[str] = []
_TRACE_SETTERS = ("settrace", "setprofile", "_settraceallthreads", "_setprofileallthreads")


def guard_tracing() -> None:
    """Put recording wrappers in place of ``sys``'s trace and profile setters (once, in the pytest
    fork server before its snapshot, so a later rebinding of them is a finding of its own)."""
    for name in _TRACE_SETTERS:
        original = getattr(sys, name, None)
        if original is not None and not getattr(original, "__wrapped_setter__", False):
            setattr(sys, name, _recording(name, original))


def _recording(name: str, setter: Any) -> Any:
    """``setter`` (held in the closure: reaching it is the introspection ``runner_tampering`` flags),
    recording each call that sets a function."""
    traced = _TRACED

    def guarded(function: Any) -> None:
        if function is not None and len(traced) < 8:
            traced.append(f"sys.{name}")
        setter(function)

    guarded.__name__ = guarded.__qualname__ = name
    guarded.__doc__ = setter.__doc__
    guarded.__wrapped_setter__ = True  # type: ignore[attr-defined]
    return guarded


# A function's code and defaults can be replaced without rebinding any name the snapshot holds
# (`json.loads.__code__ = (lambda s, **k: 4).__code__`, a trusted helper's too): the function is
# still the same object. So can a module's class (`helpers.__class__ = Lying`, whose
# `__getattribute__` answers `EXPECTED` with 0, given back before any check). And a trace function
# can be set by a route the recording setters never see: the real setter taken from a wrapper's
# closure, `threading.settrace` and a thread, `cProfile`, `ctypes.pythonapi.PyEval_SetTrace`.
# CPython audits every one of these (each setter, C's included, raises `sys.settrace` or
# `sys.setprofile`), and an audit hook cannot be removed: one added in a graded run's child before
# any code under test records each as it happens, the change with the file of what was changed (not
# in the fork server: every audited event of every run would call it).
_RECODED: list[tuple[str, str]] = []
_FUNCTION_PARTS = frozenset({"__code__", "__defaults__", "__kwdefaults__"})
_TRACE_EVENTS = frozenset({"sys.settrace", "sys.setprofile"})
_KEPT = 256  # replacements recorded, the code under test's own included; past them, one finding
_UNREAD = ""  # the file of a finding counted against no one
_MODULE_DICT = types.ModuleType.__dict__["__dict__"]  # ModuleType's own slot: no class of the code under test answers
# set once, when the hook is added: importlib's lazy module class (bound then: a module the code under
# test puts in sys.modules is not asked), the work dir, and the ids of the modules loaded then
_HOOK: list[tuple[type, str, frozenset[int]]] = []


# A graded session may not copy itself. A fork of the session process is a second copy of the test
# that called the code under test: it can go on running that test with an answer of its own and
# watch what the test does with it (an object that notes what it is compared with; a repr pytest
# calls only when the assert failed; a finaliser that runs when the test passed), then tell the
# process that reports (a pipe, its exit status, a file) which answer to give, without sending a
# report of its own. Nothing in the fork can be told from the test going on, so the fork is refused
# where it is made: os.fork and os.forkpty (pty.fork, multiprocessing's fork start method, pexpect),
# and the C library's forks looked up through ctypes. subprocess, os.posix_spawn and os.system start
# other programs (nothing of the session runs in them) and stay allowed.
_FORK_EVENTS = frozenset({"os.fork", "os.forkpty"})
_FORK_SYMBOLS = frozenset({"fork", "vfork", "_Fork", "__fork", "__libc_fork", "forkpty", "clone", "clone3", "__clone",
                           "__clone2", "__clone3", "syscall", "daemon", "PyOS_AfterFork_Child", "PyOS_AfterFork"})  # fmt: skip
NO_FORK = ("a graded pytest run's session may not fork (os.fork, os.forkpty, pty.fork, multiprocessing's fork start "
           "method, the C library's fork): a fork could run the rest of a test out of the report's sight. Start "
           "other programs with subprocess, or use multiprocessing's 'spawn' or 'forkserver' start method")


def _symbol(name: Any) -> str:
    """The name a ctypes lookup asks for, as text (``bytes`` or ``str``; an ordinal names nothing)."""
    if isinstance(name, bytes):
        return bytes.decode(name, "latin-1")
    return str.__str__(name) if isinstance(name, str) else ""


# A fork needs no os.fork: a shared library's fork() does it (an extension module the code under test
# wrote as bytes and loaded, or one ctypes opens). So a graded run loads no shared library written
# after its setup (set when pytest loads the first conftests: the task's setup commands, which may
# build the repository's extensions, are done by then), whatever it would call.
_LIBRARIES_SINCE: list[int | None] = [None]
_EXTENSIONS = (*importlib.machinery.EXTENSION_SUFFIXES, ".so", ".dylib")
NO_NEW_LIBRARY = ("a graded pytest run may not load a shared library written while it ran ({path}): its code could "
                  "fork the session, out of the report's sight")


def settle_libraries(folder: str) -> None:
    """From now on a graded run refuses shared libraries changed after this moment (``folder`` makes
    the clock: a file in it)."""
    _LIBRARIES_SINCE[0] = _file_clock(folder)


def _library(path: Any) -> None:
    """Refuse ``path`` (an extension module or a library ctypes opens) if it was written since
    :func:`settle_libraries`."""
    since = _LIBRARIES_SINCE[0]
    if since is None or not isinstance(path, str) or "/" not in path:  # a bare name: the system's search path
        return
    try:
        changed = max(os.lstat(path).st_ctime_ns, os.stat(path).st_ctime_ns)
    except OSError:
        return  # the loader's own error follows
    if changed >= since:
        raise PermissionError(NO_NEW_LIBRARY.format(path=path))


def _audit(event: str, args: tuple[Any, ...], _parts: frozenset[str] = _FUNCTION_PARTS,
           _traces: frozenset[str] = _TRACE_EVENTS, _function: type = types.FunctionType,
           _module: type = types.ModuleType, _recoded: list[tuple[str, str]] = _RECODED,
           _traced: list[str] = _TRACED, _forks: frozenset[str] = _FORK_EVENTS,
           _symbols: frozenset[str] = _FORK_SYMBOLS, _refused: type = PermissionError,
           _name: Callable[[Any], str] = _symbol, _library: Callable[[Any], None] = _library,
           _extensions: tuple[str, ...] = _EXTENSIONS) -> None:
    if event in _forks or (event == "ctypes.dlsym" and len(args) > 1 and _name(args[1]) in _symbols):
        raise _refused(NO_FORK)
    if event == "import" and len(args) > 1 and type(args[1]) is str and args[1].endswith(_extensions):
        _library(args[1])
    elif event == "ctypes.dlopen" and args and type(args[0]) is str:
        _library(args[0])
    if event in _traces:
        if len(_traced) < 8:
            _traced.append(event)
        return
    if event != "object.__setattr__" or len(args) < 3:
        return
    if len(_recoded) >= _KEPT:  # the code under test's own changes may fill the list, not hide the next one
        if _recoded[-1][1] != _UNREAD:
            _recoded.append((f"more than {_KEPT} function codes, defaults or module classes replaced (the rest not "
                             "read)", _UNREAD))
        return
    target = args[0]
    part = str.__str__(args[1]) if isinstance(args[1], str) else ""
    if type(target) is _function and part in _parts:
        _recoded.append((f"{target.__module__}.{target.__qualname__}.{part} (replaced: the function is the same "
                         "object, its code not)", target.__code__.co_filename))
    elif part == "__class__" and issubclass(type(target), _module):
        finding = _module_class(target, type(target), args[2])
        if finding is not None:
            _recoded.append(finding)


def _module_class(module: Any, old: type, new: Any) -> tuple[str, str] | None:
    """The finding for ``module.__class__ = new`` and the file it counts against: the module's own
    file, ``<made>`` for a module the code under test made (no file, no spec, not a task's file and
    not loaded before the hook), and ``""`` (never the code under test's) where it cannot be read.
    importlib's lazy loading (a class of its own until the first attribute is read) is none outside
    the work dir."""
    lazy, work, loaded = _HOOK[0]
    try:
        namespace = _MODULE_DICT.__get__(module)
        name, file = namespace.get("__name__"), namespace.get("__file__")
        name = name if type(name) is str else "?"
        if (old is lazy or new is lazy) and type(file) is str and not file.startswith(work):
            return None
        what = f"module {name}'s class (set to {getattr(new, '__qualname__', '?')!s}: the module is the same object, " \
               "its attribute lookups not)"
        if type(file) is str:
            return what, file
        made_here = namespace.get("__spec__") is None and id(module) not in loaded and \
            not any(m is module for ms in _MADE.values() for m in ms)
        return what, "<made>" if made_here else ""
    except Exception:  # a hook must not raise: the finding stands, counted against no one
        return "module ?'s class (set: the module is the same object, its attribute lookups not)", ""


def audit_functions() -> None:
    """Add the hook that records replaced function code and defaults, module classes and trace
    setters called (once per process: it stays), in the work dir (the current one)."""
    if not _HOOK:
        _HOOK.append((importlib.util._LazyModule, os.path.join(os.getcwd(), ""),
                      frozenset(id(m) for m in list(_LIVE.values()))))
        sys.addaudithook(_audit)


def recoded(own: Any) -> list[str]:
    """Functions whose code or defaults were replaced and modules whose class was, but those
    ``own(filename)`` says are the code under test's (its files, or code it compiled or made itself:
    a file name like ``<string>``)."""
    return list(dict.fromkeys(what for what, filename in _RECODED if not (filename.startswith("<") or own(filename))))


def traced() -> list[str]:
    """The setters called since the execution started (each at most once: with a function through
    the wrappers, by any route and with any argument once a graded run's audit hook is in), plus a
    trace or profile function set now however it was set."""
    found = list(dict.fromkeys(_TRACED))
    if sys.gettrace() is not None and "sys.settrace" not in found:
        found.append("sys.gettrace()")
    if sys.getprofile() is not None and "sys.setprofile" not in found:
        found.append("sys.getprofile()")
    return found


# The modules pytest's rewrite hook executed from the task's files (test modules, conftests, trusted
# helpers), by file. The code under test runs before later test modules are collected, and a module
# object it puts in `sys.modules` (a `ModuleType` with a test module's `__file__`, or a meta path
# finder's) is what pytest collects and a test module's import binds: a stub test module whose tests
# pass, a helper whose EXPECTED is 0. Such a module was never made from its file.
_MADE: dict[str, list[Any]] = {}


def made(module: Any) -> None:
    """Keep ``module``, which pytest's rewrite hook is about to execute from the file its spec names
    (called from the hook's ``exec_module``, wrapped by :func:`codemoe.sandbox.honest.install`)."""
    origin = getattr(getattr(module, "__spec__", None), "origin", None)
    if type(origin) is str:
        _MADE.setdefault(os.path.abspath(origin), []).append(module)


def made_from(path: str, module: Any) -> bool:
    """Whether ``module`` is one pytest's rewrite hook executed from the file at (absolute) ``path``
    (checked after every graded test: no path is normalised here)."""
    return any(m is module for m in _MADE.get(path, ()))


def impostors(paths: dict[str, list[str]], imported: set[str], root: str = "") -> list[str]:
    """Entries of ``sys.modules`` that stand for a task's file without being made from it: under a
    name an import of the file has (``paths``: absolute path -> those names), a module that claims
    the file (its ``__file__``) or that a trusted test module imports by that name. Another module
    of the name (an installed ``tests`` package) is let be unless a test module imports the name.
    Only plain modules are read, and only their ``__dict__``: nothing of the code under test runs.
    Paths are shown relative to ``root``."""
    found = []
    for path, names in paths.items():
        for name in names:
            module = _LIVE.get(name)
            if module is None:
                continue
            if made_from(path, module):
                if type(module) is not types.ModuleType:  # its attributes answered by a class of the code under test
                    found.append(f"sys.modules[{name!r}].__class__ (given a class of its own)")
                continue
            claims = type(module) is types.ModuleType and module.__dict__.get("__file__") == path
            if claims or name in imported:
                shown = path[len(root):] if root and path.startswith(root) else path
                found.append(f"sys.modules[{name!r}] (not the module made from {shown})")
    return found


def record_imports(path: str, tree: ast.Module, inner: Iterable[str] = ()) -> None:
    """Keep the imports of a test module pytest rewrites (called from its rewrite hook, before the
    module runs): its top-level ones for :meth:`Snapshot.imported`, and ``inner``, the modules it
    imports elsewhere (found by :mod:`codemoe.sandbox.honest`'s reading of the module), for
    :meth:`Snapshot.watch_modules`."""
    path = os.path.abspath(path)
    rebound = _rebound(tree)
    found = imports(tree)
    _IMPORTS[path] = [entry for entry in found if entry[0] not in rebound]
    _OWN[path] = rebound | {entry[0] for entry in found}
    _STARS[path] = ["." * node.level + (node.module or "") for node in tree.body
                    if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names)]
    _INNER[path] = set(inner)
    for node in ast.walk(tree):
        targets = (node.targets if isinstance(node, (ast.Assign, ast.Delete)) else
                   [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
        _ASSIGNED.update(t.attr for t in targets if isinstance(t, ast.Attribute))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr") \
                and len(node.args) >= 2:
            name = node.args[1]  # a name computed at run time: any (tests generated onto a class, a registry)
            _ASSIGNED.add(name.value if isinstance(name, ast.Constant) and isinstance(name.value, str) else _ANY)


# Names pytest reads from a test module's (or conftest's) namespace to decide what to run and how,
# with the hooks and plugins of a conftest (every `pytest_*` name): a module that does not bind one
# itself got it from a star import (the code under test's `pytestmark = pytest.mark.skip` skipped
# every test, `pytest.mark.xfail` turned failures into expected ones)
COLLECTION_NAMES = ("pytestmark", "__test__")


# The builtins a test checks a result with. A library's own API may well be named like the others
# (astropy's `min` unit, a `filter` or `open` of its own, its `ConnectionError`), and a test module
# that star-imports it means that one; a star import of the code under test that shadows those is
# flagged by `runner_tampering` instead (a module-level binding of a builtin's name the change adds)
_GUARDED_BUILTINS = frozenset({
    "isinstance", "issubclass", "len", "type", "hasattr", "getattr", "callable", "repr", "ascii", "str", "int",
    "float", "bool", "complex", "bytes", "bytearray", "list", "tuple", "dict", "set", "frozenset", "sorted",
    "reversed", "all", "any", "id", "iter", "next", "enumerate", "range", "zip", "vars", "dir", "object", "slice",
    "memoryview", "chr", "ord",
})


def foreign_names(label: str, mapping: dict[str, Any], path: str,
                  vouched: Callable[[types.ModuleType], bool] = lambda module: False) -> list[str]:
    """Names the test module at ``path`` holds (``mapping``, its namespace) that only a star import
    can have put there and that change what its tests run with: :data:`COLLECTION_NAMES`, and the
    name of a builtin tests check results with (``len = lambda x: 2`` in the code under test
    shadowed ``len`` in every test of a module that star-imports it) that its own statements never bind (recorded by
    :func:`record_imports`), unless a star-imported module ``vouched`` for holds that very value
    (a trusted helper's own ``any``); a ``__builtins__`` other than the copy its rewrite gave it; and
    a name of the rewrites' own that is not what they bound."""
    own = _OWN.get(os.path.abspath(path))
    if own is None:
        return []
    found = [f"{label}.{name} (not bound by the module's own source)" for name in sorted(mapping)
             if (name in COLLECTION_NAMES or name.startswith("pytest_")) and name not in own]
    stars = [vars(module) for module in (_LIVE.get(resolved_name(name, mapping)) for name in _STARS.get(os.path.abspath(path), ()))
             if type(module) is types.ModuleType and vouched(module)]
    found += [f"{label}.{name} (shadows the builtin; not bound by the module's own source)"
              for name in sorted(_GUARDED_BUILTINS.intersection(mapping)) if name not in own
              and not any(star.get(name, _MISSING) is mapping[name] for star in stars)]
    given = _GIVEN_BUILTINS.get(label)
    if given is not None and mapping.get("__builtins__") is not given:
        found.append(f"{label}.__builtins__ (not the builtins its rewrite gave it)")
    # the names the rewrites bind (not identifiers, so no statement of the module binds them; a star
    # import does, of any string in the imported module's __all__: '@codemoe_compare' answering yes
    # made every comparison of the module pass)
    found += [f"{label}.{name} (not what the rewrite bound)" for name, expected in _rewrite_names().items()
              if mapping.get(name, expected) is not expected]
    return found


@functools.cache
def _rewrite_names() -> dict[str, Any]:
    """What pytest's rewrite and :mod:`codemoe.sandbox.honest`'s instrumentation bind in a module."""
    import _pytest.assertion.rewrite as rewrite
    from codemoe.sandbox import honest

    return {"@py_builtins": builtins, "@pytest_ar": rewrite, honest.COMPARE_NAME: honest.compare,
            honest.CHECK_NAME: honest.check_call, honest.BUILTINS_NAME: builtins_for, honest.DEFINED_NAME: defined}


def recorded_inner_imports(path: str) -> set[str]:
    """What :func:`record_imports` kept of the module at ``path``'s other imports."""
    return _INNER.get(os.path.abspath(path), set())


def recorded_imports(path: str) -> list[tuple[str, str, str | None]]:
    """What :func:`record_imports` kept for the module at ``path``."""
    return _IMPORTS.get(os.path.abspath(path), [])


# The task's files as the caller sent them. The code under test runs before later test modules are
# collected and can write the work dir: a trusted test module rewritten on disk (or a cached pyc
# planted beside it, which pytest's rewrite hook would load without reading the source) made a
# failing test pass. Each execution names these files (expect_files); what pytest reads of them is
# compared as it is read (read_source), and every one again on disk at each check (changed_files).
_SENT: dict[str, bytes] = {}  # absolute path -> the content the caller sent
_READ: dict[str, bool] = {}  # absolute path -> whether what pytest read to rewrite it was that content
_EMPTY: dict[str, bytes] = {}  # the sent files laid out empty (ExecutionRequest.private) -> their source's SHA-256
_SHIPPED: set[str] = set()  # absolute paths of every file the caller sent, trusted or not
_UNSHIPPED: list[str] = []  # module files the caller did not send, written while the tests ran: refused when found
_WATCHING = [False]  # from the session's start (watch_unshipped) until the next expect_files
# the session's start as the kernel stamps a file's change time (ns): a file outside the work dir
# whose change time is not before it was written or changed while the tests ran
_SINCE = [0]


def expect_files(files: dict[str, bytes], shipped: Iterable[str] = (), private: dict[str, bytes] | None = None) -> None:
    """The files whose content is the caller's (a graded run's trusted files and its canary module),
    by absolute path, and ``shipped``, every file the caller sent (the only modules of the work dir
    an import may load: :func:`source_only`); set per execution, before any code under test runs.
    ``private``: path -> SHA-256 of the source of the files laid out empty (pytest reads them from
    memory); their text is kept nowhere here, only what pytest must read as them."""
    _SENT.clear()
    _SENT.update(files)
    _EMPTY.clear()
    _EMPTY.update(private or {})
    for path in _EMPTY:
        _SENT[path] = b""  # what the disk holds
    _READ.clear()
    _SHIPPED.clear()
    _SHIPPED.update(shipped)
    _SHIPPED.update(files)
    _UNSHIPPED.clear()
    _WATCHING[0] = False


def watch_unshipped(root: str, *, present: bool = False) -> None:
    """From now on (the session's start, after the task's setup commands) an import under ``root``
    passes over module files the caller did not send (:class:`_SentFirst`), and one anywhere else
    over module files written or changed from now on (:class:`_Settled`). With ``present``, every
    file under ``root`` now counts as sent: what the setup made (an installed package, a generated
    ``_version.py``) is the task's."""
    if present:
        for folder, _, names in os.walk(root):
            _SHIPPED.update(os.path.join(folder, name) for name in names)
    _SINCE[0] = _file_clock(root)
    _WATCHING[0] = True


def _file_clock(folder: str) -> int:
    """The kernel's time for a file changed now, in ns: the change time of a fresh unnamed file in
    ``folder`` (the clock file times come from is coarser than ``time.time_ns``, so a file changed
    right after this call may carry a change time just before it). Where such a file cannot be made,
    a second before the process's clock, which counts a file changed in that second as changed later."""
    try:
        fd = os.open(folder, os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o600)
    except (OSError, AttributeError):
        return time.time_ns() - 1_000_000_000
    try:
        return os.fstat(fd).st_ctime_ns
    finally:
        os.close(fd)


def _changed_since_start(path: str) -> bool:
    """Whether ``path`` (or the link it is) was written or changed since the session started. A
    change time cannot be set back by the code under test: every write, rename, link and attribute
    change stamps it with the current time (``utime`` sets the others)."""
    try:
        changed = max(os.lstat(path).st_ctime_ns, os.stat(path).st_ctime_ns)
    except OSError:
        return True  # gone or unreadable as the import found it: not a module to trust
    return changed >= _SINCE[0]


def _refuse(origin: str) -> None:
    if origin not in _UNSHIPPED:
        _UNSHIPPED.append(origin)


def read_source(path: str, source: bytes) -> None:
    """Called by the rewrite hook with the bytes pytest read to rewrite the module at ``path``."""
    path = os.path.abspath(path)
    if path in _EMPTY:
        _READ[path] = _READ.get(path, True) and hashlib.sha256(source).digest() == _EMPTY[path]
    elif path in _SENT:
        _READ[path] = _READ.get(path, True) and source == _SENT[path]


class _SourceOnly(importlib.machinery.SourceFileLoader):
    """A module's code compiled from its source file, never from a cached pyc beside it."""

    def get_code(self, fullname: str) -> types.CodeType:
        return self.source_to_code(self.get_data(self.path), self.path)


class _SentFirst(importlib.machinery.FileFinder):
    """A folder's modules as Python finds them, except that a name the caller sent a file for
    (``helpers.py``, ``helpers/__init__.py``) is that file, whatever else of that name the code
    under test made beside it (a ``helpers/`` package, an extension module, which Python would
    otherwise take first), and that a module file the caller did not send (one written while the
    tests ran: a ``colorsys.py`` beside a test that imports ``colorsys``, which Python would take
    before the standard library's) is not found here and is named (:func:`changed_files`)."""

    def find_spec(self, fullname: str, target: Any = None) -> Any:
        folder = os.path.abspath(self.path or os.getcwd())
        tail = fullname.rpartition(".")[2]
        for path, package in ((os.path.join(folder, tail, "__init__.py"), True), (os.path.join(folder, tail + ".py"), False)):
            if path in _SENT:
                return importlib.util.spec_from_file_location(
                    fullname, path, loader=_SourceOnly(fullname, path),
                    submodule_search_locations=[os.path.dirname(path)] if package else None)
        spec = super().find_spec(fullname, target)
        origin = spec.origin if spec is not None and spec.has_location else None
        if origin and _WATCHING[0] and origin not in _SHIPPED:
            _refuse(origin)
            return None  # the import goes on along the path, as if the file were not there
        return spec


class _Settled(importlib.machinery.FileFinder):
    """A folder outside the work dir, whose modules Python finds as usual, except a module file
    written or changed while the tests ran (``/tmp/x/colorsys.py`` in a folder the code under test
    put first on ``sys.path``) where the tests would otherwise import another module of its name
    (the standard library's, the site-packages view's, one the task ships): it is not found here,
    and is named (:func:`changed_files`). The task ships its modules in the work dir; the standard
    library and the site-packages view are read-only mounts, whose files nothing changes. A module a
    test writes of a name found nowhere else (one it imports from its ``tmp_path``) imports."""

    def find_spec(self, fullname: str, target: Any = None) -> Any:
        spec = super().find_spec(fullname, target)
        origin = spec.origin if spec is not None and spec.has_location else None
        if origin and _WATCHING[0] and _changed_since_start(origin) and _in_place_of_another(fullname, self.path, origin):
            return None
        return spec


class _Archive:
    """An archive on the import path (``zipimport``'s), held to the rule of :class:`_Settled`."""

    def __init__(self, path: str) -> None:
        self.importer = zipimport.zipimporter(path)  # ZipImportError (an ImportError): not an archive
        self.path = path

    def find_spec(self, fullname: str, target: Any = None) -> Any:
        spec = self.importer.find_spec(fullname, target)
        archive = self.importer.archive
        if (spec is not None and _WATCHING[0] and _changed_since_start(archive)
                and _in_place_of_another(fullname, self.path, spec.origin or archive)):
            return None
        return spec

    def invalidate_caches(self) -> None:
        self.importer.invalidate_caches()


_LOOKING = [False]  # while :func:`_in_place_of_another` looks along the path


def _in_place_of_another(fullname: str, folder: str, origin: str) -> bool:
    """Whether ``fullname``, found at ``origin`` in ``folder`` (a file changed while the tests ran), is
    also found elsewhere on its import path (a file nothing changed, or one the task ships): then it
    is refused (named, and passed over). While such a look runs every changed file is passed over."""
    if _LOOKING[0]:
        return True
    parent = fullname.rpartition(".")[0]
    path = getattr(sys.modules.get(parent), "__path__", None) if parent else sys.path
    here = os.path.abspath(folder or os.getcwd())
    others = [p for p in (path or []) if isinstance(p, str) and os.path.abspath(p or os.getcwd()) != here]
    _LOOKING[0] = True
    try:
        found = importlib.machinery.PathFinder.find_spec(fullname, others) is not None
    except Exception:
        found = True
    finally:
        _LOOKING[0] = False
    if found:
        _refuse(origin)
    return found


def source_only(root: str) -> None:
    """Make every import of a module under ``root`` compile its source, and a name the caller sent
    a file for import that file: a pyc the code under test writes beside a trusted module that
    Python's own import loads (one outside the folders pytest rewrites), or a package it makes
    beside a trusted helper (``tests/helpers/`` beside ``tests/helpers.py``), is never code that
    runs. Anywhere else (a folder or an archive on the import path outside the work dir) a module
    file written while the tests ran is passed over where it would stand in for another module of
    its name (:class:`_Settled`). pytest's rewrite hook finds modules through these finders too, and
    reads no cached pyc (:func:`codemoe.sandbox.honest.install`)."""
    root = os.path.abspath(root)
    machinery = importlib.machinery
    loaders = ((machinery.ExtensionFileLoader, machinery.EXTENSION_SUFFIXES), (_SourceOnly, machinery.SOURCE_SUFFIXES))
    sent_first, settled = _SentFirst.path_hook(*loaders), _Settled.path_hook(*loaders)

    def under(path: str) -> bool:
        full = os.path.abspath(path or os.getcwd())
        return full == root or full.startswith(root + os.sep)

    def hook(path: str) -> Any:
        if under(path):
            return sent_first(path)
        if os.path.isdir(path or "."):
            return settled(path)
        return _Archive(path)  # or ImportError: nothing Python imports from

    def writable(path: str) -> bool:  # a folder the execution may write (its tmpfs): no read-only mount
        try:
            return not os.statvfs(path or ".").f_flag & os.ST_RDONLY
        except OSError:
            return True

    sys.path_hooks.insert(0, hook)
    # finders made before (the fork server's, of the standard library's folders) stand where nothing
    # can change: those of the work dir and of any folder the execution may write are made again
    for path in [p for p in sys.path_importer_cache if under(p) or writable(p)]:
        del sys.path_importer_cache[path]


def _on_disk(path: str, _open: Any = os.open, _read: Any = os.read, _close: Any = os.close) -> bytes | None:
    try:
        fd = _open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        chunks = []
        while chunk := _read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        _close(fd)


def changed_data() -> list[str]:
    """The expected files other than Python modules (the data a test reads) that are not the
    caller's on disk now: checked after every test, so one changed for a test and put back before
    the session ends is found (a module is compared as pytest reads it)."""
    return _not_on_disk(path for path in _SENT if not path.endswith(".py"))


def _not_on_disk(paths: Iterable[str]) -> list[str]:
    """Of ``paths`` (expected files), those whose bytes on disk are not the caller's."""
    return [f"{path} (on disk)" for path in paths if _on_disk(path) != _SENT[path]]


def changed_files(rewritten: Iterable[str] = ()) -> list[str]:
    """The expected files (absolute paths, with what was wrong) that pytest read as other content
    than the caller's, that are not the caller's on disk now (changed, replaced, deleted; a link
    counts as not the file), of ``rewritten`` (the files of the loaded modules pytest's rewrite
    hook loaded), those it loaded without reading their source, and the module files of the work
    dir the caller did not send that an import found (and passed over)."""
    found = [f"{path} (read as other content)" for path, same in _READ.items() if not same]
    found += _not_on_disk(_SENT)
    found += [f"{path} (loaded without its source)" for path in map(os.path.abspath, rewritten)
              if path in _SENT and path not in _READ]
    found += [f"{path} (a module the task does not ship, written while the tests ran)" for path in _UNSHIPPED]
    return found


_TAKEN: list[Snapshot] = []


def builtins_for(module: str) -> dict[str, Any]:
    """The builtins a test module's functions use: a copy of them as the fork server loaded them
    (the test module's rewrite sets ``__builtins__`` to it first thing), watched like the rest. A
    builtin the code under test replaces (``builtins.len = ...``), even one that puts the original
    back the first time it is called, is not what a test function calls; the code under test and
    the libraries it calls see the real ``builtins`` (a test's ``monkeypatch.setattr(builtins, ...)``
    still reaches them)."""
    snapshot = taken()
    frozen = dict(snapshot.builtins if snapshot is not None else vars(builtins))
    if snapshot is not None:
        snapshot.watch(f"{module}.__builtins__", frozen)
    _GIVEN_BUILTINS[module] = frozen
    return frozen


_GIVEN_BUILTINS: dict[str, dict[str, Any]] = {}  # test module -> the builtins builtins_for gave it


def take() -> Snapshot:
    """Take this process's snapshot (the pytest fork server, once, after warming up)."""
    _TAKEN[:] = [Snapshot.take()]
    return _TAKEN[0]


def taken() -> Snapshot | None:
    """The snapshot :func:`take` took in this process, if any."""
    return _TAKEN[0] if _TAKEN else None
