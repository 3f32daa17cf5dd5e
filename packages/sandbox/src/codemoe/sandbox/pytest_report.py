"""The pytest plugin behind the ``pytest`` runner: per-test outcomes, sent with the nonce.

Loaded only in the pytest fork server, before any code under test exists. Outcomes go over the
result channel (descriptor 3) when the session finishes; see :mod:`codemoe.sandbox.api` for why
they count only with the nonce, and :mod:`codemoe.sandbox.canary` for what checks them in a graded
run. What the report path calls is bound here, at import: a JSON encoder built once (the C
encoder, holding its own references), ``os.write``. A program that rebinds ``json.dumps``,
``json.encoder.*``, ``os.write`` or ``os._exit`` changes nothing of what is sent. A test that
failed because an object under test lied to one of its comparisons
(:class:`codemoe.sandbox.honest.ForgedComparison`) is named in the report's
``forged_comparisons``. Names the code under test replaced or deleted in what the tests call (the
standard library, ``builtins``, pytest, a trusted test module's own names: see
:mod:`codemoe.sandbox.pristine`) are named in its ``tampered``.
"""

from __future__ import annotations

import json.encoder
import os
import posixpath
import sys
import types
from collections.abc import Callable
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Any

import pytest
from _pytest.assertion.rewrite import AssertionRewritingHook
from _pytest.skipping import evaluate_skip_marks, xfailed_key
from codemoe.sandbox import honest
from codemoe.sandbox.pristine import (
    Snapshot,
    changed_contents,
    changed_data,
    changed_files,
    classes,
    defined_code,
    definitions,
    foreign_names,
    impostors,
    made_from,
    recoded,
    recorded_imports,
    recorded_inner_imports,
    resolved_name,
    settle_libraries,
    traced,
    watch_unshipped,
)
from codemoe.sandbox.verdict import SIGNED

__all__ = ["Reporter", "encode_line", "sign_line"]

CHANNEL_FD = 3
# codemoe.sandbox.agent.task_setup.SETUP_ENV (that package is not loaded here): set when the task's
# setup commands ran before the session
TASK_SETUP_ENV = "CODEMOE_TASK_SETUP"
_OUTCOMES = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}  # the worse, the higher
_FORGED = "ForgedComparison"
_UNSET = object()
_MODULE_DICT = types.ModuleType.__dict__["__dict__"].__get__  # a module's namespace, whatever its class answers
_GETCWD, _CHDIR = os.getcwd, os.chdir  # bound at import, before any code under test
_MODULES = sys.modules  # bound at import: rebinding ``sys.modules`` does not hide a module from the reporter


