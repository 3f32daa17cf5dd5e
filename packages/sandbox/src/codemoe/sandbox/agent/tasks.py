"""Repository-level tasks: the folder format, its loader, and the SWE-bench JSONL loader.

A task folder holds::

    task.yaml       statement, type, visible test command, fail_to_pass, pass_to_pass,
                    optional clarification, step budget, read-only patterns
    repo/           the repository the agent starts from
    hidden_tests/   tests the agent never sees; grading copies them to ``hidden_tests/``
    gold.patch      a unified diff that solves the task
    decoy.patch     optional: the obvious first fix that a visible test refutes (multi-round tasks);
                    validation proves it wrong, and the oracle plays it before the gold patch

Test ids are pytest node ids relative to the repository root (``tests/test_x.py::test_y``); ids
under ``hidden_tests/`` name hidden tests. ``fail_to_pass`` and ``pass_to_pass`` may name both.
A SWE-bench instance maps onto the same :class:`Task`: ``patch`` is the gold patch and the files
``test_patch`` touches become the hidden overlay, with the repository checked out from local disk
(a git checkout or a git bundle). Either kind of task may have ``setup`` commands and an ``env``,
run and set inside the sandbox before every test run (:mod:`codemoe.sandbox.agent.task_setup`), a
``test_command`` and a ``timeout_s``; ``judged_tests`` says which tests decide (SWE-bench's rule,
the listed ones, is an instance's default; a folder's is every hidden test too).
"""

from __future__ import annotations

import io
import json
import shlex
import subprocess
import tarfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from codemoe.sandbox.agent.patches import apply_patch, parse_patch
from codemoe.sandbox.agent.task_setup import PLUGIN, PLUGIN_FILE, SETUP_ENV, plugin_source

__all__ = [
    "HIDDEN_DIR",
    "TASK_TYPES",
    "RepoTaskFormat",
    "RepoTaskFormatConfig",
    "Task",
    "TaskFormatError",
    "load_swebench_jsonl",
    "load_task",
    "load_tasks",
    "read_tree",
]

HIDDEN_DIR = "hidden_tests"

TASK_TYPES = (
    "cross-file-refactor",
    "test-driven-bug-fix",
    "multi-round-error-correction",
    "dependency-upgrade",
    "performance-optimisation",
    "multi-file-edit",
    "build-external-dependency",
    "debugging-several-runs",
    "clarification-needed",
    "long-horizon-constraints",
)

_REQUIRED = ("id", "type", "statement", "test_command", "fail_to_pass")
_OPTIONAL = ("pass_to_pass", "clarification", "step_budget", "readonly", "timeout_s", "setup", "env", "judged_tests")
JUDGED_TESTS = ("all", "listed")  # what grading and validation judge (see Task.judged_tests)
SWEBENCH_TEST_COMMAND = ("python", "-m", "pytest", "-q", ".")  # an instance without test_command runs every test
SWEBENCH_TIMEOUT_S = 30.0  # an instance without timeout_s


class TaskFormatError(ValueError):
    """A task folder or instance that does not follow the format; the message names the file."""


