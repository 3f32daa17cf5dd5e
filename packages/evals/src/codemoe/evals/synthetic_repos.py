"""The ``synthetic-repos`` suite: small Python repositories generated from families and a seed.

Nine families (:mod:`codemoe.evals.repo_families`) cover the seeds' task types: test-driven bug
fix, cross-file rename, multi-round correction, dependency upgrade, performance fix, multi-file
edit, debugging over several runs, clarification needed, constraints that must hold at the end.
Instance ``j`` of a family in a split is the ``j``-th distinct repository drawn from a random
generator seeded by ``(seed, split, family, attempt)``, so a split's tasks do not depend on how
many are asked for, and the same config gives the same tasks on every machine.

The splits share no vocabulary: train repositories take their package, module, noun and library
names from the train half of every pool of :mod:`codemoe.evals.repo_vocabulary`, held-out ones
from the held-out half, so no held-out package, file path, function name or library occurs in
training. The vocabulary split is fixed; ``seed`` draws fresh instances, which is how anyone gets a
new held-out set that a model trained on another seed has still never seen a name of.

Each instance is written once as a task folder of the sandbox's format (``task.yaml``, ``repo/``,
``hidden_tests/``, ``gold.patch`` and, for the multi-round family, ``decoy.patch``: the obvious fix
a visible test refutes) under ``path`` and read back through the registry's task format, exactly
as ``agentic-core`` is; ``codemoe tasks validate <folder>`` checks any of them.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import os
import random
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from codemoe.core.contracts import TaskFormat
from codemoe.evals import repo_families, repo_vocabulary
from codemoe.evals.agentic_suite import RepoTask
from codemoe.evals.repo_families import FAMILIES, RepoInstance
from codemoe.evals.repo_vocabulary import NAME_MODES, Words
from codemoe.evals.tasks import check_split

__all__ = ["SyntheticReposConfig", "SyntheticReposSuite", "build_synthetic_repos_suite", "draw_instances", "unified_diff"]

_SHORT = {
    "test-driven-bug-fix": "bugfix",
    "cross-file-refactor": "rename",
    "multi-round-error-correction": "multiround",
    "dependency-upgrade": "depupgrade",
    "performance-optimisation": "perf",
    "multi-file-edit": "multifile",
    "debugging-several-runs": "debug",
    "clarification-needed": "clarify",
    "long-horizon-constraints": "constraints",
}
_MAX_ATTEMPTS = 50  # draws per wanted instance before a family is declared exhausted


@dataclass
class SyntheticReposConfig:
    """Options of the ``synthetic-repos`` suite."""

    seed: int = 0  # draws the instances (names, constants, layouts); the vocabulary split is fixed
    train_tasks: int = 2000  # tasks in the 'train' split, families round-robin
    heldout_tasks: int = 400  # tasks in the 'heldout' split, families round-robin
    families: list[str] = field(default_factory=list)  # task types to include; empty: all nine
    train_names: str = "words"  # made-up names only copying writes: 'coined' (the train words' spelling), 'english' (English's), 'random' (uniform letters)
    name_noise: float = 0.0  # made-up train names: the share of their letters drawn uniformly from a-z, off the spelling prior
    step_budget: int = 20  # actions per episode written into every task
    path: str = ""  # where task folders are written; "" = $CODEMOE_CACHE_DIR (or ~/.cache/codemoe)/synthetic-repos
    format: Any = field(default_factory=lambda: {"name": "repo"}, metadata={"kind": "task_format"})  # reads the folders


def unified_diff(before: dict[str, str], after: dict[str, str]) -> str:
    """The ``git diff``-style patch from ``before`` to ``after`` (the form of every ``gold.patch``)."""
    chunks = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        chunks += difflib.unified_diff((old or "").splitlines(keepends=True), (new or "").splitlines(keepends=True),
                                       fromfile=f"a/{path}" if old is not None else "/dev/null",
                                       tofile=f"b/{path}" if new is not None else "/dev/null")
    return "".join(chunks)


@functools.cache
def _fingerprint() -> str:
    """A hash of the generator's code: folders written by another version are never reused."""
    digest = hashlib.sha256()
    for module in (repo_families, repo_vocabulary):
        digest.update(Path(module.__file__ or "").read_bytes())
    return digest.hexdigest()[:12]


