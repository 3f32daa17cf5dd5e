"""The task families behind ``synthetic-repos``: each draws one small Python repository and its fix.

A family is a function ``(rng, words) -> RepoInstance``. ``words`` hands out names from one split's
vocabulary (:mod:`codemoe.evals.repo_vocabulary`), so what a family builds for the held-out split
never names anything a training repository names. Repositories are a package of one to three
modules, visible tests under ``tests/`` (read-only to the agent) and hidden tests the agent never
sees. Expected values in the tests come from running the generated correct code here (trusted
code, as in :mod:`codemoe.evals.synthetic`) or from the family's own reference arithmetic; the
sandbox's ``codemoe tasks validate`` proves every instance (gold fixes, original fails).

Families are sized for a small model: functions of one to five lines, one to three files to change.
"""

from __future__ import annotations

import math
import random
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from codemoe.evals.repo_vocabulary import Words, plural

__all__ = ["FAMILIES", "RepoInstance"]


@dataclass
class RepoInstance:
    """One generated task before it is written as a task folder."""

    type: str  # the sandbox task type (a TASK_TYPES name)
    kind: str  # the family's variant, e.g. "off-by-one"
    statement: str
    files: dict[str, str]  # the repository the agent starts from
    gold: dict[str, str]  # the files the fix changes or creates, with their text after it
    hidden: dict[str, str]  # hidden test files (names under hidden_tests/) -> text
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    decoy: dict[str, str] = field(default_factory=dict)  # the obvious first fix a visible test refutes
    clarification: str | None = None
    readonly: list[str] = field(default_factory=lambda: ["tests/*"])
    names: dict[str, set[str]] = field(default_factory=dict)  # what it defines: package, paths, functions, library

    def key(self) -> str:
        """What makes two instances the same task: the starting repository and the fix."""
        return repr((sorted(self.files.items()), sorted(self.gold.items())))


# -------------------------------------------------------------------------------------------------
# text helpers
# -------------------------------------------------------------------------------------------------


def _fill(text: str, **values: Any) -> str:
    """Replace ``@KEY@`` markers (braces stay free for the generated code's own f-strings)."""
    for key, value in values.items():
        text = text.replace(f"@{key}@", str(value))
    return text


def _code(text: str, **values: Any) -> str:
    """Dedented source with ``@KEY@`` markers filled; a marker alone on its line may expand to nothing."""
    lines = _fill(textwrap.dedent(text).strip("\n"), **values).split("\n")
    return "\n".join(line for line in lines if line.strip() != "@DROP@").rstrip() + "\n"


def _join_defs(header: str, defs: list[str]) -> str:
    """A module: its docstring/imports, then definitions two blank lines apart."""
    return header.rstrip() + "\n\n\n" + "\n\n".join(d.rstrip() + "\n" for d in defs)


def _test_module(header: str, tests: dict[str, list[str]]) -> str:
    """A pytest module: ``header`` (imports), then one ``test_<name>`` per entry with its asserts."""
    body = [f"def test_{name}():\n" + "".join(f"    {line}\n" for line in lines) for name, lines in tests.items()]
    return _join_defs(header, body)


def _scaffold(pkg: str, rng: random.Random, title: str) -> dict[str, str]:
    """The files every repository has: pyproject (pytest finds the package), the package, maybe a README."""
    files = {
        "pyproject.toml": f'[project]\nname = "{pkg}"\nversion = "0.{rng.randint(1, 9)}.0"\n'
                          'requires-python = ">=3.10"\n\n[tool.pytest.ini_options]\npythonpath = ["."]\n',
        f"{pkg}/__init__.py": f'"""{title}."""\n',
    }
    if rng.random() < 0.5:
        files["README.md"] = f"# {pkg}\n\n{title}. Run the tests with `python -m pytest -q tests`.\n"
    return files


def _names(pkg: str, files: dict[str, str], hidden: dict[str, str], functions: set[str], **extra: set[str]) -> dict[str, set[str]]:
    paths = set(files) | {f"hidden_tests/{p}" for p in hidden}
    return {"package": {pkg}, "paths": paths, "functions": functions, **extra}


# -------------------------------------------------------------------------------------------------
# one-function templates: a correct body, a buggy one, and inputs (bug fixes, renames, distractors)
# -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Fn:
    """A small function with a bug of one kind; ``@FIX@`` marks the line(s) the bug changes."""

    kind: str  # wrong-operator, off-by-one, wrong-constant, missing-case
    name: str  # a pattern over @N@ (noun) and @NS@ (plural)
    source: str
    good: str
    bad: str
    draw: Callable[[random.Random], tuple[Any, ...]]  # one argument tuple
    params: Callable[[random.Random], dict[str, Any]] = lambda rng: {}

    def render(self, noun: str, values: dict[str, Any], *, buggy: bool) -> tuple[str, str]:
        """(function name, source) for ``noun``; the buggy or the correct version."""
        name = _fill(self.name, N=noun, NS=plural(noun))
        fix = _fill(self.bad if buggy else self.good, **values) or "@DROP@"
        return name, _code(self.source, NAME=name, N=noun, NS=plural(noun), UPPER=noun.upper(), FIX=fix, **values)


def _ints(rng: random.Random, low: int, high: int, n_low: int, n_high: int) -> list[int]:
    return [rng.randint(low, high) for _ in range(rng.randint(n_low, n_high))]


def _fits_args(rng: random.Random) -> tuple[Any, ...]:
    """A value at the limit half of the time (the boundary an off-by-one gets wrong), else near it."""
    limit = rng.randint(2, 30)
    return (limit if rng.random() < 0.5 else limit + rng.randint(-3, 3)), limit


def _last_args(rng: random.Random) -> tuple[Any, ...]:
    items = _ints(rng, 1, 30, 3, 7)
    return items, rng.randint(1, len(items))


