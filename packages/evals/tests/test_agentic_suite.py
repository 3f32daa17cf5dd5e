"""The ``agentic-core`` suite read from registry/suites/agentic-core, through the registry."""

from __future__ import annotations

import collections
import shutil
from pathlib import Path

import pytest
import yaml
from codemoe.core import build_plugin_manager, build_registry
from codemoe.evals.agentic_suite import TASK_TYPES, AgenticSuite, AgenticSuiteConfig, load_repo_task

ROOT = Path(__file__).resolve().parents[3]
SUITE_DIR = ROOT / "registry" / "suites" / "agentic-core"


@pytest.fixture(scope="module")
def registry():
    return build_registry(build_plugin_manager())


def test_preset_builds_the_suite_with_every_task_held_out(registry, monkeypatch):
    monkeypatch.setenv("CODEMOE_REGISTRY", str(ROOT / "registry"))
    spec = yaml.safe_load((ROOT / "registry" / "suites" / "agentic-core.yaml").read_text())
    suite = registry.build("suite", spec)
    assert suite.name == "agentic-core"
    heldout = suite.tasks("heldout")
    assert suite.tasks("train") == []
    assert len(heldout) >= 20 and [t.id for t in heldout] == sorted(t.id for t in heldout)
    counts = collections.Counter(t.family for t in heldout)
    assert set(counts) == set(TASK_TYPES) and min(counts.values()) >= 2


def test_task_contents():
    task = load_repo_task(SUITE_DIR / "clarify-invoice-rounding")
    assert task.family == "clarification-needed" and task.clarification.startswith("From accounting")
    assert task.test_command == ["python", "-m", "pytest", "-q", "tests"]
    assert task.fail_to_pass == ["tests/test_invoice.py::test_simple_total"]
    assert sorted(task.files) == ["billing/__init__.py", "billing/invoice.py", "pyproject.toml", "tests/test_invoice.py"]
    assert list(task.hidden_tests) == ["hidden_tests/test_invoice_rules.py"]
    assert task.gold_patch.startswith("--- a/billing/invoice.py\n+++ b/billing/invoice.py\n")
    assert "Repository files:\nbilling/__init__.py" in task.prompt and "test_invoice_rules" not in task.prompt


def test_split_by_hash_partitions_the_tasks():
    suite = AgenticSuite(AgenticSuiteConfig(path=str(SUITE_DIR), heldout_percent=50, seed=3))
    train, heldout = suite.tasks("train"), suite.tasks("heldout")
    ids = {t.id for t in train} | {t.id for t in heldout}
    assert train and heldout and not {t.id for t in train} & {t.id for t in heldout}
    assert ids == {p.name for p in SUITE_DIR.iterdir() if (p / "task.yaml").is_file()}
    again = AgenticSuite(AgenticSuiteConfig(path=str(SUITE_DIR), heldout_percent=50, seed=3)).tasks("train")
    assert [t.id for t in again] == [t.id for t in train]


def test_type_filter_and_errors(tmp_path):
    suite = AgenticSuite(AgenticSuiteConfig(path=str(SUITE_DIR), types=["dependency-upgrade"]))
    assert [t.id for t in suite.tasks("heldout")] == ["depupgrade-datefmt", "depupgrade-retrykit"]
    with pytest.raises(ValueError, match="unknown task types \\['refactor'\\]"):
        AgenticSuite(AgenticSuiteConfig(types=["refactor"]))
    with pytest.raises(ValueError, match="unknown split 'test'"):
        suite.tasks("test")
    with pytest.raises(ValueError, match="no task folders"):
        AgenticSuite(AgenticSuiteConfig(path=str(tmp_path))).tasks("heldout")
    shutil.copytree(SUITE_DIR / "perf-dedupe", tmp_path / "perf-dedupe")
    spec = tmp_path / "perf-dedupe" / "task.yaml"
    spec.write_text(spec.read_text().replace("type: performance-optimisation", "type: speed"))
    with pytest.raises(ValueError, match="type 'speed' is not one of"):
        AgenticSuite(AgenticSuiteConfig(path=str(tmp_path))).tasks("heldout")