def _cache_root() -> Path:
    base = os.environ.get("CODEMOE_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "codemoe")
    return Path(base) / "synthetic-repos"


def _draw(config: SyntheticReposConfig, family: str, split: str, count: int) -> list[RepoInstance]:
    """The first ``count`` distinct instances of ``family`` in ``split``."""
    found: dict[str, RepoInstance] = {}
    attempt = 0
    while len(found) < count:
        if attempt >= _MAX_ATTEMPTS * count:
            raise ValueError(f"suite 'synthetic-repos': family {family} has fewer than {count} distinct {split} "
                             f"instances ({len(found)} after {attempt} draws)")
        rng = random.Random(f"{config.seed}:{split}:{family}:{attempt}")
        names = config.train_names if split == "train" else "words"
        instance = FAMILIES[family](rng, Words(rng, split, names, config.name_noise if split == "train" else 0.0))
        found.setdefault(instance.key(), instance)
        attempt += 1
    return list(found.values())


def draw_instances(config: SyntheticReposConfig, split: str) -> list[tuple[str, RepoInstance]]:
    """``(task id, instance)`` for every task of ``split`` under ``config``, families round-robin."""
    check_split(split, "synthetic-repos")
    total = config.heldout_tasks if split == "heldout" else config.train_tasks
    families = list(config.families or FAMILIES)
    per = {f: len(range(i, total, len(families))) for i, f in enumerate(families)}
    drawn = {f: _draw(config, f, split, n) for f, n in per.items()}
    out = []
    for j in range(max(per.values(), default=0)):
        for family in families:
            if j < len(drawn[family]):
                instance = drawn[family][j]
                digest = hashlib.sha256(instance.key().encode()).hexdigest()[:8]
                out.append((f"{_SHORT[family]}-{next(iter(instance.names['package']))}-{digest}", instance))
    return out


class SyntheticReposSuite:
    """Generated repository tasks in nine families; train and held-out split by vocabulary."""

    name = "synthetic-repos"

    def __init__(self, config: SyntheticReposConfig, task_format: TaskFormat) -> None:
        self.config, self.task_format = config, task_format
        unknown = sorted(set(config.families) - set(FAMILIES))
        if unknown:
            raise ValueError(f"suite '{self.name}': unknown families {unknown}; valid: {', '.join(FAMILIES)}")
        if config.train_names not in NAME_MODES:
            raise ValueError(f"suite '{self.name}': train_names must be one of {', '.join(NAME_MODES)}, "
                             f"got {config.train_names!r}")
        if not 0.0 <= config.name_noise < 1.0:
            raise ValueError(f"suite '{self.name}': name_noise must be in [0, 1), got {config.name_noise!r}")
        if config.name_noise and config.train_names == "words":
            raise ValueError(f"suite '{self.name}': name_noise acts on made-up train names; set train_names to one of "
                             f"{', '.join(n for n in NAME_MODES if n != 'words')} (got train_names: words)")
        for key in ("train_tasks", "heldout_tasks", "step_budget"):
            if getattr(config, key) < 0 or (key == "step_budget" and config.step_budget < 5):
                raise ValueError(f"suite '{self.name}': {key} must be {'>= 5' if key == 'step_budget' else '>= 0'}, "
                                 f"got {getattr(config, key)}")

    @property
    def families(self) -> list[str]:
        return list(self.config.families or FAMILIES)

    @property
    def root(self) -> Path:
        """The folder holding this seed's task folders, one sub-folder per split."""
        base = Path(self.config.path) if self.config.path else _cache_root()
        names = "" if self.config.train_names == "words" else f"-{self.config.train_names}"
        if self.config.name_noise and self.config.train_names != "words":
            names += f"-noise{self.config.name_noise:g}"
        return base / f"{_fingerprint()}-seed{self.config.seed}-budget{self.config.step_budget}{names}"

    def instances(self, split: str) -> list[tuple[str, RepoInstance]]:
        """``(task id, instance)`` for every task of ``split``, families round-robin."""
        return draw_instances(self.config, split)

    # -- task folders -----------------------------------------------------------------------------

    def _write(self, folder: Path, task_id: str, instance: RepoInstance) -> None:
        """Write one task folder atomically (a concurrent writer of the same folder is harmless)."""
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{task_id}-", dir=folder.parent))
        try:
            meta = {"id": task_id, "type": instance.type, "statement": instance.statement,
                    "test_command": "python -m pytest -q tests", "fail_to_pass": instance.fail_to_pass,
                    "pass_to_pass": instance.pass_to_pass, "step_budget": self.config.step_budget,
                    "readonly": instance.readonly, "timeout_s": 30}
            if instance.clarification:
                meta["clarification"] = instance.clarification
            (tmp / "task.yaml").write_text(yaml.safe_dump(meta, sort_keys=False, width=100), encoding="utf-8")
            for base, files in (("repo", instance.files), ("hidden_tests", instance.hidden)):
                for rel, text in files.items():
                    target = tmp / base / rel
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_text(text, encoding="utf-8")
            after = {**instance.files, **instance.gold}
            (tmp / "gold.patch").write_text(unified_diff(instance.files, after), encoding="utf-8")
            if instance.decoy:
                decoy = unified_diff(instance.files, {**instance.files, **instance.decoy})
                (tmp / "decoy.patch").write_text(decoy, encoding="utf-8")
            os.rename(tmp, folder)
        except OSError:
            if not (folder / "task.yaml").is_file():
                raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def write(self, split: str) -> list[Path]:
        """Write the task folders of ``split`` that are not on disk yet; returns every folder, in order."""
        folders = []
        for task_id, instance in self.instances(split):
            folder = self.root / split / task_id
            if not (folder / "task.yaml").is_file():
                self._write(folder, task_id, instance)
            folders.append(folder)
        return folders

    def tasks(self, split: str) -> list[RepoTask]:
        """The tasks of ``split`` ('train' or 'heldout') as the task format loads them, families round-robin."""
        return [RepoTask(task) for folder in self.write(split) for task in self.task_format.load(folder)]


def build_synthetic_repos_suite(config: SyntheticReposConfig, *, registry: Any) -> SyntheticReposSuite:
    """Generated repository tasks in nine families, read back through the task format."""
    return SyntheticReposSuite(config, registry.build("task_format", config.format, where="suite.format"))