_FNS = (
    _Fn("wrong-operator", "total_@N@_cost", '''
        def @NAME@(prices, quantity):
            """The cost of `quantity` @NS@ at each of `prices`, summed."""
            return sum(@FIX@ for price in prices)
        ''', "price * quantity", "price + quantity", lambda r: (_ints(r, 1, 20, 1, 4), r.randint(3, 9))),
    _Fn("wrong-operator", "@N@_spread", '''
        def @NAME@(values):
            """How far apart the largest and the smallest @N@ of `values` are."""
            return @FIX@
        ''', "max(values) - min(values)", "max(values) + min(values)", lambda r: (_ints(r, 1, 50, 2, 5),)),
    _Fn("off-by-one", "number_@NS@", '''
        def @NAME@(count):
            """The numbers of the first `count` @NS@: 1, 2, ..., count."""
            return list(range(1, @FIX@))
        ''', "count + 1", "count", lambda r: (r.randint(1, 8),)),
    _Fn("off-by-one", "@N@_fits", '''
        def @NAME@(value, limit):
            """Whether `value` @NS@ fit under `limit` (the limit itself is allowed)."""
            return @FIX@
        ''', "value <= limit", "value < limit", _fits_args),
    _Fn("off-by-one", "last_@NS@", '''
        def @NAME@(items, count):
            """The last `count` @NS@ of `items`, in order."""
            return items[@FIX@:]
        ''', "len(items) - count", "len(items) - count + 1", _last_args),
    _Fn("wrong-constant", "@N@_fee", '''
        @UPPER@_FEE_PERCENT = @FIX@


        def @NAME@(amount):
            """The fee on `amount`: @GOOD@ percent of it."""
            return amount * @UPPER@_FEE_PERCENT / 100
        ''', "@GOOD@", "@BAD@", lambda r: (10 * r.randint(1, 50),),
        lambda r: (lambda good: {"GOOD": good, "BAD": good + r.choice((-1, 1)) * r.randint(1, 3)})(r.randint(4, 20))),
    _Fn("wrong-constant", "@N@_hours", '''
        def @NAME@(minutes):
            """`minutes` of @N@ time in hours (60 minutes to the hour)."""
            return minutes / @FIX@
        ''', "60", "100", lambda r: (30 * r.randint(1, 20),)),
    _Fn("missing-case", "average_@N@", '''
        def @NAME@(values):
            """The mean of `values`; 0.0 when there are none."""
        @FIX@
            return sum(values) / len(values)
        ''', "    if not values:\n        return 0.0", "",
        lambda r: (_ints(r, 1, 40, 0, 4) if r.random() < 0.6 else [],)),
    _Fn("missing-case", "describe_@NS@", '''
        def @NAME@(count):
            """How many @NS@ there are, in words: "no @NS@", "one @N@", "3 @NS@"."""
        @FIX@
            if count == 1:
                return "one @N@"
            return f"{count} @NS@"
        ''', '    if count == 0:\n        return "no @NS@"', "", lambda r: (r.choice((0, 0, 1, r.randint(2, 9))),)),
    _Fn("missing-case", "clamp_@N@", '''
        def @NAME@(value, low, high):
            """`value` kept within `low`..`high`."""
            if value > high:
                return high
        @FIX@
            return value
        ''', "    if value < low:\n        return low", "",
        lambda r: (r.randint(-20, 40), r.randint(0, 5), r.randint(20, 30))),
)


def _run(source: str, name: str) -> Callable[..., Any]:
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<synthetic-repos {name}>", "exec"), namespace)  # the generator's own code
    return namespace[name]