@dataclass
class Task:
    """One repository-level task, wherever it came from."""

    id: str  # unique in its suite
    type: str  # one of TASK_TYPES (or "swe-bench" for loaded instances)
    statement: str  # what the agent is asked to do
    repo: Path  # the repository the agent starts from (never modified)
    test_command: list[str]  # visible tests; a pytest command that accepts extra paths
    fail_to_pass: list[str]  # test ids that fail before and pass after the gold patch
    pass_to_pass: list[str] = field(default_factory=list)  # test ids that pass both times
    hidden_files: dict[str, str] = field(default_factory=dict)  # grading overlay: path -> text
    hidden_targets: list[str] = field(default_factory=lambda: [HIDDEN_DIR])  # paths appended to grade hidden tests
    gold_patch: str = ""  # unified diff that solves the task
    decoy_patch: str = ""  # the obvious first fix, refuted by a visible test ("" = none)
    clarification: str | None = None  # the answer ask_clarification gives; None: nothing to clarify
    step_budget: int = 30  # actions allowed in an episode
    readonly: list[str] = field(default_factory=list)  # glob patterns the agent cannot write
    timeout_s: float = 30.0  # wall-clock limit of one test run (setup included)
    source: str = ""  # where the task was loaded from
    setup: list[str] = field(default_factory=list)  # shell commands run in the sandbox before every test run
    env: dict[str, str] = field(default_factory=dict)  # added to every test run's environment (PYTHONPATH=src)
    # "all": fail_to_pass, pass_to_pass and every hidden test must pass (codemoe's task folders);
    # "listed": fail_to_pass and pass_to_pass only, other failing tests are warnings (SWE-bench's rule)
    judged_tests: str = "all"

    def repo_files(self) -> dict[str, str]:
        """The starting repository as ``{path: text}``."""
        return read_tree(self.repo)

    def gold_files(self) -> dict[str, str]:
        """The repository with the gold patch applied."""
        return apply_patch(self.repo_files(), self.gold_patch)

    def decoy_files(self) -> dict[str, str] | None:
        """The repository with the decoy patch applied, or None when the task has no decoy."""
        return apply_patch(self.repo_files(), self.decoy_patch) if self.decoy_patch else None

    def grading_command(self) -> list[str]:
        """The command that runs the visible and the hidden tests in one execution.

        A test module that fails to import must not hide the outcomes of the others, so collection
        errors do not stop the run.
        """
        return [*self.test_command, "--continue-on-collection-errors", *self.hidden_targets]

    def setup_args(self) -> list[str]:
        """The pytest arguments that load the setup plugin, when the task has setup or a ``PYTHONPATH``."""
        return ["-p", PLUGIN] if self.setup or "PYTHONPATH" in self.env else []

    def setup_files(self) -> dict[str, str]:
        """The files a test run lays beside the repository for :meth:`setup_args` (the setup plugin)."""
        return {PLUGIN_FILE: plugin_source()} if self.setup_args() else {}

    def execution_env(self) -> dict[str, str]:
        """The environment a test run of this task adds: the task's ``env`` and its setup commands."""
        return {**self.env, **({SETUP_ENV: json.dumps(self.setup)} if self.setup else {})}

    def judged(self, hidden_after: Iterable[str]) -> list[str]:
        """The test ids that decide whether the task is resolved, given the hidden tests that ran."""
        listed = [*self.fail_to_pass, *self.pass_to_pass]
        return listed if self.judged_tests == "listed" else [*listed, *hidden_after]

    def is_hidden(self, test_id: str) -> bool:
        """Whether ``test_id`` names a hidden test."""
        path = test_id.split("::", 1)[0]
        return path in self.hidden_files or any(path == t or path.startswith(t.rstrip("/") + "/") for t in self.hidden_targets)


def read_tree(root: Path) -> dict[str, str]:
    """Every UTF-8 file under ``root`` as ``{posix path: text}`` (caches and ``.git`` skipped)."""
    files: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if not path.is_file() or {".git", "__pycache__", ".pytest_cache"} & set(rel.parts):
            continue
        try:
            files[rel.as_posix()] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
    return files


def _command(value: Any, where: str) -> list[str]:
    if isinstance(value, str):
        return shlex.split(value)
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return list(value)
    raise TaskFormatError(f"{where}: test_command must be a string or a list of strings, got {value!r}")


def _id_list(meta: Mapping[str, Any], key: str, where: str) -> list[str]:
    value = meta.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) and "::" in v for v in value):
        raise TaskFormatError(f"{where}: {key} must be a list of pytest node ids ('path::test'), got {value!r}")
    return list(value)


