"""Meta-tests for the seams between codemoe's packages, read from every module's source.

1. No package imports a sibling other than core (``docs/architecture.md``): ``rl``, ``evals``,
   ``serving`` and ``router`` import ``codemoe.core`` and themselves only, ``sandbox`` imports nothing
   of ours, core imports none of the others. Every import statement counts, inside functions too;
   ``importlib.import_module("codemoe.x")`` calls and ``"codemoe.x.y:attr"`` registration strings are
   not imports (the registry crosses package lines that way on purpose).
2. A package's ``[project] dependencies`` name the distribution of every third-party module it
   imports. An import guarded by ``try: ... except ImportError`` may instead come from one of the
   package's optional-dependency extras; ``if TYPE_CHECKING:`` imports never run and need neither.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest itself depends on tomli before 3.11
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]

# package folder -> (its import package, the codemoe packages it may import)
SEAMS = {
    "moe-core": ("codemoe.core", {"codemoe.core"}),
    "router": ("codemoe.router", {"codemoe.core", "codemoe.router"}),
    "rl-algos": ("codemoe.rl", {"codemoe.core", "codemoe.rl"}),
    "serving": ("codemoe.serving", {"codemoe.core", "codemoe.serving"}),
    "evals": ("codemoe.evals", {"codemoe.core", "codemoe.evals"}),
    "sandbox": ("codemoe.sandbox", {"codemoe.sandbox"}),
}
CODEMOE_DISTRIBUTIONS = {
    "codemoe.core": "codemoe-core",
    "codemoe.router": "codemoe-router",
    "codemoe.rl": "codemoe-rl-algos",
    "codemoe.serving": "codemoe-serving",
    "codemoe.evals": "codemoe-evals",
    "codemoe.sandbox": "codemoe-sandbox",
}
# handlers that catch a failed import (``except Exception`` does too)
IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


@dataclass(frozen=True)
class Import:
    """One import statement's module, where it is, and how it runs."""

    path: Path
    line: int
    module: str
    guarded: bool  # inside ``try`` whose handlers catch ImportError
    type_checking: bool  # inside ``if TYPE_CHECKING:``

    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(n, ast.Name) and n.id in IMPORT_ERRORS for n in names)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: Path) -> Iterator[Import]:
    """Every absolute import in ``path``, walking into functions, ``try`` and ``if`` blocks."""

    def walk(node: ast.AST, guarded: bool, type_checking: bool) -> Iterator[Import]:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(path, node.lineno, alias.name, guarded, type_checking)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield Import(path, node.lineno, node.module, guarded, type_checking)
        if isinstance(node, ast.Try):
            catches = any(_catches_import_error(h) for h in node.handlers)
            for child in node.body:
                yield from walk(child, guarded or catches, type_checking)
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                yield from walk(child, guarded, type_checking)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                yield from walk(child, guarded, True)
            for child in node.orelse:
                yield from walk(child, guarded, type_checking)
        else:
            for child in ast.iter_child_nodes(node):
                yield from walk(child, guarded, type_checking)

    yield from walk(ast.parse(path.read_text(), filename=str(path)), False, False)


def _package_imports(folder: str) -> list[Import]:
    src = REPO / "packages" / folder / "src"
    return [imp for path in sorted(src.rglob("*.py")) for imp in _imports(path)]


def _codemoe_package(module: str) -> str | None:
    """``codemoe.rl.stages`` -> ``codemoe.rl``; None for a module that is not codemoe's."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "codemoe" and len(parts) > 1 else None


@pytest.mark.parametrize("folder", sorted(SEAMS))
def test_a_package_imports_no_sibling_but_core(folder: str):
    own, allowed = SEAMS[folder]
    crossings = [
        f"{imp.where()}: {own} imports {imp.module}"
        for imp in _package_imports(folder)
        if (pkg := _codemoe_package(imp.module)) is not None and pkg not in allowed
    ]
    assert not crossings, (
        f"{own} may import only {', '.join(sorted(allowed))} of codemoe; ask the registry for the "
        "component instead, or move the shared type into codemoe.core:\n  " + "\n  ".join(crossings)
    )


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert match, f"cannot read a distribution name from requirement {requirement!r}"
    return _normalise(match.group(1))


def _declared(folder: str) -> tuple[set[str], set[str]]:
    """(required distributions, distributions of the optional extras) of a package."""
    project = tomllib.loads((REPO / "packages" / folder / "pyproject.toml").read_text())["project"]
    required = {_requirement_name(r) for r in project.get("dependencies", [])}
    optional = {_requirement_name(r) for reqs in project.get("optional-dependencies", {}).values() for r in reqs}
    return required, optional


@cache
def _module_distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def _distributions(module: str) -> set[str]:
    """The distributions that provide a top-level module (its own name when none is installed)."""
    if (pkg := _codemoe_package(module)) is not None:
        return {CODEMOE_DISTRIBUTIONS.get(pkg, pkg)}
    top = module.split(".")[0]
    found = _module_distributions().get(top)
    return {_normalise(d) for d in found} if found else {_normalise(top)}


@pytest.mark.parametrize("folder", sorted(SEAMS))
def test_a_package_declares_what_it_imports(folder: str):
    own, allowed = SEAMS[folder]
    required, optional = _declared(folder)
    missing: dict[tuple[Path, str], str] = {}  # (file, distribution) -> its first import there
    for imp in _package_imports(folder):
        pkg = _codemoe_package(imp.module)
        if imp.type_checking or imp.module.split(".")[0] in sys.stdlib_module_names or pkg == own:
            continue
        if pkg is not None and pkg not in allowed:
            continue  # a sibling import, which the seam test reports
        dists = _distributions(imp.module)
        if dists & required or (imp.guarded and dists & optional):
            continue
        dist = " or ".join(sorted(dists))
        hint = " (guarded: an optional extra would do)" if imp.guarded else ""
        missing.setdefault((imp.path, dist), f"{imp.where()}: imports {imp.module}, from distribution {dist}{hint}")
    assert not missing, (
        f"packages/{folder}/pyproject.toml does not declare what {own} imports (first import per file); add "
        "each to [project] dependencies (or, for an import guarded by try/except ImportError, to an "
        "optional extra):\n  " + "\n  ".join(missing.values())
    )


def test_the_walk_counts_import_statements_only(tmp_path: Path):
    module = tmp_path / "m.py"
    module.write_text(
        "import importlib\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from codemoe.core import Registry\n"
        "def build():\n"
        "    from codemoe.sandbox.api import ExecutionRequest\n"
        "    try:\n"
        "        import lm_eval\n"
        "    except ImportError:\n"
        "        pass\n"
        "    importlib.import_module('codemoe.serving.embedded')\n"
        "    return 'codemoe.rl.stages:RLStage'\n"
    )
    found = [(imp.module, imp.guarded, imp.type_checking) for imp in _imports(module)]
    assert found == [
        ("importlib", False, False),
        ("typing", False, False),
        ("codemoe.core", False, True),
        ("codemoe.sandbox.api", False, False),
        ("lm_eval", True, False),
    ]