def _outcome(fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[bool, Any]:
    try:
        return True, fn(*args)
    except Exception as exc:  # a buggy body may raise (the missing case): that is its outcome
        return False, type(exc).__name__


def _call(name: str, args: tuple[Any, ...]) -> str:
    return f"{name}({', '.join(repr(a) for a in args)})"


def _cases(fn: _Fn, rng: random.Random, good: Callable[..., Any], bad: Callable[..., Any] | None,
           revealing: int, plain: int) -> tuple[list[str], list[str]]:
    """Distinct asserts ``name(args) == expected``: up to ``revealing`` that fail on ``bad`` (at least
    one unless ``revealing`` is 0; a missing case may have a single input) and up to ``plain`` that
    pass on both, topped up with revealing ones."""
    found: dict[bool, dict[str, None]] = {True: {}, False: {}}
    for _ in range(400):
        args = fn.draw(rng)
        ok, expected = _outcome(good, args)
        if not ok:
            continue
        reveals = bad is not None and _outcome(bad, args) != (True, expected)
        found[reveals].setdefault(f"assert {_call(good.__name__, args)} == {expected!r}")
        if len(found[True]) >= revealing and len(found[False]) >= plain:
            break
    if (revealing and not found[True]) or len(found[False]) + len(found[True]) < revealing + plain:
        raise RuntimeError(f"template {fn.name}: not enough distinct test inputs")
    kept = list(found[False])[:plain]
    return list(found[True])[:revealing + plain - len(kept)], kept


# -------------------------------------------------------------------------------------------------
# the families
# -------------------------------------------------------------------------------------------------


def bug_fix(rng: random.Random, words: Words) -> RepoInstance:
    """Test-driven bug fix: one function of a module has a wrong operator, an off-by-one, a wrong
    constant or a missing case; its visible test fails, the module's other functions must keep working."""
    pkg, mod = words.one("package"), words.one("module")
    nouns = words.pick("noun", 3)
    kind = rng.choice(("wrong-operator", "off-by-one", "wrong-constant", "missing-case"))
    target = rng.choice([f for f in _FNS if f.kind == kind])
    others = rng.sample([f for f in _FNS if f is not target], rng.randint(1, 2))
    defs_bad, defs_good, visible, hidden = [], [], {}, {}
    fail, keep = [], []
    buggy_name = ""
    for fn, noun in [(target, nouns[0]), *zip(others, nouns[1:])]:
        values = fn.params(rng)
        name, good_src = fn.render(noun, values, buggy=False)
        _, bad_src = fn.render(noun, values, buggy=fn is target)
        good, bad = _run(good_src, name), _run(bad_src, name) if fn is target else None
        reveal, plain = _cases(fn, rng, good, bad, 3 if fn is target else 0, 3)
        cases = [*reveal[:1], *plain, *reveal[1:]]  # the visible test shows the bug once, the hidden ones again
        if fn is target and len(reveal) == 1:
            cases.append(reveal[0])
        visible[name], hidden[f"{name}_more"] = cases[:2], cases[2:]
        defs_bad.append(bad_src)
        defs_good.append(good_src)
        (fail if fn is target else keep).extend([f"tests/test_{mod}.py::test_{name}",
                                                  f"hidden_tests/test_{mod}_hidden.py::test_{name}_more"])
        if fn is target:
            buggy_name = name
    order = list(range(len(defs_bad)))
    rng.shuffle(order)
    header = f'"""{pkg.capitalize()} {mod}: small calculations on {plural(nouns[0])} and friends."""'
    source_bad = _join_defs(header, [defs_bad[i] for i in order])
    source_good = _join_defs(header, [defs_good[i] for i in order])
    names = ", ".join(sorted(visible))
    imports = f"from {pkg}.{mod} import {names}"
    files = {**_scaffold(pkg, rng, f"{pkg.capitalize()} utilities"), f"{pkg}/{mod}.py": source_bad,
             f"tests/test_{mod}.py": _test_module(imports, visible)}
    hidden_files = {f"test_{mod}_hidden.py": _test_module(imports, hidden)}
    statement = rng.choice((
        f"`tests/test_{mod}.py::test_{buggy_name}` fails. Find the bug in `{pkg}` and fix it; "
        "the other tests must keep passing. Do not edit the tests.",
        f"`{buggy_name}` in `{pkg}/{mod}.py` gives wrong results: its docstring says what it must do. "
        f"Fix it so that `tests/test_{mod}.py` passes, without editing the tests.",
    ))
    return RepoInstance("test-driven-bug-fix", kind, statement, files, {f"{pkg}/{mod}.py": source_good}, hidden_files,
                        fail, keep, names=_names(pkg, files, hidden_files, set(visible)))


_RENAME_PREFIXES = ("do", "get", "compute", "make", "old")


def cross_file_rename(rng: random.Random, words: Words) -> RepoInstance:
    """Cross-file rename: a function moves to a new name, and every reference (the module that calls
    it, maybe the package's re-export) follows; the old name must be gone everywhere."""
    pkg = words.one("package")
    mod_a, mod_b = words.pick("module", 2)
    noun = words.one("noun")
    fn = rng.choice(_FNS)
    values = fn.params(rng)
    new, source = fn.render(noun, values, buggy=False)
    old = f"{rng.choice(_RENAME_PREFIXES)}_{new}"
    args = re.search(r"def \w+\((.*?)\):", source).group(1)  # type: ignore[union-attr]
    good = _run(source, new)
    _, cases = _cases(fn, rng, good, None, 0, 4)
    wrapper = f"{noun}_line"
    caller = '''
        """Lines of text about @NS@, for the daily sheet."""

        from @PKG@.@A@ import @FN@


        def @WRAP@(@ARGS@):
            """One report line: the @N@ figure of the arguments."""
            return f"@N@: {@FN@(@ARGS@)}"
        '''
    defs = _code(source.replace(f"def {new}(", f"def {old}("))
    module_a = lambda name: f'"""{pkg.capitalize()} {mod_a}."""\n\n\n' + defs.replace(f"def {old}(", f"def {name}(")  # noqa: E731
    module_b = lambda name: _code(caller, PKG=pkg, A=mod_a, FN=name, WRAP=wrapper, ARGS=args, N=noun, NS=plural(noun))  # noqa: E731
    files = {**_scaffold(pkg, rng, f"{pkg.capitalize()} figures"),
             f"{pkg}/{mod_a}.py": module_a(old), f"{pkg}/{mod_b}.py": module_b(old)}
    gold = {f"{pkg}/{mod_a}.py": module_a(new), f"{pkg}/{mod_b}.py": module_b(new)}
    reexport = rng.random() < 0.5
    if reexport:
        init = lambda name: f'"""{pkg.capitalize()} figures."""\n\nfrom {pkg}.{mod_a} import {name}\n\n__all__ = ["{name}"]\n'  # noqa: E731
        files[f"{pkg}/__init__.py"], gold[f"{pkg}/__init__.py"] = init(old), init(new)
    first_call = re.search(r"assert (\w+\(.*\)) == ", cases[0]).group(1)  # type: ignore[union-attr]
    shown = f"{noun}: {eval(first_call, {new: good})}"  # the generator's own function, as the wrapper shows it
    line = f"assert {wrapper}{first_call[len(new):]} == {shown!r}"
    visible = {f"tests/test_{mod_a}.py": _test_module(f"from {pkg}.{mod_a} import {new}", {new: cases[:2]}),
               f"tests/test_{mod_b}.py": _test_module(f"from {pkg}.{mod_b} import {wrapper}", {wrapper: [line]})}
    files.update(visible)
    checks = [f"assert not hasattr({mod_a}, {old!r})", f"assert {old!r} not in inspect.getsource({mod_b})"]
    if reexport:
        checks += [f"assert {pkg}.{new} is {mod_a}.{new}", f"assert not hasattr({pkg}, {old!r})"]
    hidden_header = f"import inspect\n\nimport {pkg}\nfrom {pkg} import {mod_a}, {mod_b}\nfrom {pkg}.{mod_a} import {new}"
    hidden = {f"test_{mod_a}_hidden.py": _test_module(hidden_header, {"old_name_is_gone": checks, f"{new}_more": cases[2:]})}
    statement = (
        f"Rename `{old}` (in `{pkg}/{mod_a}.py`) to `{new}` and update every reference to it in `{pkg}`; "
        f"the old name must not remain anywhere. `tests/test_{mod_a}.py` already uses the new name. "
        "Do not edit the tests."
    )
    fail = [f"tests/test_{mod_a}.py::test_{new}", f"hidden_tests/test_{mod_a}_hidden.py::test_old_name_is_gone"]
    keep = [f"tests/test_{mod_b}.py::test_{wrapper}"]
    return RepoInstance("cross-file-refactor", "rename", statement, files, gold, hidden, fail, keep,
                        names=_names(pkg, files, hidden, {old, new, wrapper}))


def multi_round(rng: random.Random, words: Words) -> RepoInstance:
    """Multi-round correction: the obvious fix makes the failing test pass and breaks another one; the
    instance records that fix as its decoy, and the real fix handles both."""
    pkg, mod = words.one("package"), words.one("module")
    noun = words.one("noun")
    kind = rng.choice(("round-half-away", "wrap-index"))
    if kind == "round-half-away":
        name = f"round_{noun}"
        head = (f'def {name}(value):\n    """`value` {plural(noun)} to the nearest whole one, halves away from zero '
                f'(2.5 -> 3, -2.5 -> -3)."""\n')
        body_bad, body_decoy = "    return round(value)\n", "    return int(value + 0.5)\n"
        body_good = "    return int(math.copysign(math.floor(abs(value) + 0.5), value))\n"
        half = rng.randint(0, 6) * 2 + 0.5  # round() sends these to the even neighbour below
        whole = rng.randint(1, 9)
        neg = -(rng.randint(1, 8) + rng.choice((0.6, 0.7, 0.8, 0.9)))  # int(value + 0.5) rounds these towards zero
        ref = lambda v: int(math.copysign(math.floor(abs(v) + 0.5), v))  # noqa: E731
        visible = {"half_rounds_up": [f"assert {name}({half}) == {ref(half)}"],
                   "negative": [f"assert {name}({round(neg, 1)}) == {ref(round(neg, 1))}"],
                   "whole": [f"assert {name}({whole}.0) == {whole}"]}
        more_half = [rng.randint(0, 4) * 2 + 0.5, rng.randint(0, 9) + 0.5, rng.randint(0, 9) + 0.5]
        hidden_cases = {f"{name}_halves": [f"assert {name}({v}) == {ref(v)}" for v in more_half]
                        + [f"assert {name}({-v}) == {ref(-v)}" for v in more_half[:2]]}
        header_bad, header_good = "", "import math"
        fail_name = "half_rounds_up"
    else:
        name = f"{noun}_at"
        head = (f'def {name}(items, index):\n    """The {noun} at `index`; an index past the end wraps around to the '
                f'start; no {plural(noun)} at all gives None."""\n')
        body_bad = "    if index < len(items):\n        return items[index]\n    return None\n"
        body_decoy = "    return items[index % len(items)]\n"
        body_good = "    if not items:\n        return None\n    return items[index % len(items)]\n"
        items = [f"{noun}-{i}" for i in rng.sample(range(1, 60), rng.randint(3, 5))]
        past = len(items) + rng.randint(0, 2)
        visible = {"wraps_around": [f"assert {name}({items!r}, {past}) == {items[past % len(items)]!r}"],
                   "empty": [f"assert {name}([], {rng.randint(0, 4)}) is None"],
                   "inside": [f"assert {name}({items!r}, 1) == {items[1]!r}"]}
        more = [len(items) * 2 + 1, len(items) + len(items) - 1]
        hidden_cases = {f"{name}_wraps": [f"assert {name}({items!r}, {i}) == {items[i % len(items)]!r}" for i in more]
                        + [f"assert {name}([], {len(items)}) is None"]}
        header_bad = header_good = ""
        fail_name = "wraps_around"
    other = rng.choice(_FNS)
    other_name, other_src = other.render(noun, other.params(rng), buggy=False)
    doc = f'"""{pkg.capitalize()} {mod}: rules for {plural(noun)}."""'
    make = lambda imports, body: _join_defs(doc + (f"\n\n{imports}" if imports else ""), [head + body, other_src])  # noqa: E731
    path = f"{pkg}/{mod}.py"
    tests = {f"tests/test_{mod}.py": _test_module(f"from {pkg}.{mod} import {name}", visible)}
    files = {**_scaffold(pkg, rng, f"{pkg.capitalize()} rules"), path: make(header_bad, body_bad), **tests}
    hidden = {f"test_{mod}_hidden.py": _test_module(f"from {pkg}.{mod} import {name}", hidden_cases)}
    statement = (
        f"`tests/test_{mod}.py::test_{fail_name}` fails: `{name}` in `{path}` does not do what its docstring says. "
        f"Fix it without breaking the other tests of `tests/test_{mod}.py`; do not edit the tests."
    )
    keep = [f"tests/test_{mod}.py::test_{t}" for t in visible if t != fail_name]
    fail = [f"tests/test_{mod}.py::test_{fail_name}", f"hidden_tests/test_{mod}_hidden.py::test_{next(iter(hidden_cases))}"]
    return RepoInstance("multi-round-error-correction", kind, statement, files, {path: make(header_good, body_good)},
                        hidden, fail, keep, decoy={path: make(header_bad, body_decoy)},
                        names=_names(pkg, files, hidden, {name, other_name}))


def dependency_upgrade(rng: random.Random, words: Words) -> RepoInstance:
    """Dependency upgrade: the vendored library was upgraded to 2.0 and changed an API the package
    calls (a renamed, keyword-only function, or a pair returned as a mapping); the changelog says how."""
    pkg, mod, other_mod = words.one("package"), *words.pick("module", 2)
    lib, noun = words.one("library"), words.one("noun")
    kind = rng.choice(("renamed-keyword-only", "tuple-to-mapping"))
    vendor = f"vendor/{lib}/__init__.py"
    if kind == "renamed-keyword-only":
        places, unit = rng.randint(0, 3), rng.choice(("kg", "m", "EUR", "h", "l"))
        library = _code('''
            """@LIB@ 2.0: number formatting."""

            __version__ = "2.0.0"


            def format_number(value, *, places=2):
                """`value` with thousands separators and `places` decimals."""
                return f"{value:,.{places}f}"
            ''', LIB=lib)
        changelog = (f"# {lib} changelog\n\n## 2.0.0\n\n- `fmt_number(value, places)` is now "
                     "`format_number(value, *, places=2)`: renamed, and `places` is keyword-only.\n")
        name = f"{noun}_amount"
        old_call, new_call = f"{lib}.fmt_number(value, {places})", f"{lib}.format_number(value, places={places})"
        fn = lambda call: (f'def {name}(value):\n    """`value` as shown on {noun} sheets, with its unit."""\n'  # noqa: E731
                           f'    return {call} + " {unit}"\n')
        values = [rng.randint(1000, 2_000_000) + rng.randint(0, 99) / 100 for _ in range(4)]
        cases = [f"assert {name}({v!r}) == {f'{v:,.{places}f} {unit}'!r}" for v in values]
    else:
        sep = rng.choice(("=", ":"))
        library = _code('''
            """@LIB@ 2.0: key/value text."""

            __version__ = "2.0.0"


            def split_pair(text, sep="@SEP@"):
                """Split "key@SEP@value" into {"key": ..., "value": ...} (surrounding spaces removed)."""
                key, _, value = text.partition(sep)
                return {"key": key.strip(), "value": value.strip()}
            ''', LIB=lib, SEP=sep)
        changelog = (f"# {lib} changelog\n\n## 2.0.0\n\n- `split_pair` returns a mapping "
                     '`{"key": ..., "value": ...}` instead of a `(key, value)` tuple.\n')
        name = f"{noun}_settings"
        old_body = f"        key, value = {lib}.split_pair(line)\n"
        new_body = f"        pair = {lib}.split_pair(line)\n        key, value = pair[\"key\"], pair[\"value\"]\n"
        fn = lambda body: (f'def {name}(lines):\n    """The settings of a {noun} file as a dict."""\n'  # noqa: E731
                           f"    settings = {{}}\n    for line in lines:\n{body}        settings[key] = value\n"
                           "    return settings\n")
        old_call, new_call = old_body, new_body
        keys = rng.sample(("size", "colour", "owner", "limit", "mode", "zone", "level"), 3)
        lines = [f"{k} {sep} {rng.randint(1, 99)}" for k in keys]
        expected = {k: line.partition(sep)[2].strip() for k, line in zip(keys, lines)}
        cases = [f"assert {name}({lines!r}) == {expected!r}", f"assert {name}({lines[:1]!r}) == {dict(list(expected.items())[:1])!r}",
                 f"assert {name}([]) == {{}}"]
    count_name = f"count_{plural(noun)}"
    helper = (f'def {count_name}(rows):\n    """How many {plural(noun)} the rows hold (blank rows do not count)."""\n'
              "    return sum(1 for row in rows if row.strip())\n")
    doc = f'"""{pkg.capitalize()} {mod}: {noun} text, formatted with the vendored {lib}."""\n\nfrom vendor import {lib}'
    module = lambda call: _join_defs(doc, [fn(call)])  # noqa: E731
    path = f"{pkg}/{mod}.py"
    rows = [rng.choice(("a", " ", "b c", "")) for _ in range(5)]
    files = {**_scaffold(pkg, rng, f"{pkg.capitalize()} sheets"), "vendor/__init__.py": '"""Vendored third-party code."""\n',
             vendor: library, f"vendor/{lib}/CHANGELOG.md": changelog, path: module(old_call),
             f"{pkg}/{other_mod}.py": _join_defs(f'"""{pkg.capitalize()} {other_mod}."""', [helper]),
             f"tests/test_{mod}.py": _test_module(f"from {pkg}.{mod} import {name}", {name: cases[:1]}),
             f"tests/test_{other_mod}.py": _test_module(f"from {pkg}.{other_mod} import {count_name}",
                                                        {count_name: [f"assert {count_name}({rows!r}) == {sum(1 for r in rows if r.strip())}"]})}
    hidden = {f"test_{mod}_hidden.py": _test_module(f"from {pkg}.{mod} import {name}", {f"{name}_more": cases[1:]})}
    statement = (
        f"The vendored `{lib}` (under `vendor/`) was upgraded to 2.0 and `{pkg}` no longer works with it: "
        f"`tests/test_{mod}.py` fails. Read `vendor/{lib}/CHANGELOG.md` and update `{pkg}` to the new API. "
        "Do not edit `vendor/` or the tests."
    )
    fail = [f"tests/test_{mod}.py::test_{name}", f"hidden_tests/test_{mod}_hidden.py::test_{name}_more"]
    return RepoInstance("dependency-upgrade", kind, statement, files, {path: module(new_call)}, hidden, fail,
                        [f"tests/test_{other_mod}.py::test_{count_name}"], readonly=["tests/*", "vendor/*"],
                        names=_names(pkg, files, hidden, {name, count_name}, library={lib}))


_COUNTED = '''
class Counted:
    """A hashable value that counts how often it is compared for equality."""

    comparisons = 0

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        Counted.comparisons += 1
        return isinstance(other, Counted) and self.value == other.value

    def __hash__(self):
        return hash(self.value)

    def __repr__(self):
        return f"Counted({self.value!r})"
'''


def performance(rng: random.Random, words: Words) -> RepoInstance:
    """Behaviour-preserving performance fix: a quadratic scan (membership in a list, ``list.count``)
    becomes a hash lookup; tests count equality comparisons, so the check is exact, not a timing."""
    pkg, mod = words.one("package"), words.one("module")
    noun = words.one("noun")
    ns = plural(noun)
    kind = rng.choice(("dedupe", "common", "repeats"))
    if kind == "dedupe":
        name = f"unique_{ns}"
        doc = f"The {ns} of `items` without repeats, in the order they first appear."
        slow = "    kept = []\n    for item in items:\n        if item not in kept:\n            kept.append(item)\n    return kept\n"
        fast = ("    kept, seen = [], set()\n    for item in items:\n        if item not in seen:\n"
                "            seen.add(item)\n            kept.append(item)\n    return kept\n")
        sig = "items"
        ref = lambda xs: list(dict.fromkeys(xs))  # noqa: E731
        call = lambda values: f"[Counted(v) for v in {values!r}]"  # noqa: E731
        expect = lambda values: f"[Counted(v) for v in {ref(values)!r}]"  # noqa: E731
        invocation = lambda values: f"{name}({call(values)})"  # noqa: E731
        big = lambda: f"[Counted(i % {rng.randint(40, 80)}) for i in range({rng.randint(300, 500)})]"  # noqa: E731
    elif kind == "common":
        name = f"shared_{ns}"
        doc = f"The {ns} of `first` that also appear in `second`, in the order of `first`."
        slow = "    return [item for item in first if item in second]\n"
        fast = "    lookup = set(second)\n    return [item for item in first if item in lookup]\n"
        sig = "first, second"
        ref = lambda pair: [x for x in pair[0] if x in pair[1]]  # noqa: E731
        call = lambda pair: f"[Counted(v) for v in {pair[0]!r}], [Counted(v) for v in {pair[1]!r}]"  # noqa: E731
        expect = lambda pair: f"[Counted(v) for v in {ref(pair)!r}]"  # noqa: E731
        invocation = lambda pair: f"{name}({call(pair)})"  # noqa: E731
        big = lambda: (lambda size: f"[Counted(i) for i in range({size})], "  # noqa: E731
                       f"[Counted(i) for i in range({size // 2}, {size * 2})]")(rng.randint(250, 400))
    else:
        name = f"{noun}_repeats"
        doc = f"How often each {noun} of `items` occurs, as a dict in the order they first appear."
        slow = "    return {item: items.count(item) for item in items}\n"
        fast = "    counts = {}\n    for item in items:\n        counts[item] = counts.get(item, 0) + 1\n    return counts\n"
        sig = "items"
        ref = lambda xs: {x: xs.count(x) for x in xs}  # noqa: E731
        call = lambda values: f"[Counted(v) for v in {values!r}]"  # noqa: E731
        expect = lambda values: "{" + ", ".join(f"Counted({k!r}): {v}" for k, v in ref(values).items()) + "}"  # noqa: E731
        invocation = lambda values: f"{name}({call(values)})"  # noqa: E731
        big = lambda: f"[Counted(i % {rng.randint(20, 60)}) for i in range({rng.randint(300, 500)})]"  # noqa: E731
    head = f'def {name}({sig}):\n    """{doc}"""\n'

    def sample() -> Any:
        values = [rng.randint(1, 9) for _ in range(rng.randint(4, 7))]
        return (values, [rng.randint(1, 9) for _ in range(rng.randint(3, 6))]) if kind == "common" else values

    behaviour = [f"assert {invocation(s)} == {expect(s)}" for s in (sample(), sample(), sample())]
    # a hash lookup compares an item only with the stored ones of equal hash: at most about one
    # comparison per item and lookup, so 3 per input item bounds the fast version with room to spare,
    # while the quadratic scan needs tens per item at these sizes
    budget = "len(args[0]) + len(args[1])" if kind == "common" else "len(args[0])"
    linear = lambda data: [f"args = ({data},)" if kind != "common" else f"args = ({data})",  # noqa: E731
                           "Counted.comparisons = 0", f"{name}(*args)", f"assert Counted.comparisons <= 3 * ({budget})"]
    header = f"from {pkg}.{mod} import {name}\n\n{_COUNTED}"
    path = f"{pkg}/{mod}.py"
    module_doc = f'"""{pkg.capitalize()} {mod}: bookkeeping of {ns}."""'
    files = {**_scaffold(pkg, rng, f"{pkg.capitalize()} bookkeeping"), path: _join_defs(module_doc, [head + slow]),
             f"tests/test_{mod}.py": _test_module(header, {f"{name}_results": behaviour[:2], f"{name}_is_linear": linear(big())})}
    hidden = {f"test_{mod}_hidden.py": _test_module(header, {f"{name}_same_results": behaviour[2:],
                                                             f"{name}_scales": linear(big())})}
    statement = (
        f"`{name}` in `{path}` is quadratic: it compares every {noun} with every other. Make it linear "
        f"(the items are hashable) without changing its results or their order; "
        f"`tests/test_{mod}.py::test_{name}_is_linear` counts the comparisons. Do not edit the tests."
    )
    fail = [f"tests/test_{mod}.py::test_{name}_is_linear", f"hidden_tests/test_{mod}_hidden.py::test_{name}_scales"]
    keep = [f"tests/test_{mod}.py::test_{name}_results", f"hidden_tests/test_{mod}_hidden.py::test_{name}_same_results"]
    return RepoInstance("performance-optimisation", kind, statement, files, {path: _join_defs(module_doc, [head + fast])},
                        hidden, fail, keep, names=_names(pkg, files, hidden, {name}))


def multi_file(rng: random.Random, words: Words) -> RepoInstance:
    """Multi-file edit: a new optional argument threads through two modules (the calculation and
    the receipt that shows it), both of which must change."""
    pkg = words.one("package")
    mod_a, mod_b = words.pick("module", 2)
    noun = words.one("noun")
    ns = plural(noun)
    arg, sign = rng.choice((("discount", -1), ("surcharge", 1)))
    sub, receipt = f"{noun}_subtotal", f"{noun}_receipt"
    mark, op, way = ("-", "-", "off") if sign < 0 else ("+", "+", "on top")

    def calc(extra: bool) -> str:
        if not extra:
            return f'def {sub}(prices):\n    """The sum of `prices`."""\n    return round(sum(prices), 2)\n'
        return (f'def {sub}(prices, {arg}=0):\n    """The sum of `prices`, `{arg}` percent {way}."""\n'
                f"    return round(sum(prices) * (100 {op} {arg}) / 100, 2)\n")

    show = lambda extra: (f'def {receipt}(prices{", " + arg + "=0" if extra else ""}):\n'  # noqa: E731
                          f'    """One receipt line for the {ns} at `prices`."""\n'
                          + (f"    total = {sub}(prices, {arg})\n"
                             f'    note = f" ({mark}{{{arg}}}%)" if {arg} else ""\n'
                             f'    return f"{{len(prices)}} {ns}: {{total:.2f}}{{note}}"\n' if extra else
                             f"    total = {sub}(prices)\n"
                             f'    return f"{{len(prices)}} {ns}: {{total:.2f}}"\n'))
    doc_a, doc_b = f'"""{pkg.capitalize()} {mod_a}: prices of {ns}."""', f'"""{pkg.capitalize()} {mod_b}: receipts."""'
    import_b = f"\n\nfrom {pkg}.{mod_a} import {sub}"
    files_for = lambda extra: {f"{pkg}/{mod_a}.py": _join_defs(doc_a, [calc(extra)]),  # noqa: E731
                               f"{pkg}/{mod_b}.py": _join_defs(doc_b + import_b, [show(extra)])}

    def total(prices: list[int], percent: int) -> float:
        return round(sum(prices) * (100 + sign * percent) / 100, 2)

    def line(prices: list[int], percent: int) -> str:
        note = f" ({mark}{percent}%)" if percent else ""
        return f"{len(prices)} {ns}: {total(prices, percent):.2f}{note}"

    draws = [(_ints(rng, 1, 90, 1, 4), rng.choice((5, 10, 15, 20, 25, 50))) for _ in range(4)]
    plain = _ints(rng, 1, 90, 2, 4)
    visible = {f"{receipt}_with_{arg}": [f"assert {receipt}({draws[0][0]!r}, {arg}={draws[0][1]}) == {line(*draws[0])!r}"],
               f"{receipt}_plain": [f"assert {receipt}({plain!r}) == {line(plain, 0)!r}"]}
    hidden_tests = {f"{sub}_{arg}": [f"assert {sub}({p!r}, {arg}={d}) == {total(p, d)!r}" for p, d in draws[1:3]],
                    f"{receipt}_{arg}_more": [f"assert {receipt}({draws[3][0]!r}, {arg}={draws[3][1]}) == {line(*draws[3])!r}",
                                              f"assert {receipt}({plain!r}, {arg}=0) == {line(plain, 0)!r}"]}
    header = f"from {pkg}.{mod_a} import {sub}\nfrom {pkg}.{mod_b} import {receipt}"
    files = {**_scaffold(pkg, rng, f"{pkg.capitalize()} tills"), **files_for(False),
             f"tests/test_{mod_b}.py": _test_module(f"from {pkg}.{mod_b} import {receipt}", visible)}
    hidden = {f"test_{mod_b}_hidden.py": _test_module(header, hidden_tests)}
    verb = "takes off" if sign < 0 else "adds"
    statement = (
        f"Receipts need an optional `{arg}`: a percentage that `{sub}` (in `{pkg}/{mod_a}.py`) {verb} the sum, "
        f"default 0. `{receipt}` (in `{pkg}/{mod_b}.py`) takes the same `{arg}` argument, passes it on, and "
        f'ends the line with " ({mark}N%)" when it is not 0. Do not edit the tests.'
    )
    fail = [f"tests/test_{mod_b}.py::test_{receipt}_with_{arg}", f"hidden_tests/test_{mod_b}_hidden.py::test_{sub}_{arg}"]
    return RepoInstance("multi-file-edit", arg, statement, files, files_for(True), hidden, fail,
                        [f"tests/test_{mod_b}.py::test_{receipt}_plain"], names=_names(pkg, files, hidden, {sub, receipt}))


def debugging(rng: random.Random, words: Words) -> RepoInstance:
    """Debugging over several runs: a lookup in the helper module fails first (a KeyError); once it is
    fixed the next run shows that the calculation in the caller skips an element."""
    pkg = words.one("package")
    mod_a, mod_b = words.pick("module", 2)
    noun = words.one("noun")
    rates = dict(zip(("standard", "express", "overnight"), sorted(rng.sample(range(2, 30), 3))))
    rate, cost = f"rate_for_{noun}", f"{noun}_cost"
    lookup_bad = rng.choice(("kind.upper()", "kind.title()"))
    helper = lambda key: (f"RATES = {rates!r}\n\n\n"  # noqa: E731
                          f'def {rate}(kind):\n    """The price per unit of weight for a {noun} sent as `kind`."""\n'
                          f"    return RATES[{key}]\n")
    loop_bad = rng.choice(("weights[1:]", "weights[:-1]"))
    calc = lambda loop: (f'def {cost}(weights, kind):\n    """What sending {plural(noun)} of these `weights` as `kind` costs."""\n'  # noqa: E731
                         f"    return sum(weight * {rate}(kind) for weight in {loop})\n")
    doc_a = f'"""{pkg.capitalize()} {mod_a}: what sending {plural(noun)} costs."""\n\nfrom {pkg}.{mod_b} import {rate}'
    doc_b = f'"""{pkg.capitalize()} {mod_b}: the rate table."""'
    path_a, path_b = f"{pkg}/{mod_a}.py", f"{pkg}/{mod_b}.py"
    count = f"count_{plural(noun)}"
    counter = f'def {count}(weights):\n    """How many {plural(noun)} there are."""\n    return len(weights)\n'
    files = {**_scaffold(pkg, rng, f"{pkg.capitalize()} dispatch"), path_a: _join_defs(doc_a, [calc(loop_bad), counter]),
             path_b: _join_defs(doc_b, [helper(lookup_bad)])}
    gold = {path_a: _join_defs(doc_a, [calc("weights"), counter]), path_b: _join_defs(doc_b, [helper("kind")])}
    draws = [([rng.randint(1, 9) for _ in range(rng.randint(2, 4))], rng.choice(list(rates))) for _ in range(4)]
    asserts = [f"assert {cost}({w!r}, {k!r}) == {sum(w) * rates[k]}" for w, k in draws]
    header = f"from {pkg}.{mod_a} import {cost}, {count}"
    files[f"tests/test_{mod_a}.py"] = _test_module(header, {cost: asserts[:1], count: [f"assert {count}([1, 2, 3]) == 3"]})
    hidden = {f"test_{mod_a}_hidden.py": _test_module(header, {f"{cost}_more": asserts[1:]})}
    statement = (
        f"`tests/test_{mod_a}.py::test_{cost}` fails. There may be more than one bug in `{pkg}`: each fix can let "
        "the test run further and show the next failure. Fix them all without editing the tests."
    )
    fail = [f"tests/test_{mod_a}.py::test_{cost}", f"hidden_tests/test_{mod_a}_hidden.py::test_{cost}_more"]
    return RepoInstance("debugging-several-runs", "lookup-then-loop", statement, files, gold, hidden, fail,
                        [f"tests/test_{mod_a}.py::test_{count}"], names=_names(pkg, files, hidden, {rate, cost, count}))


def clarification(rng: random.Random, words: Words) -> RepoInstance:
    """Clarification needed: the statement leaves the rounding unit open; only ``ask_clarification``
    says it, and the hidden tests hold the implementation to it."""
    pkg, mod = words.one("package"), words.one("module")
    noun = words.one("noun")
    unit = rng.choice((4, 5, 6, 8, 12, 20, 25))
    name = f"pack_{plural(noun)}"
    head = f'def {name}(quantity):\n    """`quantity` {plural(noun)} rounded to the packing unit, as an int."""\n'
    bad, good = "    return quantity\n", f"    return int(math.floor(quantity / {unit} + 0.5) * {unit})\n"
    ref = lambda q: int(math.floor(q / unit + 0.5) * unit)  # noqa: E731
    doc = f'"""{pkg.capitalize()} {mod}: packing {plural(noun)}."""'
    path = f"{pkg}/{mod}.py"
    values = [unit * rng.randint(1, 9) + d for d in (1, unit // 2, unit - 1)] + [unit * rng.randint(1, 9) + 0.4]
    files = {**_scaffold(pkg, rng, f"{pkg.capitalize()} packing"), path: _join_defs(doc, [head + bad]),
             f"tests/test_{mod}.py": _test_module(f"from {pkg}.{mod} import {name}", {
                 f"{name}_gives_an_int": [f"assert isinstance({name}({unit * 3 + 0.0}), int)"],
                 f"{name}_zero": [f"assert {name}(0) == 0"]})}
    hidden = {f"test_{mod}_hidden.py": _test_module(f"from {pkg}.{mod} import {name}", {
        f"{name}_unit": [f"assert {name}({v!r}) == {ref(v)}" for v in values]})}
    answer = (f"Round to the nearest multiple of {unit}; a quantity exactly halfway goes up "
              f"({unit * 2 + unit / 2:g} -> {unit * 3}). Return an int.")
    statement = (
        f"Orders of {plural(noun)} must be rounded to the packing unit before they are stored: make `{name}` "
        f"in `{path}` do that and return an int. The unit and the rounding rule are not written down "
        "anywhere in the repository: ask before you implement them. Do not edit the tests."
    )
    fail = [f"tests/test_{mod}.py::test_{name}_gives_an_int", f"hidden_tests/test_{mod}_hidden.py::test_{name}_unit"]
    return RepoInstance("clarification-needed", f"unit-{unit}", statement, files,
                        {path: _join_defs(doc + "\n\nimport math", [head + good])}, hidden, fail,
                        [f"tests/test_{mod}.py::test_{name}_zero"], clarification=answer,
                        names=_names(pkg, files, hidden, {name}))


def constraints(rng: random.Random, words: Words) -> RepoInstance:
    """Constraints stated first that must hold at the end: change a parser's behaviour while its
    signature, its default separator (in a read-only settings module) and its old alias stay as they are."""
    pkg = words.one("package")
    mod, settings = words.pick("module", 2)
    noun = words.one("noun")
    ns = plural(noun)
    name, alias = f"parse_{ns}", f"read_{ns}"
    sep = rng.choice((",", ";", "|"))
    kind = rng.choice(("strip-and-drop-empty", "strip-and-lowercase"))
    if kind == "strip-and-drop-empty":
        want = "strip the spaces around each field and drop empty fields"
        good_body = "    return [field.strip() for field in text.split(sep) if field.strip()]\n"
        ref = lambda text, s: [f.strip() for f in text.split(s) if f.strip()]  # noqa: E731
    else:
        want = "strip the spaces around each field and lower-case it"
        good_body = "    return [field.strip().lower() for field in text.split(sep)]\n"
        ref = lambda text, s: [f.strip().lower() for f in text.split(s)]  # noqa: E731
    head = f'def {name}(text, sep=SEPARATOR):\n    """The fields of one line of {noun} data."""\n'
    doc = f'"""{pkg.capitalize()} {mod}: reading {noun} data."""\n\nfrom {pkg}.{settings} import SEPARATOR'
    tail = f"{alias} = {name}  # the old name; callers outside this repository still use it\n"
    module = lambda body: _join_defs(doc, [head + body]) + f"\n\n{tail}"  # noqa: E731
    path = f"{pkg}/{mod}.py"
    fields = rng.sample(("Red", "blue", "Green", "amber", "Teal", "grey", "Plum"), 3)
    messy = f" {fields[0]} {sep}{sep}  {fields[1]}{sep} {fields[2]} "
    plain = sep.join(f.lower() for f in fields)
    other = "/" if sep != "/" else ":"
    files = {**_scaffold(pkg, rng, f"{pkg.capitalize()} data"),
             f"{pkg}/{settings}.py": f'"""{pkg.capitalize()} settings shared by every reader."""\n\nSEPARATOR = {sep!r}\n',
             path: module("    return text.split(sep)\n"),
             f"tests/test_{mod}.py": _test_module(f"from {pkg}.{mod} import {name}", {
                 f"{name}_cleans_fields": [f"assert {name}({messy!r}) == {ref(messy, sep)!r}"],
                 f"{name}_plain": [f"assert {name}({plain!r}) == {plain.split(sep)!r}"]})}
    hidden_checks = {
        "constraints_hold": [
            f"assert {mod}.{alias} is {mod}.{name}",
            f"assert list(inspect.signature({mod}.{name}).parameters) == ['text', 'sep']",
            f"assert inspect.signature({mod}.{name}).parameters['sep'].default == {sep!r}",
            f"assert {settings}.SEPARATOR == {sep!r}",
        ],
        f"{name}_other_separator": [f"assert {mod}.{alias}({messy.replace(sep, other)!r}, {other!r}) == {ref(messy.replace(sep, other), other)!r}"],
    }
    hidden = {f"test_{mod}_hidden.py": _test_module(f"import inspect\n\nfrom {pkg} import {mod}, {settings}", hidden_checks)}
    statement = (
        f"Constraints, which must all still hold when you submit: (1) `{name}(text, sep=SEPARATOR)` keeps its "
        f"signature and its default; (2) `{alias}` stays an alias of `{name}` (the same function); "
        f"(3) `{pkg}/{settings}.py` and the tests are not edited. The task: `{name}` in `{path}` must {want}; "
        f"`tests/test_{mod}.py::test_{name}_cleans_fields` shows it."
    )
    fail = [f"tests/test_{mod}.py::test_{name}_cleans_fields", f"hidden_tests/test_{mod}_hidden.py::test_{name}_other_separator"]
    keep = [f"tests/test_{mod}.py::test_{name}_plain", f"hidden_tests/test_{mod}_hidden.py::test_constraints_hold"]
    return RepoInstance("long-horizon-constraints", kind, statement, files, {path: module(good_body)}, hidden, fail, keep,
                        readonly=["tests/*", f"{pkg}/{settings}.py"], names=_names(pkg, files, hidden, {name, alias}))


# task type -> its generator; the suite draws families round-robin in this order
FAMILIES: dict[str, Callable[[random.Random, Words], RepoInstance]] = {
    "test-driven-bug-fix": bug_fix,
    "cross-file-refactor": cross_file_rename,
    "multi-round-error-correction": multi_round,
    "dependency-upgrade": dependency_upgrade,
    "performance-optimisation": performance,
    "multi-file-edit": multi_file,
    "debugging-several-runs": debugging,
    "clarification-needed": clarification,
    "long-horizon-constraints": constraints,
}