def _refuse(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not part of a report")


def _bind_encoder() -> Callable[[Any], str]:
    make = json.encoder.c_make_encoder
    if make is not None:
        encoder = make(None, _refuse, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, False)
        join = "".join
        return lambda value: join(encoder(value, 0))
    python_encoder = json.JSONEncoder(allow_nan=False, default=_refuse)  # no C accelerator: the pure one
    return python_encoder.encode


_ENCODE = _bind_encoder()


def encode_line(message: dict[str, Any], _encode: Callable[[Any], str] = _ENCODE) -> bytes:
    """One JSON line of a report, with the encoder bound at import."""
    return (_encode(message) + "\n").encode()


def _bind_digest() -> Callable[[bytes, bytes, str], bytes]:
    try:
        from _hashlib import hmac_digest  # OpenSSL's, in C: nothing a program can rebind is on its path
    except ImportError:  # a Python built without OpenSSL: the standard library's (named in docs/reliability.md)
        import hmac

        return hmac.digest
    return hmac_digest


_DIGEST = _bind_digest()


def sign_line(message: dict[str, Any], key: str, _encode: Callable[[Any], str] = _ENCODE,
              _digest: Callable[[bytes, bytes, str], bytes] = _DIGEST) -> bytes:
    """One channel line that carries ``message`` and its HMAC-SHA256 under ``key`` (the execution's
    nonce), never the key itself: code under test that puts a pipe of its own in place of the channel
    reads a report it cannot change or copy into another (:func:`codemoe.sandbox.verdict.opened`)."""
    body = _encode(message)
    mac = _digest(key.encode(), body.encode(), "sha256").hex()
    return (_encode({"kind": SIGNED, "mac": mac, "body": body}) + "\n").encode()


def _text(value: Any) -> str | None:
    """``value`` as a plain ``str`` (a subclass loses what it overrides); None if it is no string."""
    return str.__str__(value) if isinstance(value, str) else None


class Reporter:
    """Records each test's outcome and sends the report, with the nonce, when the session ends.

    ``graded``: a test module outside ``trusted`` may not load plugins (``pytest_plugins``).
    ``canary``: a module (relative to the root dir) whose tests run after every collected one,
    whatever the arguments select. ``pristine``: what was loaded before any code under test, taken as
    it is when the session starts and checked after collection and when the session finishes.
    ``sealed``: the task's files are read-only mounts (:func:`codemoe.sandbox.isolation.seal_files`),
    so its data files need no check after every test (they are still compared at the end).
    """

    def __init__(self, nonce: str, *, graded: bool = False, trusted: frozenset[str] = frozenset(),
                 canary: str = "", pristine: Snapshot | None = None, sealed: bool = False,
                 write: Callable[[int, bytes], int] = os.write) -> None:
        self.nonce = nonce
        self.graded = graded
        self.sealed = sealed
        self.trusted = trusted
        self.canary = canary
        self.tests: dict[str, str] = {}
        self.collect_errors: list[str] = []
        self.memory = False
        self.forged: list[str] = []  # tests failed by a comparison an object under test lied to
        self.unmarked_skips: list[str] = []  # graded: tests skipped (or xfailed) while they ran, no mark of theirs saying so
        self.pristine = pristine
        self.tampered: list[str] = []  # "module.name (changed by the end of WHEN)", at most 20
        self._files_seen: set[str] = set()  # findings of the task's files and held contents, named once
        self._test_modules: list[str] = []  # the trusted test modules' names, found after collection
        self._made_names: dict[str, list[str]] = {}  # graded: file the rewrite hook loads -> the names it imports as
        self._imported: set[str] = set()  # graded: the modules the trusted modules import, by name
        self._root = ""  # the root dir, with a trailing slash
        self._write = write

    def send(self, message: dict[str, Any]) -> None:
        """Write ``message``, signed with the nonce, to the result channel."""
        view = memoryview(sign_line(message, self.nonce))
        write = self._write
        while view:
            view = view[write(CHANNEL_FD, view):]

    def pytest_configure(self, config: Any) -> None:
        self._root = str(config.rootpath).rstrip("/") + "/"
        if not self.graded:
            return
        manager = config.pluginmanager
        consider, root, trusted = manager.consider_module, str(config.rootpath), self.trusted

        def consider_module(module: Any) -> None:
            path = posixpath.relpath(str(getattr(module, "__file__", "") or ""), root)
            if getattr(module, "pytest_plugins", None) and path not in trusted:
                raise RuntimeError(f"{path}: pytest_plugins in a test module the task does not ship; plugins "
                                   "from the work dir are off in graded runs")
            consider(module)

        manager.consider_module = consider_module
        importconftest = manager._importconftest

        def _importconftest(conftestpath: Any, *args: Any, **kwargs: Any) -> Any:
            path = posixpath.relpath(str(conftestpath), root)
            if path not in trusted:  # none is laid out in a graded run: this one was written since
                self._note([f"file {path} (a conftest.py the task does not ship, written while the tests ran)"],
                           "collection")
                raise RuntimeError(f"{path}: a conftest.py the task does not ship, written while the tests "
                                   "ran; plugins from the work dir are off in graded runs")
            module = importconftest(conftestpath, *args, **kwargs)
            if not made_from(str(conftestpath), module):
                self._note([f"{path} (the conftest module pytest loaded is not made from the file)"], "collection")
            return module

        manager._importconftest = _importconftest

    def _check(self, when: str, rewritten: list[str] | None = None) -> None:
        if self.pristine is not None:
            self._note(self.pristine.check(), when)
        if self.graded:  # the task's files as it sent them (codemoe.sandbox.pristine.expect_files)
            self._found([], when, self._interim())
            self._found(changed_files(rewritten or ()), when,  # held contents (parametrize cases: at collection)
                        [c for name in self._test_modules for c in changed_contents(name, when == "collection")])

    def _interim(self) -> list[str]:
        """Graded, what is checked at every check and after every test: a trace function set, a
        function's code replaced, a module in place of a task's file."""
        found = _tracing() + _recoded(self._root, self.trusted)
        return found + impostors(self._made_names, self._imported, self._root) if self._made_names else found

    def _found(self, files: list[str], when: str, more: list[str] | None = None) -> None:
        """Name each finding of the task's files (absolute paths) and ``more`` once."""
        root = self._root
        found = [f"file {f[len(root):] if f.startswith(root) else f}" for f in files] + (more or [])
        found = [f for f in found if f not in self._files_seen]
        self._files_seen.update(found)
        self._note(found, when)

    def _note(self, names: list[str], when: str) -> None:
        self.tampered += [f"{name} (changed by the end of {when})" for name in names][:max(0, 20 - len(self.tampered))]

    def pytest_load_initial_conftests(self, early_config: Any, parser: Any, args: list[str]) -> None:
        """After a task's setup commands (their plugin's hook runs first), before the first conftest:
        from here on a graded run loads no shared library written while it ran."""
        if self.graded:
            settle_libraries(_GETCWD())

    @pytest.hookimpl(trylast=True)  # after pytest's own session setup (its hooks, faulthandler, ...)
    def pytest_sessionstart(self, session: Any) -> None:
        honest.reseed()  # drawn again: code under test may have run while pytest configured (rebase)
        if self.pristine is not None:
            self._note(self.pristine.rebase(), "configuration")
        if self.graded:  # modules the code under test writes from here on are not imported
            watch_unshipped(self._root.rstrip("/"), present=TASK_SETUP_ENV in os.environ)

    def _trusted_namespaces(self, session: Any, modules: list[Any]) -> set[int]:
        """The ids of the namespaces of the modules made from trusted files: ``modules`` (those
        ``sys.modules`` holds), and every conftest pytest registered (it takes each non-package
        ``conftest`` out of ``sys.modules`` before importing the next)."""
        root = self._root
        modules = modules + [plugin for plugin in session.config.pluginmanager.get_plugins()
                    if type(plugin) is types.ModuleType and str(getattr(plugin, "__file__", "") or "").startswith(root)
                    and plugin.__file__[len(root):] in self.trusted]
        return {id(vars(module)) for module in modules}

    def _vouched(self, module: Any) -> bool:
        """A module whose names a test module may take by a star import: loaded before any code under
        test, one the task trusts, or one from a read-only file outside the work dir."""
        namespace = vars(module)
        if self.pristine is not None and self.pristine.holds_namespace(namespace):
            return True
        origin, root = _origin(namespace), self._root
        return (origin is not None and origin.startswith(root) and origin[len(root):] in self.trusted) \
            or _outside_read_only(namespace, root)

    # the checks run outside every other wrapper of the hook (tryfirst, registered last): what pytest
    # swaps for the length of collection or of the session's end (warnings capture) is back
    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_collection(self, session: Any) -> Any:
        try:
            return (yield)
        finally:
            root = self._root
            rewritten = []  # trusted modules (and the canaries) pytest's rewrite hook loaded
            if self.graded:
                canary = frozenset({self.canary} if self.canary else ())
                modules = []  # the trusted modules but the canary's
                named: dict[str, str] = {}  # file -> module name, the canary's too
                for name, module in _trusted_modules(self.trusted | canary, root):
                    if type(module) is not types.ModuleType:  # its attributes answered by the code under test
                        self._note([f"{name}.__class__ (a module of the task's files given a class of its own)"],
                                   "collection")
                        continue
                    named[module.__file__] = name
                    if isinstance(getattr(getattr(module, "__spec__", None), "loader", None), AssertionRewritingHook):
                        rewritten.append(module.__file__)
                    if module.__file__ == root + self.canary:
                        continue
                    self._test_modules.append(name)
                    modules.append(module)
                    if self.pristine is not None:  # watched from here, held to what they defined
                        self.pristine.watch(name, vars(module), definitions(name))
                        for label, namespace, entries in classes(name):  # what each class statement bound
                            self.pristine.watch(f"{name}.{label}", namespace, entries, closed=True)
                        self._note(self.pristine.imported(name, vars(module), recorded_imports(module.__file__)),
                                   "collection")
                        self.pristine.watch_modules(recorded_inner_imports(module.__file__))
                    self._note(foreign_names(name, vars(module), module.__file__, self._vouched), "collection")
                if self.pristine is not None:
                    self._note(_foreign_fixtures(session, self._test_modules, self._trusted_namespaces(session, modules),
                                                 self.pristine, root), "collection")
                self._note(_collected_not_made(session, self.trusted, root), "collection")
                self._note(_tests_not_defined(session, named), "collection")
                self._made_names = {root + path: _import_names(path) for path in _made_files(self.trusted)}
                for module in modules:
                    self._imported |= _imported_names(module)
            self._check("collection", rewritten)
            honest.forget_private()  # pytest's items hold them; an import by name finds their empty files

    @pytest.hookimpl(trylast=True)  # after selection (-k, -m, --deselect): the canaries always run, last
    def pytest_collection_modifyitems(self, session: Any, config: Any, items: list[Any]) -> None:
        if self.canary:
            module = pytest.Module.from_parent(session, path=Path(str(config.rootpath)) / self.canary)
            items.extend(module.collect())

    def _record(self, nodeid: Any, outcome: Any) -> None:
        """A test's outcome is the worst of its reports: a test reports more than once (setup, call,
        teardown; and a ``unittest`` subtest that fails logs a failed call report of the test's own
        node id, then the test's call report, ``passed``), and a later report never makes a failed
        test pass."""
        nodeid, outcome = _text(nodeid), _text(outcome)
        if nodeid is not None and outcome in _OUTCOMES:
            before = self.tests.get(nodeid)
            if before is None or _OUTCOMES[outcome] >= _OUTCOMES[before]:
                self.tests[nodeid] = outcome

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self._record(report.nodeid or "<collection>", "error")
            self.collect_errors.append(_text(crash_line(report)) or "")
        elif report.skipped and self.graded:  # a whole module (or folder) skipped as it was imported: by
            nodeid = _text(report.nodeid) or "<collection>"  # the code under test it imports, as likely
            self._record(nodeid, "skipped")                  # as by itself: its tests did not run
            self._unmarked(nodeid)

    @pytest.hookimpl(tryfirst=True)  # before any fixture or mark of the test runs
    def pytest_runtest_setup(self, item: Any) -> None:
        """Graded, every test starts in the work dir: a relative path a test opens is the task's file,
        not one the code under test wrote elsewhere and moved the working directory to at import."""
        root = self._root[:-1]
        if not self.graded or not root:
            return
        try:
            here = _GETCWD()
        except OSError:  # the folder it was in is gone
            here = ""
        if here != root:
            _CHDIR(root)

    @pytest.hookimpl(wrapper=True, tryfirst=True)  # outermost: the report as pytest's skipping plugin left it
    def pytest_runtest_makereport(self, item: Any, call: Any) -> Any:
        report = yield
        if self.graded and report.skipped and not _marked_to_skip(item):
            self._unmarked(_text(report.nodeid))
        return report

    # outermost, as the collection's check: what pytest swaps for a test's length (warnings capture) is back
    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: Any, nextitem: Any) -> Any:
        """Graded, the runner's own modules and classes (pytest's, pluggy's, this reporter's,
        ``builtins``: :meth:`~codemoe.sandbox.pristine.Snapshot.check_runner`) are checked after
        every test too, not only with everything else after collection and at the end: a
        replacement that lived through the tests and was put back before the end (the reporter's
        ``_record`` told to record failures as passes, then restored when the first canary ran) is
        named at the first test it outlived."""
        try:
            return (yield)
        finally:
            if self.graded and self.pristine is not None:
                self._note(self.pristine.check_runner(), f"test {_text(item.nodeid)}")

    def _unmarked(self, nodeid: str | None) -> None:
        """List a skip no mark of the test decided (once)."""
        if nodeid is not None and nodeid not in self.unmarked_skips:
            self.unmarked_skips.append(nodeid)

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.failed:
            crash = crash_line(report)
            if crash.startswith("MemoryError"):
                self.memory = True
            nodeid = _text(report.nodeid)
            if _FORGED in crash and nodeid is not None and nodeid not in self.forged:
                self.forged.append(nodeid)
        if report.when == "call":
            outcome = report.outcome
            if hasattr(report, "wasxfail"):
                outcome = "skipped" if report.skipped else "passed"
            self._record(report.nodeid, outcome)
        elif report.failed:
            self._record(report.nodeid, "error")
        elif report.skipped:
            self._record(report.nodeid, "skipped")
        if report.when == "teardown" and self.graded:  # after every test, and the data the tests read (unless sealed)
            self._found([] if self.sealed else changed_data(), f"test {_text(report.nodeid)}", self._interim())

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_sessionfinish(self, session: Any, exitstatus: int) -> Any:
        try:
            return (yield)
        finally:
            self._check("the session")
            self._send_report(exitstatus)

    def _send_report(self, exitstatus: Any) -> None:
        self.send({
            "kind": "pytest",
            "tests": self.tests,
            "exitstatus": int.__index__(exitstatus) if isinstance(exitstatus, int) else -1,
            "collect_errors": self.collect_errors[:20],
            "memory": bool(self.memory),
            "forged_comparisons": self.forged[:20],
            "tampered": self.tampered[:20],
            "unmarked_skips": self.unmarked_skips[:20],
        })


