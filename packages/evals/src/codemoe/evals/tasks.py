"""The task model every suite produces: a function-level coding task with visible and hidden tests.

A :class:`CodeTask` follows HumanEval's shape. The model sees ``prompt`` (the description, the
signature and two worked examples in a docstring) and writes the function body that follows it;
the program that is executed is ``prompt + completion`` followed by a block of ``assert`` code.
``visible_tests`` may be used for rewards during training; ``hidden_tests`` are only ever run by
the evaluation, never shown to the policy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

__all__ = ["SPLITS", "CodeTask", "Suite", "check_split", "program"]

SPLITS = ("train", "heldout")


@dataclass(frozen=True)
class CodeTask:
    """One function-level task.

    ``reference_solution`` is a completion of ``prompt`` (HumanEval's ``canonical_solution``);
    ``visible_tests`` and ``hidden_tests`` are Python ``assert`` code that runs after the program.
    """

    id: str  # unique in its suite, e.g. "synthetic/arithmetic/scale_shift_3_4"
    family: str  # group for per-family breakdowns, e.g. "arithmetic"
    prompt: str  # what the model sees: signature plus docstring with description and examples
    entry_point: str  # name of the function under test
    reference_solution: str  # a correct completion of ``prompt``
    visible_tests: str  # assert code the policy may see (the docstring's examples)
    hidden_tests: str  # assert code only the evaluation runs
    metadata: dict[str, str] = field(default_factory=dict, compare=False)  # suite-specific extras

    def solution_program(self, completion: str) -> str:
        """The program a completion stands for: the prompt followed by the completion."""
        return self.prompt + completion


@runtime_checkable
class Suite(Protocol):
    """A task suite (registry kind ``suite``): ``tasks(split)`` for the splits in :data:`SPLITS`."""

    name: str

    def tasks(self, split: str) -> list[CodeTask]:
        """The tasks of ``split`` in a fixed order."""
        ...


def check_split(split: str, suite: str) -> str:
    """Return ``split`` or raise a ValueError naming the valid splits."""
    if split not in SPLITS:
        raise ValueError(f"suite '{suite}': unknown split '{split}'; valid splits: {', '.join(SPLITS)}")
    return split


def program(task: CodeTask, completion: str, tests: str) -> str:
    """The full program that grades ``completion``: solution, then ``tests`` at module level."""
    return f"{task.solution_program(completion)}\n\n{tests}\n"
