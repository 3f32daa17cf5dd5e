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

__all__ = ["SPLITS", "STOP_SEQUENCES", "CodeTask", "Suite", "check_split", "program", "truncate_at_stop"]

SPLITS = ("train", "heldout")

# A completion is the function body: it ends where top-level code would start (Codex's convention).
STOP_SEQUENCES = ("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#", "\nassert ")


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


def truncate_at_stop(text: str, stop: tuple[str, ...] | list[str] = STOP_SEQUENCES) -> str:
    """Cut ``text`` at the first stop sequence (the stop itself is dropped).

    >>> truncate_at_stop("    return x + 1\\ndef other():\\n    pass")
    '    return x + 1'
    """
    cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=len(text))
    return text[:cut]
