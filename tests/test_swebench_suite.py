"""SWE-bench-style instances as an evals suite: ``agentic-core`` reads a ``.jsonl`` through the
sandbox's ``repo`` task format, so an ``eval`` stage with ``environment: repo`` runs agents on them."""

from __future__ import annotations

import shutil
from pathlib import Path

from codemoe.core import build_plugin_manager, build_registry
from codemoe.core.contracts import repository_task

DATA = Path(__file__).resolve().parents[1] / "packages" / "sandbox" / "tests" / "data" / "swebench"


def test_agentic_suite_reads_swebench_instances_with_their_setup(tmp_path):
    shutil.copy(DATA / "instances.jsonl", tmp_path)  # checkouts go beside the file: keep them out of the tree
    shutil.copytree(DATA / "repos", tmp_path / "repos")
    registry = build_registry(build_plugin_manager())
    suite = registry.build("suite", {"name": "agentic-core", "path": str(tmp_path / "instances.jsonl")})
    tasks = suite.tasks("heldout")
    assert [t.id for t in tasks] == ["python-humanize__humanize-33005e5", "python-humanize__humanize-b1ee687",
                                     "tkem__cachetools-57d2e48"]
    assert {t.family for t in tasks} == {"swe-bench"}
    inner = repository_task(tasks[1])
    assert inner.setup == ["python -m pip install --no-deps --no-build-isolation -e ."]
    assert inner.judged_tests == "listed" and "src/humanize/number.py" in inner.repo_files()
