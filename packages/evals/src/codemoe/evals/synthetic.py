"""The ``synthetic`` suite: procedurally generated Python function tasks with hidden tests.

Every parameter choice of every template in :mod:`codemoe.evals.synthetic_families` is one function.
A function belongs to the held-out split when a hash of ``(seed, entry point)`` falls under
``heldout_percent``, so the two splits never share a function and the split is the same on every
machine. Test inputs come from a random generator seeded by ``(seed, entry point)``; expected
outputs come from running the reference solution, which is the single source of truth.
"""

from __future__ import annotations

import hashlib
import random
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from codemoe.evals.synthetic_families import FAMILIES, TEMPLATES, Template
from codemoe.evals.tasks import CodeTask, check_split

__all__ = ["SyntheticSuite", "SyntheticSuiteConfig", "build_synthetic_suite"]

_ANNOTATIONS = {"int": "int", "str": "str", "list": "list[int]"}
_MIN_HIDDEN = 10


@dataclass
class SyntheticSuiteConfig:
    """Options of the ``synthetic`` suite."""

    seed: int = 0  # decides which functions are held out and the test inputs
    heldout_percent: int = 20  # share of all functions in the held-out split, in percent
    train_tasks: int = 0  # 0: every train function; else a family-balanced subset of this size
    heldout_tasks: int = 0  # 0: every held-out function; else a family-balanced subset of this size
    hidden_tests: int = 10  # hidden asserts per task (at least 10)
    families: list[str] = field(default_factory=list)  # families to include; empty: all


def _draw_input(kind: str, rng: random.Random) -> Any:
    if kind == "int":
        return rng.randint(-20, 20)
    if kind == "str":
        return "".join(rng.choice("abcde") for _ in range(rng.randint(0, 7)))
    return [rng.randint(-9, 9) for _ in range(rng.randint(0, 6))]


def _reference_callable(source: str, entry_point: str) -> Any:
    """Run the suite's own generated reference (trusted code) to get expected outputs."""
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<synthetic {entry_point}>", "exec"), namespace)
    return namespace[entry_point]


class SyntheticSuite:
    """Generated function tasks in families: arithmetic, strings, lists, conditionals."""

    name = "synthetic"

    def __init__(self, config: SyntheticSuiteConfig | None = None) -> None:
        self.config = config or SyntheticSuiteConfig()
        if self.config.hidden_tests < _MIN_HIDDEN:
            raise ValueError(
                f"suite 'synthetic': hidden_tests must be >= {_MIN_HIDDEN}, got {self.config.hidden_tests}"
            )
        unknown = sorted(set(self.config.families) - set(FAMILIES))
        if unknown:
            raise ValueError(f"suite 'synthetic': unknown families {unknown}; valid families: {', '.join(FAMILIES)}")
        if not 0 < self.config.heldout_percent < 100:
            raise ValueError("suite 'synthetic': heldout_percent must be between 1 and 99")

    def is_heldout(self, entry_point: str) -> bool:
        """Whether the function named ``entry_point`` is held out under this suite's seed."""
        digest = hashlib.sha256(f"{self.config.seed}:{entry_point}".encode()).hexdigest()
        return int(digest, 16) % 100 < self.config.heldout_percent

    def tasks(self, split: str) -> list[CodeTask]:
        """The tasks of ``split`` ('train' or 'heldout'), family-balanced when a size is set."""
        check_split(split, self.name)
        heldout = split == "heldout"
        families = self.config.families or list(FAMILIES)
        pool: dict[str, list[tuple[Template, dict[str, object]]]] = defaultdict(list)
        for template in TEMPLATES:
            if template.family not in families:
                continue
            for params in template.choices():
                if self.is_heldout(template.entry_point(params)) == heldout:
                    pool[template.family].append((template, params))
        limit = self.config.heldout_tasks if heldout else self.config.train_tasks
        chosen = self._balanced(pool, families, limit, split)
        return [self._make_task(template, params) for template, params in chosen]

    def _balanced(self, pool: dict[str, list[Any]], families: list[str], limit: int, split: str) -> list[Any]:
        """Round-robin over shuffled families until ``limit`` functions (all when 0)."""
        rng = random.Random(f"{self.config.seed}:{split}")
        queues = []
        for family in families:
            items = list(pool[family])
            rng.shuffle(items)
            queues.append(items)
        total = sum(len(q) for q in queues)
        limit = total if limit <= 0 else min(limit, total)
        chosen: list[Any] = []
        while len(chosen) < limit:
            for queue in queues:
                if queue and len(chosen) < limit:
                    chosen.append(queue.pop())
        return chosen

    def _make_task(self, template: Template, params: dict[str, object]) -> CodeTask:
        entry_point = template.entry_point(params)
        rng = random.Random(f"{self.config.seed}:inputs:{entry_point}")
        inputs = self._distinct_inputs(template, rng, 2 + self.config.hidden_tests)
        reference = "".join(f"    {line.format(**params)}\n" for line in template.body)
        signature = ", ".join(f"{arg}: {_ANNOTATIONS[kind]}" for arg, kind in template.args)
        head = f"def {entry_point}({signature}) -> {_ANNOTATIONS.get(template.returns, template.returns)}:\n"
        fn = _reference_callable(head + reference, entry_point)
        calls = [(", ".join(repr(v) for v in args), repr(fn(*args))) for args in inputs]
        examples = "".join(f"    >>> {entry_point}({call})\n    {out}\n" for call, out in calls[:2])
        prompt = f'{head}    """{template.description.format(**params)}\n\n{examples}    """\n'
        asserts = [f"assert {entry_point}({call}) == {out}" for call, out in calls]
        return CodeTask(
            id=f"synthetic/{entry_point}",
            family=template.family,
            prompt=prompt,
            entry_point=entry_point,
            reference_solution=reference,
            visible_tests="\n".join(asserts[:2]) + "\n",
            hidden_tests="\n".join(asserts[2:]) + "\n",
            metadata={"template": template.name},
        )

    @staticmethod
    def _distinct_inputs(template: Template, rng: random.Random, count: int) -> list[tuple[Any, ...]]:
        seen: dict[str, tuple[Any, ...]] = {}
        for _ in range(count * 50):
            args = tuple(_draw_input(kind, rng) for _, kind in template.args)
            seen.setdefault(repr(args), args)
            if len(seen) == count:
                break
        if len(seen) < count:
            raise RuntimeError(f"suite 'synthetic': template '{template.name}' has fewer than {count} distinct inputs")
        return list(seen.values())


def build_synthetic_suite(config: SyntheticSuiteConfig) -> SyntheticSuite:
    """Procedurally generated Python function tasks in families, train/held-out by seed."""
    return SyntheticSuite(config)
