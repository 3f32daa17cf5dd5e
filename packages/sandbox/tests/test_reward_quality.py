"""Code-quality components: radon complexity, ruff warnings, codemoe's static rules."""

from __future__ import annotations

import pytest
from codemoe.sandbox.rewards import RewardInput, build_reward


def _changed(source: str, path: str = "pkg/m.py") -> RewardInput:
    return RewardInput(files_before={path: ""}, files_after={path: source})


BRANCHY = (
    "def classify(x):\n" + "".join(f"    if x == {i}:\n        return {i}\n" for i in range(12)) + "    return -1\n"
)


def test_complexity_counts_points_over_the_threshold():
    value = build_reward("complexity")(_changed(BRANCHY))
    assert value.value == 3.0  # 12 branches + 1 = 13, threshold 10
    assert value.evidence == ("pkg/m.py:1 classify is 3 over 10",)
    assert build_reward({"name": "complexity", "threshold": 13})(_changed(BRANCHY)).value == 0.0


def test_lint_warnings_come_from_ruff_on_changed_source_files_only():
    dirty = "import os\n\n\ndef f(x):\n    return x == None\n"
    value = build_reward("lint_warnings")(_changed(dirty))
    assert value.value == 2.0
    assert {line.split(": ")[1].split()[0] for line in value.evidence} == {"F401", "E711"}
    assert build_reward("lint_warnings")(_changed(dirty, path="tests/test_m.py")).value == 0.0
    assert build_reward("lint_warnings")(_changed("def f(x):\n    return x\n")).value == 0.0


def test_static_rules():
    smelly = (
        "from os import *\n"
        "_n = 0\n\n\n"
        "def f(x, seen=[]):\n"
        "    global _n\n"
        "    try:\n"
        "        return eval(x)\n"
        "    except:\n"
        "        return None\n"
    )
    value = build_reward("static_rules")(_changed(smelly))
    rules = sorted(line.split(": ")[1] for line in value.evidence)
    assert rules == ["bare_except", "eval_exec", "global_statement", "mutable_default", "star_import"]
    only = build_reward({"name": "static_rules", "rules": ["bare_except"]})(_changed(smelly))
    assert only.value == 1.0
    with pytest.raises(ValueError, match="unknown rule"):
        build_reward({"name": "static_rules", "rules": ["no_such_rule"]})
