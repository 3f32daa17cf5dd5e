"""Code-quality components: cyclomatic complexity (radon), lint warnings (ruff), custom static rules.

Passing tests says nothing about whether the code is maintainable; these components read the
changed non-test Python files and count what a reviewer would object to. All of them analyse text:
radon and the rules parse it, ruff lints it from standard input; none of them runs it.
"""

from __future__ import annotations

import ast
import json
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from codemoe.sandbox.rewards.component import RewardComponent
from codemoe.sandbox.rewards.static import call_name, parse
from codemoe.sandbox.rewards.types import RewardConfig, RewardInput, RewardValue

__all__ = [
    "STATIC_RULES",
    "Complexity",
    "ComplexityConfig",
    "LintWarnings",
    "LintWarningsConfig",
    "StaticRules",
    "StaticRulesConfig",
]


@dataclass
class ComplexityConfig(RewardConfig):
    """Options of ``complexity``."""

    weight: float = -0.1  # each point of complexity above the threshold costs a tenth
    threshold: int = 10  # cyclomatic complexity a function may have for free (radon's rank B ends at 10)


class Complexity(RewardComponent):
    """Cyclomatic complexity above a threshold, summed over the changed functions (radon)."""

    name = "complexity"
    config_class = ComplexityConfig

    def __call__(self, inp: RewardInput) -> RewardValue:
        from radon.complexity import cc_visit
        from radon.visitors import Function

        excess: list[tuple[int, str]] = []
        for path in inp.changed_source_files():
            try:
                blocks = cc_visit(inp.files_after[path])
            except (SyntaxError, ValueError):
                continue
            for block in blocks:
                if isinstance(block, Function) and block.complexity > self.config.threshold:
                    excess.append((block.complexity - self.config.threshold, f"{path}:{block.lineno} {block.name}"))
        excess.sort(reverse=True)
        total = sum(points for points, _ in excess)
        evidence = tuple(f"{where} is {points} over {self.config.threshold}" for points, where in excess)
        text = f"{total} point(s) of complexity over {self.config.threshold}" + (f": {evidence[0]}" if excess else "")
        return RewardValue(self.name, float(total), text, evidence)


@dataclass
class LintWarningsConfig(RewardConfig):
    """Options of ``lint_warnings``."""

    weight: float = -0.05  # each warning costs a twentieth
    select: list[str] = field(default_factory=lambda: ["E", "F", "W", "B"])  # ruff rule codes/prefixes
    ignore: list[str] = field(default_factory=lambda: ["E501"])  # codes left out (line length is taste)


def _ruff(path: str, text: str, config: LintWarningsConfig) -> list[str]:
    from ruff.__main__ import find_ruff_bin

    argv = [find_ruff_bin(), "check", "--isolated", "--no-cache", "--output-format", "json", "--stdin-filename", path]
    argv += ["--select", ",".join(config.select)] + (["--ignore", ",".join(config.ignore)] if config.ignore else [])
    done = subprocess.run([*argv, "-"], input=text, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"ruff failed on {path}: {done.stderr.strip()[:300]}")
    return [f"{path}:{w['location']['row']}: {w['code']} {w['message']}" for w in json.loads(done.stdout or "[]")]


class LintWarnings(RewardComponent):
    """Ruff warnings in the changed non-test files."""

    name = "lint_warnings"
    config_class = LintWarningsConfig

    def __call__(self, inp: RewardInput) -> RewardValue:
        warnings = [w for path in inp.changed_source_files() for w in _ruff(path, inp.files_after[path], self.config)]
        text = f"{len(warnings)} lint warning(s)" + (f": {warnings[0]}" if warnings else "")
        return RewardValue(self.name, float(len(warnings)), text, tuple(warnings))


# ---------------------------------------------------------------------------------------------
# custom static rules: each yields (line, message) for one kind of smell
# ---------------------------------------------------------------------------------------------

Rule = Callable[[ast.Module], Iterator[tuple[int, str]]]


def _bare_except(tree: ast.Module) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler) and node.type is None:
            yield node.lineno, "bare except hides every error"


def _eval_exec(tree: ast.Module) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and call_name(node) in ("eval", "exec", "compile", "__import__"):
            yield node.lineno, f"{call_name(node)}() runs strings as code"


def _global_statement(tree: ast.Module) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            yield node.lineno, f"global {', '.join(node.names)}"


def _star_import(tree: ast.Module) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            yield node.lineno, f"from {node.module} import *"


def _mutable_default(tree: ast.Module) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for default in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
                if isinstance(default, (ast.List, ast.Dict, ast.Set)):
                    yield node.lineno, f"{node.name}() has a mutable default argument"


def _long_function(tree: ast.Module, limit: int = 50) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            statements = sum(isinstance(n, ast.stmt) for n in ast.walk(node)) - 1
            if statements > limit:
                yield node.lineno, f"{node.name}() has {statements} statements (over {limit})"


# Rule name -> rule. Add a rule here and it is on by default.
STATIC_RULES: dict[str, Rule] = {
    "bare_except": _bare_except,
    "eval_exec": _eval_exec,
    "global_statement": _global_statement,
    "star_import": _star_import,
    "mutable_default": _mutable_default,
    "long_function": _long_function,
}


@dataclass
class StaticRulesConfig(RewardConfig):
    """Options of ``static_rules``."""

    weight: float = -0.1  # each violation costs a tenth
    rules: list[str] = field(default_factory=lambda: list(STATIC_RULES))  # names from STATIC_RULES


class StaticRules(RewardComponent):
    """Violations of codemoe's static rules (bare except, eval/exec, global, star import ...)."""

    name = "static_rules"
    config_class = StaticRulesConfig

    def __init__(self, config: StaticRulesConfig | None = None) -> None:
        super().__init__(config)
        unknown = sorted(set(self.config.rules) - set(STATIC_RULES))
        if unknown:
            raise ValueError(f"static_rules: unknown rule(s) {unknown}; known: {sorted(STATIC_RULES)}")

    def __call__(self, inp: RewardInput) -> RewardValue:
        found = []
        for path in inp.changed_source_files():
            tree = parse(inp.files_after[path])
            if tree is None:
                continue
            for rule in self.config.rules:
                found += [f"{path}:{line}: {rule}: {msg}" for line, msg in STATIC_RULES[rule](tree)]
        text = f"{len(found)} static-rule violation(s)" + (f": {found[0]}" if found else "")
        return RewardValue(self.name, float(len(found)), text, tuple(found))
