"""docs/plugins.md builds a plugin with one component per kind; its files, written out exactly as the
guide prints them, pass the conformance kit (so the guide cannot drift from the code)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GUIDE = REPO / "docs" / "plugins.md"
FILE_BLOCK = re.compile(r"```python\n# file: (\S+)\n(.*?)```", re.S)
KINDS = {"router", "experts", "reward", "advantage", "policy_loss", "kl", "engine", "executor", "suite", "stage", "logger"}


def guide_files() -> dict[str, str]:
    return {path: body for path, body in FILE_BLOCK.findall(GUIDE.read_text())}


def test_the_guide_registers_one_example_per_kind():
    plugin = guide_files()["my_codemoe_plugin/plugin.py"]
    registered = set(re.findall(r'^    \("(\w+)", "', plugin, re.M))
    assert registered == KINDS
    tests = guide_files()["tests/test_my_components.py"]
    assert len(re.findall(r"^class Test\w+\((\w+)Contract\)", tests, re.M)) == len(KINDS), "one conformance class per kind"


@pytest.mark.timeout(600)
def test_the_guide_plugin_passes_the_conformance_kit(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    for path, body in guide_files().items():
        target = pytester.path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f"# file: {path}\n{body}")
    (pytester.path / "my_codemoe_plugin" / "__init__.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", str(pytester.path))
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "tests")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0 and outcomes.get("errors", 0) == 0, result.stdout.str()[-4000:]
    assert outcomes.get("passed", 0) >= 5 * len(KINDS), outcomes
