"""``synthetic-repos`` across the seams: the suite (evals) writes task folders, the ``repo`` task format
(sandbox) reads them, ``tasks validate`` proves a sample of every family in the real sandbox, and
the oracle's reference trajectories, replayed in the environment, resolve their tasks.
"""

from __future__ import annotations

import collections
from pathlib import Path

import codemoe.evals
import pytest
import yaml
from codemoe.core import build_plugin_manager, build_registry
from codemoe.core.contracts import RepositoryTask, play, repository_task

ROOT = Path(__file__).resolve().parents[1]
PER_FAMILY = 2  # instances of each family validated and replayed (seed 0 held-out, seed 5 coined train)


@pytest.fixture(scope="module")
def registry():
    return build_registry(build_plugin_manager())


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("synthetic-repos")


@pytest.fixture(scope="module")
def sample(registry, cache):
    """``PER_FAMILY`` tasks of every family: half from the held-out split, half from a train draw of another
    seed with coined names (the pipelines' training draw)."""
    tasks = []
    for seed, split in ((0, "heldout"), (5, "train")):
        suite = registry.build("suite", {"name": "synthetic-repos", "seed": seed, "path": str(cache),
                                         "train_names": "coined", f"{split}_tasks": 9 * PER_FAMILY // 2})
        tasks += suite.tasks(split)
    return tasks


@pytest.fixture(scope="module")
def executor(registry):
    built = registry.build("executor", {"name": "local", "workers": 2})
    yield built
    built.close()


def test_the_preset_builds_the_suite_and_hands_out_repository_tasks(registry, cache, monkeypatch):
    spec = yaml.safe_load((Path(codemoe.evals.__file__).parent / "presets" / "suites" / "synthetic-repos.yaml").read_text())
    suite = registry.build("suite", {**spec, "path": str(cache), "train_tasks": 18, "heldout_tasks": 9})
    train, heldout = suite.tasks("train"), suite.tasks("heldout")
    assert (len(train), len(heldout)) == (18, 9)
    assert collections.Counter(t.family for t in train) == {family: 2 for family in suite.families}
    inner = repository_task(heldout[0])
    assert isinstance(inner, RepositoryTask) and inner is heldout[0].task and inner.type == heldout[0].family
    assert inner.source.startswith(str(suite.root / "heldout"))
    assert [t.id for t in suite.tasks("heldout")] == [t.id for t in heldout]  # read back from the folders written once


@pytest.mark.slow
def test_a_sample_of_every_family_validates_in_the_sandbox(sample, executor):
    from codemoe.sandbox.agent.validate import validate_tasks

    assert collections.Counter(t.family for t in sample) == {f: PER_FAMILY for f in {t.family for t in sample}}
    assert len({t.family for t in sample}) == 9
    reports = validate_tasks([repository_task(t) for t in sample], executor)
    assert all(r.ok for r in reports), [(r.task_id, r.problems) for r in reports if not r.ok]
    decoys = [t for t in sample if repository_task(t).decoy_patch]
    assert decoys and all(t.family == "multi-round-error-correction" for t in decoys)


@pytest.mark.slow
def test_every_reference_trajectory_resolves_its_task_when_replayed(registry, sample, executor):
    env = registry.build("environment", "repo", executor=executor)
    for task in sample:
        inner = repository_task(task)
        episode = play(env, inner, registry.build("scripted_agent", "oracle", task=inner))
        tools = [r.tool for r in episode.log]
        runs = [r.data["status"] for r in episode.log if r.tool == "run_tests"]
        assert episode.resolved and episode.stop_reason == "submitted" and episode.format_errors == 0, task.id
        assert all(r.ok for r in episode.log), (task.id, [r.message for r in episode.log if not r.ok])
        assert "write_file" not in tools and "edit" in tools, task.id  # small exact edits, no whole-file rewrite
        # failing (or not importable) until the last change, passing after it
        assert "passed" not in runs[:-1] and runs[-1] == "passed" and tools[-1] == "submit", (task.id, runs)
        if task.family == "multi-round-error-correction":  # the obvious fix, its failing run, the correction
            assert len(runs) == 3, task.id
        if task.family == "debugging-several-runs":
            assert len(runs) >= 3, task.id
        if task.family == "clarification-needed":
            assert "ask_clarification" in tools, task.id
    env.close_workspace()


def test_no_hack_detector_flags_a_gold_patch(registry, cache):
    """The gold patches are honest changes an RL policy is rewarded for making: a detector that fires on
    one voids the reward of the very fix the task asks for (the missing-case family's `if count == 0:
    return "no gauges"` was once taken for a test's answer looked up)."""
    from codemoe.sandbox.rewards import RewardInput, build_reward
    from codemoe.sandbox.rewards.penalty import DETECTORS

    suite = registry.build("suite", {"name": "synthetic-repos", "seed": 0, "path": str(cache), "train_names": "coined",
                                     "train_tasks": 400, "heldout_tasks": 100})
    detectors = {name: build_reward(name) for name in DETECTORS}
    flagged = {}
    for task in [*suite.tasks("train"), *suite.tasks("heldout")]:
        inner = repository_task(task)
        change = RewardInput(files_before=inner.repo_files(), files_after=inner.gold_files())
        flagged.update({f"{task.id}: {name}": verdict.evidence for name, detect in detectors.items()
                        if (verdict := detect(change)).value})
    assert flagged == {}