def _setup(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise TaskFormatError(f"{where}: setup must be a shell command or a list of them, got {value!r}")
    return list(value)


def _env(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise TaskFormatError(f"{where}: env must map variable names to strings, got {value!r}")
    return dict(value)


def _timeout(value: Any, default: float, where: str) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 86_400:
        raise TaskFormatError(f"{where}: timeout_s must be a number of seconds in (0, 86400], got {value!r}")
    return float(value)


def _judged(value: Any, default: str, where: str) -> str:
    if value is None:
        return default
    if value not in JUDGED_TESTS:
        raise TaskFormatError(f"{where}: judged_tests must be one of {', '.join(JUDGED_TESTS)}, got {value!r}")
    return str(value)


def load_task(folder: Path | str) -> Task:
    """Load one task folder; raises :class:`TaskFormatError` naming the file and the problem."""
    folder = Path(folder)
    spec = folder / "task.yaml"
    if not spec.is_file():
        raise TaskFormatError(f"{folder}: no task.yaml")
    meta = yaml.safe_load(spec.read_text(encoding="utf-8"))
    if not isinstance(meta, dict):
        raise TaskFormatError(f"{spec}: expected a mapping")
    missing = [key for key in _REQUIRED if key not in meta]
    unknown = sorted(set(meta) - set(_REQUIRED) - set(_OPTIONAL))
    if missing or unknown:
        raise TaskFormatError(f"{spec}: missing keys {missing}, unknown keys {unknown}; allowed: {_REQUIRED + _OPTIONAL}")
    if meta["type"] not in TASK_TYPES:
        raise TaskFormatError(f"{spec}: type {meta['type']!r} is not one of {', '.join(TASK_TYPES)}")
    for part in ("repo", HIDDEN_DIR, "gold.patch"):
        if not (folder / part).exists():
            raise TaskFormatError(f"{folder}: missing {part}")
    hidden = {f"{HIDDEN_DIR}/{path}": text for path, text in read_tree(folder / HIDDEN_DIR).items()}
    decoy = folder / "decoy.patch"
    return Task(
        id=str(meta["id"]),
        type=meta["type"],
        statement=str(meta["statement"]).strip(),
        repo=folder / "repo",
        test_command=_command(meta["test_command"], str(spec)),
        fail_to_pass=_id_list(meta, "fail_to_pass", str(spec)),
        pass_to_pass=_id_list(meta, "pass_to_pass", str(spec)),
        hidden_files=hidden,
        gold_patch=(folder / "gold.patch").read_text(encoding="utf-8"),
        decoy_patch=decoy.read_text(encoding="utf-8") if decoy.is_file() else "",
        clarification=(str(meta["clarification"]).strip() if meta.get("clarification") else None),
        step_budget=int(meta.get("step_budget", 30)),
        readonly=list(meta.get("readonly") or []),
        timeout_s=_timeout(meta.get("timeout_s"), 30.0, str(spec)),
        source=str(folder),
        setup=_setup(meta.get("setup"), str(spec)),
        env=_env(meta.get("env"), str(spec)),
        judged_tests=_judged(meta.get("judged_tests"), "all", str(spec)),
    )


def load_tasks(path: Path | str) -> list[Task]:
    """Load a task folder, a suite folder of task folders, or a SWE-bench ``.jsonl`` file."""
    path = Path(path)
    if path.suffix == ".jsonl":
        return load_swebench_jsonl(path, path.parent / "repos")
    if (path / "task.yaml").is_file():
        return [load_task(path)]
    folders = sorted(p for p in path.iterdir() if (p / "task.yaml").is_file()) if path.is_dir() else []
    if not folders:
        raise TaskFormatError(f"{path}: neither a task folder, a folder of tasks nor a .jsonl file")
    return [load_task(folder) for folder in folders]


@dataclass
class RepoTaskFormatConfig:
    """Options of the ``repo`` task format (none yet: the folder format says everything)."""


class RepoTaskFormat:
    """The ``repo`` task format (kind ``task_format``): task folders and SWE-bench JSONL.

    The one loader of this format: a suite that hands out repository tasks (the evals'
    ``agentic-core``) reads its folder through it and keeps each :class:`Task` it returns.
    """

    types = TASK_TYPES  # the task types a folder may declare

    def __init__(self, config: RepoTaskFormatConfig | None = None) -> None:
        self.config = config or RepoTaskFormatConfig()

    def load(self, path: Path | str) -> list[Task]:
        """The tasks under ``path`` (see :func:`load_tasks`)."""
        return load_tasks(path)


# -------------------------------------------------------------------------------------------------
# SWE-bench instances with repositories on local disk
# -------------------------------------------------------------------------------------------------


def _json_list(value: Any) -> list[str]:
    return list(json.loads(value)) if isinstance(value, str) else list(value or [])


def _checkout(repo: Path, commit: str, dest: Path) -> Path:
    """Extract ``commit`` of the git repository ``repo`` into ``dest`` (once)."""
    if not dest.exists():
        archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", commit],
                                 capture_output=True, check=False)
        if archive.returncode != 0:
            raise TaskFormatError(f"{repo}: cannot check out {commit}: {archive.stderr.decode(errors='replace').strip()}")
        dest.mkdir(parents=True)
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(dest, filter="data")
    return dest


def _unbundle(bundle: Path, dest: Path) -> Path:
    """A bare clone of the git bundle ``bundle`` at ``dest`` (made once)."""
    if not dest.exists():
        done = subprocess.run(["git", "clone", "--quiet", "--bare", str(bundle), str(dest)], capture_output=True, check=False)
        if done.returncode != 0:
            raise TaskFormatError(f"{bundle}: not a git bundle git can clone: {done.stderr.decode(errors='replace').strip()}")
    return dest


def _find_repo(repos_dir: Path, name: str, cache: Path) -> Path:
    """The git repository of ``owner/name``: a checkout or a ``.bundle`` file under ``repos_dir``."""
    for candidate in (repos_dir / name.replace("/", "__"), repos_dir / name, repos_dir / name.split("/")[-1]):
        if (candidate / ".git").exists():
            return candidate
        bundle = candidate.with_name(candidate.name + ".bundle")
        if bundle.is_file():
            return _unbundle(bundle, cache / "_bundles" / f"{name.replace('/', '__')}.git")
    raise TaskFormatError(f"repository {name!r} not found under {repos_dir} "
                          "(tried owner__name, owner/name and name, each a git checkout or a .bundle file)")


def _instance_task(inst: dict[str, Any], repos_dir: Path, cache: Path, where: str) -> Task:
    repo = _checkout(_find_repo(repos_dir, inst["repo"], cache), inst["base_commit"], cache / inst["instance_id"])
    base = read_tree(repo)
    test_files = [p.path for p in parse_patch(inst["test_patch"])]
    hidden = {name: text for name, text in apply_patch(base, inst["test_patch"]).items() if name in test_files}
    where = f"{where} ({inst['instance_id']})"
    return Task(
        id=inst["instance_id"],
        type="swe-bench",
        statement=inst["problem_statement"].strip(),
        repo=repo,
        test_command=_command(inst.get("test_command", list(SWEBENCH_TEST_COMMAND)), where),
        fail_to_pass=_json_list(inst["FAIL_TO_PASS"]),
        pass_to_pass=_json_list(inst.get("PASS_TO_PASS")),
        hidden_files=hidden,
        hidden_targets=test_files,
        gold_patch=inst["patch"],
        clarification=(inst.get("hints_text") or "").strip() or None,
        timeout_s=_timeout(inst.get("timeout_s"), SWEBENCH_TIMEOUT_S, where),
        source=where,
        setup=_setup(inst.get("setup"), where),
        env=_env(inst.get("env"), where),
        judged_tests=_judged(inst.get("judged_tests"), "listed", where),
    )


def load_swebench_jsonl(path: Path | str, repos_dir: Path | str, cache_dir: Path | str | None = None) -> list[Task]:
    """Load SWE-bench-style instances whose repositories are under ``repos_dir``.

    A repository is a git checkout or a git bundle (``owner__name.bundle``, cloned once into the
    cache). Uses ``instance_id``, ``repo``, ``base_commit``, ``patch``, ``test_patch``,
    ``problem_statement``, ``FAIL_TO_PASS`` and ``PASS_TO_PASS`` (JSON-encoded lists or lists), and
    ``hints_text`` as the clarification when present. How the instance runs, as the field's
    harnesses give it per repository and version: ``setup`` (shell commands run in the sandbox before
    every test run, e.g. ``pip install --no-deps --no-build-isolation -e .``), ``env`` (e.g.
    ``{"PYTHONPATH": "src"}``), ``test_command`` (a pytest command; default ``python -m pytest -q .``)
    and ``timeout_s`` (setup and tests together; default 30). ``judged_tests`` defaults to
    ``listed``: FAIL_TO_PASS and PASS_TO_PASS decide, as in SWE-bench. Checkouts go to ``cache_dir``
    (default: ``<jsonl dir>/.checkouts``).
    """
    path, repos_dir = Path(path), Path(repos_dir)
    cache = Path(cache_dir) if cache_dir else path.parent / ".checkouts"
    tasks = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            tasks.append(_instance_task(json.loads(line), repos_dir, cache, where))
        except TaskFormatError as exc:  # a repository or field problem: say which line it came from
            message = str(exc)
            raise TaskFormatError(message if message.startswith(where) else f"{where}: {message}") from None
        except (KeyError, json.JSONDecodeError, ValueError) as exc:
            raise TaskFormatError(f"{where}: {type(exc).__name__}: {exc}") from None
    return tasks