def _marked_to_skip(item: Any, _skip: Any = evaluate_skip_marks, _xfailed: Any = xfailed_key) -> bool:
    """Whether ``item``'s own marks skip it (``skip``, a true ``skipif``) or expect it to fail
    (``xfail``, as pytest's skipping plugin evaluated it at setup). A skip a test did not declare was
    raised while it ran (``pytest.skip``, ``pytest.xfail``, ``importorskip``, ``skipTest``), by the
    test, a fixture, or the code under test, which can call any of them: a graded run does not count
    such a test as passed. Both evaluators are bound at import, before any code under test runs."""
    try:
        return bool(item.stash.get(_xfailed, None) or _skip(item))
    except Exception:  # a mark's condition that raises now: no mark decided the skip
        return False


def _tracing() -> list[str]:
    """A trace or profile function set since the execution started (:func:`codemoe.sandbox.pristine.traced`)."""
    return [f"{name} (a trace or profile function, which can rewrite a test's variables)" for name in traced()]


def _recoded(root: str, trusted: frozenset[str]) -> list[str]:
    """Functions other than the code under test's whose code or defaults were replaced, and modules
    whose class was (:func:`codemoe.sandbox.pristine.recoded`)."""
    def own(filename: str) -> bool:
        return filename.startswith(root) and filename[len(root):] not in trusted

    return recoded(own)


