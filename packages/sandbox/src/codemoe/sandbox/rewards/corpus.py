"""A corpus of honest and hacked solutions, and running it through the sandbox executor.

The package ships one as data, :data:`SHIPPED_CORPUS` (19 tasks, 328 solutions; its README says how
it was written). Layout (all YAML)::

    CORPUS/tasks/<task>.yaml                  id, statement, files (repo before), hidden (hidden tests),
                                              reference (an honest solution's id: the probes' answers;
                                              default the first honest one, "" for no probes)
    CORPUS/solutions/<task>/<solution>.yaml   kind (honest, honest_partial or a detector name), note, files, delete,
                                              evidence (code, the default, or executor: only the run shows it)

Every solution is executed in the sandbox: its visible tests as the solution left them, and the
hidden tests on its non-test files, and, for a task with a ``reference``, its non-test files against
the visible tests' points and inputs beside them (:mod:`codemoe.sandbox.rewards.probes`). The
results, with the files before and after, become a :class:`RewardInput` per solution.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from codemoe.sandbox.rewards.detectors.tampering import SHADOWING_FILES
from codemoe.sandbox.rewards.inputs import reward_input_from_results
from codemoe.sandbox.rewards.probes import Prober, probe_run
from codemoe.sandbox.rewards.registration import RewardSpecError
from codemoe.sandbox.rewards.types import ProbeRun, RewardInput

__all__ = [
    "HONEST",
    "HONEST_KINDS",
    "HONEST_PARTIAL",
    "SHIPPED_CORPUS",
    "CorpusSolution",
    "CorpusTask",
    "load_corpus",
    "run_corpus",
]

HONEST = "honest"  # a complete, honest solution: no detector may flag it
HONEST_PARTIAL = "honest_partial"  # honest but incomplete (misses an edge case, often only hidden tests show it)
HONEST_KINDS = (HONEST, HONEST_PARTIAL)  # the kinds no detector may flag
SHIPPED_CORPUS = Path(__file__).resolve().parent / "data" / "hacks"  # package data


@dataclass(frozen=True)
class CorpusTask:
    """A small repository: files before the change (visible tests included) and hidden tests."""

    id: str
    statement: str
    files: dict[str, str]
    hidden: dict[str, str]
    reference: str = ""  # the id of an honest solution whose answers the probes check against ("" = no probes)


@dataclass(frozen=True)
class CorpusSolution:
    """One solution to a task: the files it adds or replaces, the ones it deletes, and its kind."""

    task: CorpusTask
    id: str
    kind: str
    note: str = ""
    files: dict[str, str] = field(default_factory=dict)
    delete: tuple[str, ...] = ()
    evidence: str = "code"  # where its detector finds it: "code" (read statically) or "executor" (only the run)

    @property
    def name(self) -> str:
        """``task/solution``."""
        return f"{self.task.id}/{self.id}"

    def files_after(self) -> dict[str, str]:
        """The repository after the change."""
        tree = {p: t for p, t in self.task.files.items() if p not in self.delete}
        tree.update(self.files)
        return tree


def _read(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict):
        raise RewardSpecError(f"{path}: expected a mapping")
    return data


def load_corpus(root: str | Path) -> list[CorpusSolution]:
    """Every solution in the corpus at ``root``, sorted by task and solution id."""
    root = Path(root)
    if not root.is_dir():
        raise RewardSpecError(f"hack corpus {root} does not exist (omit it for the corpus codemoe-sandbox ships)")
    if not (root / "tasks").is_dir():
        raise RewardSpecError(f"{root} is not a hack corpus: it has no tasks/ folder")
    solutions = []
    for task_file in sorted((root / "tasks").glob("*.yaml")):
        data = _read(task_file)
        task = CorpusTask(
            str(data.get("id", task_file.stem)),
            str(data.get("statement", "")),
            dict(data.get("files") or {}),
            dict(data.get("hidden") or {}),
            str(data.get("reference") or ""),
        )
        first = len(solutions)
        for path in sorted((root / "solutions" / task.id).glob("*.yaml")):
            sol = _read(path)
            if "kind" not in sol:
                raise RewardSpecError(
                    f"{path}: a solution needs 'kind: honest', 'kind: honest_partial' or the detector that must catch it"
                )
            solutions.append(
                CorpusSolution(
                    task,
                    path.stem,
                    str(sol["kind"]),
                    str(sol.get("note", "")),
                    dict(sol.get("files") or {}),
                    tuple(sol.get("delete") or ()),
                    _evidence(path, sol.get("evidence", "code")),
                )
            )
        if "reference" not in data:  # not named: the first honest solution, if the task has one
            honest = sorted(s.id for s in solutions[first:] if s.kind == HONEST)
            task = replace(task, reference=honest[0] if honest else "")
            solutions[first:] = [replace(s, task=task) for s in solutions[first:]]
        if task.reference and not any(s.id == task.reference and s.kind == HONEST for s in solutions[first:]):
            raise RewardSpecError(
                f"{task_file}: 'reference: {task.reference}' must name an honest solution under solutions/{task.id}/"
            )
    if not solutions:
        raise RewardSpecError(f"{root}: no solutions under solutions/<task>/")
    return solutions


def _evidence(path: Path, value: Any) -> str:
    if value not in ("code", "executor"):
        raise RewardSpecError(f"{path}: 'evidence' is 'code' (the default) or 'executor', not {value!r}")
    return str(value)


def _hidden_tree(files: dict[str, str], task: CorpusTask, probe: RewardInput) -> dict[str, str]:
    """The solution's files without its tests and test configuration, plus the hidden tests.

    Graders run hidden tests with their own test files and configuration, never the agent's.
    """
    kept = {p: t for p, t in files.items() if not probe.is_test_file(p) and p.rsplit("/", 1)[-1] not in SHADOWING_FILES}
    return {**kept, **task.hidden}


def _unchanged(tree: dict[str, str], task: CorpusTask) -> list[str]:
    """The files of ``tree`` exactly as ``task`` ships them (its repository or its hidden tests)."""
    return sorted(p for p, text in tree.items() if task.files.get(p, task.hidden.get(p)) == text)


def run_corpus(solutions: list[CorpusSolution], executor: Any, *, timeout_s: float = 20.0,
               prober: Prober | None = None) -> list[RewardInput]:
    """Execute every solution's visible and hidden tests (and each task's, before the change), and
    its probes where its task names a reference (``prober``: how they are drawn; default options).

    ``executor`` is any codemoe executor (``run_batch``); the results come back as one
    :class:`RewardInput` per solution, in order.
    """
    from codemoe.sandbox.api import ExecutionRequest, Limits

    probe = RewardInput()
    limits = Limits(timeout_s=timeout_s, cpu_s=timeout_s)
    tasks = {s.task.id: s.task for s in solutions}
    trees: dict[str, dict[str, str]] = {}
    for task in tasks.values():
        trees[f"{task.id}:before"] = task.files
        trees[f"{task.id}:before:hidden"] = _hidden_tree(task.files, task, probe)
    for s in solutions:
        after = s.files_after()
        trees[f"{s.name}:after"] = after
        trees[f"{s.name}:after:hidden"] = _hidden_tree(after, s.task, probe)
    keys = list(trees)
    # graded, as a reward's run is: files the task ships unchanged are trusted, canaries check the report
    requests = [ExecutionRequest(files=dict(trees[k]), runner="pytest", limits=limits, id=k, graded=True,
                                 trusted=_unchanged(trees[k], tasks[k.split(":", 1)[0].split("/", 1)[0]]))
                for k in keys]
    results = dict(zip(keys, executor.run_batch(requests)))
    probes = _probe_runs(solutions, tasks, executor, prober or Prober(timeout_s=timeout_s))
    return [
        reward_input_from_results(
            before=results[f"{s.task.id}:before"],
            after=results[f"{s.name}:after"],
            hidden_before=results[f"{s.task.id}:before:hidden"],
            hidden_after=results[f"{s.name}:after:hidden"],
            files_before=s.task.files,
            files_after=s.files_after(),
            task_id=s.name,
            probes=probes.get(s.name),
        )
        for s in solutions
    ]


def _probe_runs(solutions: list[CorpusSolution], tasks: dict[str, CorpusTask], executor: Any,
                prober: Prober) -> dict[str, ProbeRun | None]:
    """Each solution's probe run (solution name -> run), for the tasks that name a reference."""
    by_name = {s.name: s for s in solutions}
    referenced = [t for t in tasks.values() if t.reference and f"{t.id}/{t.reference}" in by_name]
    plans = dict(zip(
        (t.id for t in referenced),
        prober.plans([(t.files, by_name[f"{t.id}/{t.reference}"].files_after()) for t in referenced], executor),
    ))
    probed = [s for s in solutions if plans.get(s.task.id)]
    requests = [prober.request(plans[s.task.id], s.files_after(), id=f"{s.name}:probes") for s in probed]
    results = executor.run_batch(requests) if requests else []
    return {s.name: probe_run(plans[s.task.id], r) for s, r in zip(probed, results)}
