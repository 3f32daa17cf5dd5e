"""Meta-tests: every hook spec follows the docstring template and is exercised by some test."""

import inspect
import re
from pathlib import Path

import pytest
from codemoe.core import hookspecs

SPECS = [
    (name, fn)
    for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
    if name.startswith("codemoe_") and hasattr(fn, "codemoe_spec")
]
REPO = Path(__file__).resolve().parents[3]


def test_there_are_registration_lifecycle_and_cli_hooks():
    names = {name for name, _ in SPECS}
    assert {"codemoe_register_components", "codemoe_add_commands", "codemoe_before_stage",
            "codemoe_after_stage", "codemoe_after_train_step", "codemoe_after_rollout_batch"} <= names


@pytest.mark.parametrize("name,fn", SPECS, ids=[name for name, _ in SPECS])
def test_spec_docstring_follows_the_template(name, fn):
    doc = inspect.getdoc(fn) or ""
    summary = doc.splitlines()[0] if doc else ""
    assert summary.endswith("."), f"{name}: first line is a one-sentence summary"
    assert "**Default:**" in doc, f"{name}: says what happens when no plugin implements it"
    for param in inspect.signature(fn).parameters:
        assert f":param {param}:" in doc, f"{name}: documents argument {param}"
    assert ":returns:" in doc and re.search(r"\*\*firstresult:\*\* (yes|no)", doc), name
    firstresult = fn.codemoe_spec.get("firstresult", False)
    assert ("**firstresult:** yes" in doc) == firstresult, f"{name}: firstresult documented as it is"


@pytest.mark.parametrize("name", [name for name, _ in SPECS])
def test_every_hook_is_exercised_by_a_test(name):
    this = Path(__file__).resolve()
    tests = [p for p in REPO.glob("**/tests/**/test_*.py") if p.resolve() != this and ".venv" not in p.parts]
    assert any(f"def {name}(" in p.read_text() for p in tests), f"no test implements {name}"