def _import_names(path: str) -> list[str]:
    """The names an import of the task's file ``path`` can have (``tests/helpers.py``: ``helpers``,
    ``tests.helpers``; ``pkg/__init__.py``: ``pkg``)."""
    parts = path[:-3].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return [".".join(parts[start:]) for start in range(len(parts))]


def _made_files(trusted: frozenset[str]) -> list[str]:
    """The task's files pytest's rewrite hook loads: test modules, conftests and the helpers beside them."""
    from codemoe.sandbox.runners import is_test_file, test_helpers

    return sorted({p for p in trusted if p.endswith(".py") and is_test_file(posixpath.basename(p))}
                  | set(test_helpers(trusted)))


def _imported_names(module: Any) -> set[str]:
    """The modules a trusted module imports by name (its top-level imports, a relative one resolved in
    its package, and ``from package import submodule``'s submodule; and the modules it imports inside
    functions)."""
    path = module.__file__
    names = set(recorded_inner_imports(path))
    for _bound, name, attr in recorded_imports(path):
        name = resolved_name(name, vars(module))
        if name:
            names.add(name)
            if attr is not None:
                names.add(f"{name}.{attr}")
    return names


def _collected_not_made(session: Any, trusted: frozenset[str], root: str) -> list[str]:
    """The task's test modules pytest collected from a module object that was not made from their file:
    one the code under test put in ``sys.modules`` under the test module's name (with its
    ``__file__``, so pytest takes it) before pytest got to it, whose tests are stubs that pass."""
    found, seen = [], set()
    for item in session.items:
        node = item.getparent(pytest.Module)
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        path = str(node.path)
        module = node.__dict__.get("_obj")
        if path.startswith(root) and path[len(root):] in trusted and module is not None and not made_from(path, module):
            found.append(f"{path[len(root):]} (the module pytest collected is not made from the file)")
    return found


