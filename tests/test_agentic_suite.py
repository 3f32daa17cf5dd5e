"""The evals' ``agentic-core`` suite over the sandbox's ``repo`` task format, both from the registry.

A flow across packages: the suite (evals) reads its folder through the task format (sandbox) and
hands out the very task objects the environment resets on.
"""

from __future__ import annotations

import collections
import shutil
from pathlib import Path

import pytest
import yaml
from codemoe.core import build_plugin_manager, build_registry
from codemoe.core.contracts import RepositoryTask, TaskFormat, repository_task

ROOT = Path(__file__).resolve().parents[1]
SUITE_DIR = ROOT / "registry" / "suites" / "agentic-core"


@pytest.fixture(scope="module")
def registry():
    return build_registry(build_plugin_manager())


def suite(registry, **options):
    return registry.build("suite", {"name": "agentic-core", "path": str(SUITE_DIR), **options})


def test_preset_builds_the_suite_with_every_task_held_out(registry, monkeypatch):
    monkeypatch.setenv("CODEMOE_REGISTRY", str(ROOT / "registry"))
    spec = yaml.safe_load((ROOT / "registry" / "suites" / "agentic-core.yaml").read_text())
    built = registry.build("suite", spec)
    assert built.name == "agentic-core" and isinstance(built.task_format, TaskFormat)
    heldout = built.tasks("heldout")
    assert built.tasks("train") == []
    assert len(heldout) >= 20 and [t.id for t in heldout] == sorted(t.id for t in heldout)
    counts = collections.Counter(t.family for t in heldout)
    assert set(counts) == set(built.task_format.types) and min(counts.values()) >= 2


def test_a_suite_task_carries_the_task_the_format_loaded(registry):
    task = next(t for t in suite(registry).tasks("heldout") if t.id == "clarify-invoice-rounding")
    inner = repository_task(task)
    assert isinstance(inner, RepositoryTask) and inner is task.task
    assert task.family == inner.type == "clarification-needed"
    assert inner.clarification.startswith("From accounting")
    assert inner.test_command == ["python", "-m", "pytest", "-q", "tests"]
    assert inner.fail_to_pass == ["tests/test_invoice.py::test_simple_total"]
    assert sorted(inner.repo_files()) == [
        "billing/__init__.py",
        "billing/invoice.py",
        "pyproject.toml",
        "tests/test_invoice.py",
    ]
    assert list(inner.hidden_files) == ["hidden_tests/test_invoice_rules.py"]
    assert inner.gold_patch.startswith("--- a/billing/invoice.py\n+++ b/billing/invoice.py\n")
    assert task.prompt.startswith("Task clarify-invoice-rounding\n\n") and "test_invoice_rules" not in task.prompt


def test_the_environment_renders_the_first_prompt_from_the_suite_task(registry):
    task = next(t for t in suite(registry).tasks("heldout") if t.id == "clarify-invoice-rounding")
    executor = registry.build("executor", {"name": "local", "workers": 1})
    try:
        env = registry.build("environment", "repo", executor=executor)
        prompt = env.reset(repository_task(task))
        system, user = env.episode.messages[0]["content"], env.episode.messages[1]["content"]
        assert prompt == f"{system}\n\n{user}\n"
        assert '"name": "read_file"' in system and task.statement in user and "billing/invoice.py" in user
        assert "test_invoice_rules" not in prompt  # hidden tests never reach the agent
        env.close_workspace()
    finally:
        executor.close()


def test_split_by_hash_partitions_the_tasks(registry):
    train, heldout = (
        suite(registry, heldout_percent=50, seed=3).tasks("train"),
        suite(registry, heldout_percent=50, seed=3).tasks("heldout"),
    )
    ids = {t.id for t in train} | {t.id for t in heldout}
    assert train and heldout and not {t.id for t in train} & {t.id for t in heldout}
    assert ids == {p.name for p in SUITE_DIR.iterdir() if (p / "task.yaml").is_file()}
    again = suite(registry, heldout_percent=50, seed=3).tasks("train")
    assert [t.id for t in again] == [t.id for t in train]


def test_type_filter_and_errors(registry, tmp_path):
    filtered = suite(registry, types=["dependency-upgrade"])
    assert [t.id for t in filtered.tasks("heldout")] == ["depupgrade-datefmt", "depupgrade-retrykit"]
    with pytest.raises(ValueError, match="unknown task types \\['refactor'\\]"):
        suite(registry, types=["refactor"])
    with pytest.raises(ValueError, match="unknown split 'test'"):
        filtered.tasks("test")
    empty = registry.build("suite", {"name": "agentic-core", "path": str(tmp_path)})
    with pytest.raises(ValueError, match="neither a task folder, a folder of tasks"):
        empty.tasks("heldout")
    shutil.copytree(SUITE_DIR / "perf-dedupe", tmp_path / "perf-dedupe")
    spec = tmp_path / "perf-dedupe" / "task.yaml"
    spec.write_text(spec.read_text().replace("type: performance-optimisation", "type: speed"))
    with pytest.raises(ValueError, match="type 'speed' is not one of"):
        empty.tasks("heldout")