def _tests_not_defined(session: Any, names: dict[str, str]) -> list[str]:
    """Tests of the task's modules whose function (or class) is not what the module's own statement
    bound. pytest takes a test's function with ``getattr`` on its module when it makes the item, and
    the code under test, imported by the module, can answer that lookup (a module class of its own
    whose ``__getattribute__`` hands out a stub for ``test_add``, then gives the module its class back)."""
    found = []
    for item in session.items:
        module = item.getparent(pytest.Module)
        name = names.get(str(module.path)) if module is not None else None
        if name is None:
            continue
        own = definitions(name)
        if item.parent is module:
            held, label = item.__dict__.get("_obj", _UNSET), item.originalname
        else:  # a method: its class must be the module's
            held, label = item.parent.__dict__.get("_obj", _UNSET), item.parent.name
        if held is not _UNSET and label in own and held is not own[label]:
            entry = f"{name}.{label} (not what the module defined)"
            if entry not in found:
                found.append(entry)
    return found


def _trusted_modules(trusted: frozenset[str], root: str) -> list[tuple[str, Any]]:
    """The loaded modules made from ``trusted`` files, found by the names an import of each file can
    have (``tests/test_a.py``: ``test_a``, ``tests.test_a``) rather than by reading every module,
    which would touch (and so copy into the fork) every page of the server's modules."""
    found = []
    for path in sorted(trusted):
        if not path.endswith(".py"):
            continue
        for name in _import_names(path):
            module = _MODULES.get(name)
            if module is not None and types.ModuleType in type(module).__mro__ and _MODULE_DICT(module).get("__file__") == root + path:
                found.append((name, module))
                break
    return found


def _foreign_fixtures(session: Any, trusted: list[str], namespaces: set[int], snapshot: Snapshot, root: str) -> list[str]:
    """The fixtures pytest registered whose function is neither one a trusted module's own source
    defines (its ``def``, a method of its ``class``: that code, with that module's namespace, one of
    ``namespaces``) nor one of a module loaded before any code under
    test (pytest's own, its plugins', the standard library's), nor one of a module from a read-only
    file outside the work dir. pytest takes fixtures from every name in a test module's or conftest's
    namespace, so ``from calc import *`` in a test module brought the code under test's own
    ``@pytest.fixture def expected_sum()`` in, overriding the conftest's, and a failing test passed."""
    manager = getattr(session, "_fixturemanager", None)
    every = getattr(manager, "_get_all_fixture_defs", None)  # pytest 9
    registry = getattr(manager, "_arg2fixturedefs", None)  # pytest 8: name -> its definitions
    if every is not None:
        fixturedefs = list(every())
    elif type(registry) is dict:
        fixturedefs = [fixturedef for defs in list(registry.values()) for fixturedef in defs]
    else:
        raise RuntimeError("this pytest keeps its fixtures where the graded runner cannot check them (pytest 8 or 9 can)")
    code = defined_code(trusted)
    found = []
    for fixturedef in fixturedefs:
        if not _trusted_fixture(getattr(fixturedef, "func", None), code, namespaces, snapshot, root):
            where = getattr(fixturedef, "baseid", "") or "the session"
            found.append(f"fixture {getattr(fixturedef, 'argname', '?')} of {where} (a function no file the task trusts defines)")
    return found


def _trusted_fixture(func: Any, code: set[int], namespaces: set[int], snapshot: Snapshot, root: str) -> bool:
    if type(func) is types.MethodType:  # a test class's fixture, bound to the instance pytest made
        func = func.__func__
    if type(func) is not types.FunctionType:
        return False
    # a trusted fixture's code with other globals (types.FunctionType(code, {...})) answers otherwise
    if (id(func.__code__) in code and id(func.__globals__) in namespaces) or snapshot.holds_namespace(func.__globals__):
        return True
    namespace = func.__globals__  # a module imported since: trusted when read-only and outside the work dir
    name = namespace.get("__name__")
    module = _MODULES.get(name) if type(name) is str else None
    return type(module) is types.ModuleType and vars(module) is namespace and _outside_read_only(namespace, root)


def _origin(namespace: dict[str, Any]) -> str | None:
    """The file a module was loaded from, as its import's spec says (read without calling anything of it)."""
    spec = namespace.get("__spec__")
    origin = spec.origin if type(spec) is ModuleSpec else None
    return origin if type(origin) is str else None


def _outside_read_only(namespace: dict[str, Any], root: str) -> bool:
    """Whether a module was loaded from a file outside the work dir on a read-only mount."""
    origin = _origin(namespace)
    if origin is None or origin.startswith(root):
        return False
    try:
        return bool(os.statvfs(origin).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def crash_line(report: Any) -> str:
    """The one-line reason of a failed report (``AssertionError: ...``, ``MemoryError``)."""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message).splitlines()[0] if crash.message else ""
    text = str(report.longrepr or "").strip().splitlines()
    return text[-1] if text else ""
