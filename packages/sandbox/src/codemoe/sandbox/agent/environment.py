"""The repository environment: ``reset(task)`` then ``step(action)`` until the episode ends.

``reset`` copies the task's repository into a fresh workspace and returns the first observation
(the statement and the file list). ``step`` takes one action (the strict text of
:mod:`codemoe.sandbox.agent.actions`, or a :class:`ToolCall`), runs the tool and returns the
observation. Malformed text, unknown tools and bad arguments give an error observation and count a
format error; a failing tool gives an error observation; nothing the agent sends raises.

An episode ends when the agent submits, when the step budget is spent, or through anti-spin: after
``max_failing_test_runs`` consecutive failing test runs the agent is told to summarise, its next
action (ideally ``submit`` with the summary) is the last. Every test run and shell command goes
through the sandbox executor. At the end the workspace is graded in one batch: the visible and
hidden tests on the original repository (made once per task and executor, shared by every
environment on it) and on the final workspace.

Environments of different episodes may run in different threads at once (an RL trainer runs its
episodes concurrently): each has its own workspace and episode, they share only the executor, which
takes calls from several threads, and the trajectory file, written one whole line at a time.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

from codemoe.sandbox.agent.actions import ActionFormatError, ToolCall, parse_tool_call, render_tool_call
from codemoe.sandbox.agent.episode import TOOL_DOCS, Episode, StepRecord, system_prompt
from codemoe.sandbox.agent.tasks import Task
from codemoe.sandbox.agent.tools import TEST_OUTPUTS, ToolOutput, ToolSet
from codemoe.sandbox.agent.workspace import ToolError, Workspace, matches_readonly
from codemoe.sandbox.api import ExecutionRequest, ExecutionResult, Executor, Limits
from codemoe.sandbox.canary import PYTEST_CONFIG_FILES
from codemoe.sandbox.rewards.types import ProbeRun
from codemoe.sandbox.runners import is_test_file

__all__ = ["RepoEnvironment", "RepoEnvironmentConfig", "StepResult", "build_repo_environment"]

_PYTEST_PREFIXES = (["python", "-m", "pytest"], ["pytest"])
ANTI_SPIN_NOTICE = (
    "\n\nThe tests failed {runs} runs in a row. Stop trying: summarise what you found and what is left with "
    'submit (args: {{"summary": ...}}). The episode ends after your next action.'
)
_TRAJECTORY_LOCK = threading.Lock()  # episodes ending at once in several threads append whole lines


@dataclass
class RepoEnvironmentConfig:
    """Options of the ``repo`` environment."""

    step_budget: int = 0  # actions per episode; 0 uses each task's own step_budget
    max_failing_test_runs: int = 3  # anti-spin: consecutive failing run_tests calls before the stop
    memory_mb: int = 1024  # memory limit of every test run and shell command
    shell_timeout_s: float = 10.0  # wall-clock limit of one shell command
    trajectory_path: str = ""  # append every finished episode to this JSONL file ("" = do not write)
    # how the system turn documents the tools: 'schemas' (each tool's JSON schema) or 'signatures'
    # (one line per tool, its arguments and their types: a quarter of the tokens)
    tool_docs: str = "schemas"
    # what run_tests shows of a failing run besides each test's outcome: 'full' (pytest's output) or
    # 'short' (each failure's source line, first error lines and location: a third of the tokens)
    test_output: str = "full"
    # when an episode ends, run its change against the visible tests' literal calls and inputs drawn
    # beside them, answered by the task's gold patch (codemoe.sandbox.rewards.probes): the probe run
    # the memorised_answers detector reads. One more graded run per episode; tasks without a gold
    # patch or with setup commands get none
    probes: bool = False

    def __post_init__(self) -> None:
        if self.tool_docs not in TOOL_DOCS:
            raise ValueError(f"repo environment: tool_docs must be one of {', '.join(TOOL_DOCS)}, got {self.tool_docs!r}")
        if self.test_output not in TEST_OUTPUTS:
            raise ValueError(f"repo environment: test_output must be one of {', '.join(TEST_OUTPUTS)}, "
                             f"got {self.test_output!r}")


@dataclass
class StepResult:
    """What ``step`` returns: the observation, whether the episode is over, and facts about the step."""

    observation: str
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


def pytest_args(command: list[str]) -> list[str]:
    """The arguments after ``pytest`` / ``python -m pytest`` in a task's test command."""
    for prefix in _PYTEST_PREFIXES:
        if command[: len(prefix)] == prefix:
            return command[len(prefix):]
    raise ValueError(f"test command {command} is not a pytest command ('pytest ...' or 'python -m pytest ...')")


class RepoEnvironment:
    """A multi-turn coding environment over repository-level :class:`Task` objects."""

    def __init__(self, config: RepoEnvironmentConfig | None = None, executor: Executor | None = None) -> None:
        self.config = config or RepoEnvironmentConfig()
        self._own_executor = executor is None
        self.executor = executor if executor is not None else _default_executor()
        self.tools = ToolSet()
        self.episode: Episode | None = None
        self.workspace: Workspace | None = None
        self.task: Task | None = None

    # -- the ToolContext the tools use ---------------------------------------------------------

    @property
    def test_output(self) -> str:
        return self.config.test_output

    @property
    def clarification(self) -> str | None:
        return self.task.clarification if self.task else None

    def _limits(self, timeout_s: float) -> Limits:
        return Limits(timeout_s=timeout_s, cpu_s=timeout_s, memory_mb=self.config.memory_mb)

    def run_tests(self, targets: list[str]) -> ExecutionResult:
        """Run the visible tests (or ``targets``) on the workspace through the executor."""
        assert self.task is not None and self.workspace is not None
        return self.executor.run(visible_tests_request(self.task, self.workspace.snapshot(), targets,
                                                       self._limits(self.task.timeout_s)))

    def run_command(self, argv: list[str]) -> ExecutionResult:
        """Run an allow-listed command on a copy of the workspace through the executor."""
        assert self.task is not None and self.workspace is not None
        request = ExecutionRequest(files=dict(self.workspace.snapshot()), command=argv, env=dict(self.task.env),
                                   limits=self._limits(self.config.shell_timeout_s), id=f"{self.task.id}/shell")
        return self.executor.run(request)

    # -- the episode ----------------------------------------------------------------------------

    def reset(self, task: Task) -> str:
        """Start an episode on ``task``; returns the agent's first prompt.

        The prompt is the system turn (how to act, every tool's schema) and the task's user turn, the
        two first messages of the episode's transcript, so a trainer and an evaluator that show the
        agent this text show it what the recorded trajectories hold.
        """
        self.close_workspace()
        self.task = task
        self.workspace = Workspace(task.repo, readonly=task.readonly, reserved=task.hidden_targets)
        budget = self.config.step_budget or task.step_budget
        files = "\n".join(self.workspace.relative(p) for p in self.workspace.iter_files())
        observation = (
            f"Task {task.id}\n\n{task.statement}\n\nRepository files:\n{files}\n\n"
            f"You have {budget} actions. Run the tests with run_tests; finish with submit."
        )
        instructions = system_prompt(self.tools, self.config.tool_docs)
        self.episode = Episode(
            task_id=task.id,
            task_type=task.type,
            step_budget=budget,
            files_before=self.workspace.snapshot(),
            messages=[{"role": "system", "content": instructions}, {"role": "user", "content": observation}],
            tools=self.tools.schemas(),
        )
        return f"{instructions}\n\n{observation}\n"

    def step(self, action: str | ToolCall) -> StepResult:
        """Apply one action; never raises for anything the agent sends."""
        ep = self.episode
        if ep is None or ep.done:
            raise RuntimeError("call reset(task) before step(), and not after the episode ended")
        ep.steps += 1
        was_summarising = ep.summarising
        text = render_tool_call(action) if isinstance(action, ToolCall) else str(action)
        record, output = self._dispatch(action)
        record.step = ep.steps
        if record.tool == "run_tests" and record.ok:
            failing = output.data.get("status") != "passed"
            ep.consecutive_failing_runs = ep.consecutive_failing_runs + 1 if failing else 0
        ep.log.append(record)
        observation = output.text if record.ok else f"error ({record.error_kind}): {record.message}"

        stop = self._stop_reason(output, was_summarising)
        if stop is None and ep.consecutive_failing_runs >= self.config.max_failing_test_runs:
            ep.summarising = True
            observation += ANTI_SPIN_NOTICE.format(runs=ep.consecutive_failing_runs)
        ep.messages += [{"role": "assistant", "content": text}, {"role": "tool", "content": observation}]
        if stop is not None:
            self._finish(stop)
        info = {"step": ep.steps, "tool": record.tool, "ok": record.ok, "error_kind": record.error_kind,
                "summarise": ep.summarising, "stop_reason": ep.stop_reason}
        return StepResult(observation, ep.done, info)

    def _stop_reason(self, output: ToolOutput, was_summarising: bool) -> str | None:
        """Why the episode ends after this action, or None: submit, the summary turn, the budget."""
        ep = self.episode
        assert ep is not None
        if output.done:
            ep.summary = output.data.get("summary", "")
            return "anti_spin" if was_summarising else "submitted"
        if was_summarising:
            return "anti_spin"
        if ep.steps >= ep.step_budget:
            return "step_budget"
        return None

    def _dispatch(self, action: str | ToolCall) -> tuple[StepRecord, ToolOutput]:
        try:
            call = action if isinstance(action, ToolCall) else parse_tool_call(action)
        except ActionFormatError as exc:
            return StepRecord(tool="", args={}, ok=False, error_kind=exc.kind, format_error=True, message=str(exc)), ToolOutput("")
        record = StepRecord(tool=call.tool, args=dict(call.args))
        try:
            output = self.tools.call(self, call)
        except ActionFormatError as exc:
            record.ok, record.error_kind, record.format_error, record.message = False, exc.kind, True, str(exc)
            return record, ToolOutput("")
        except ToolError as exc:
            record.ok, record.error_kind, record.message = False, exc.kind, str(exc)
            return record, ToolOutput("")
        record.data = {k: v for k, v in output.data.items() if k != "tests"}
        return record, output

    def _finish(self, reason: str) -> None:
        ep, task, ws = self.episode, self.task, self.workspace
        assert ep is not None and task is not None and ws is not None
        ep.done, ep.stop_reason = True, reason
        ep.files_after = ws.snapshot()
        before, after = self.grade(task, ep.files_after)
        ep.record_grades(task, before, after)
        if self.config.probes:
            ep.probes = self.probe(task, ep.files_after)
        if self.config.trajectory_path:
            from codemoe.sandbox.agent.trajectory import TrajectoryWriter

            with _TRAJECTORY_LOCK, TrajectoryWriter(self.config.trajectory_path) as writer:
                writer.write(ep)

    def grade(self, task: Task, files: dict[str, str]) -> tuple[ExecutionResult, ExecutionResult]:
        """Visible + hidden test outcomes on the original repository and on ``files``.

        The original repository's run is a function of the task alone, so it is made once per
        task and executor and shared by every environment on that executor (an RL step's episodes
        each have their own environment, and a group's episodes share one task): the same request,
        byte for byte (files, command, limits), gets the one result. Episodes grading the same task
        at once wait for the first one's run instead of repeating it.
        """
        limits = self._limits(task.timeout_s)
        after = grading_request(task, files, limits, "after")
        before = grading_request(task, task.repo_files(), limits, "before")
        baselines = _baselines(self.executor)
        key = _request_key(before)
        baseline = baselines.claim(key)
        if baseline is not None:
            return baseline, self.executor.run_batch([after])[0]
        try:
            first, result = self.executor.run_batch([before, after])
        except BaseException:
            baselines.abandon(key)
            raise
        baselines.publish(key, first)
        return first, result

    def probe(self, task: Task, files: dict[str, str]) -> ProbeRun | None:
        """The probe run of ``files`` against ``task``'s gold patch (None where the task has none, or
        setup commands, or visible tests without a literal call of its functions). The plan (the gold
        patch's answers) is made once per task and executor."""
        from codemoe.sandbox.rewards.probes import Prober, probe_run

        if not task.gold_patch or task.setup:
            return None
        prober = Prober(timeout_s=task.timeout_s)
        # the task's repository is never modified: its folder stands for its files, read on a miss only
        key = json.dumps([task.id, str(task.repo), task.gold_patch, task.env, task.timeout_s], sort_keys=True)
        plans = _probe_plans(self.executor)
        plan = plans.get(key)
        if plan is None:
            (plan,) = prober.plans([(task.repo_files(), task.gold_files())], self.executor, env=task.execution_env())
            plans[key] = plan
        if not plan:
            return None
        request = prober.request(plan, files, env=task.execution_env(), id=f"{task.id}/probes")
        return probe_run(plan, self.executor.run_batch([request])[0])

    def close_workspace(self) -> None:
        """Delete the current episode's working copy."""
        if self.workspace is not None:
            self.workspace.close()
            self.workspace = None

    def close(self) -> None:
        """Delete the workspace and stop the executor if this environment created it."""
        self.close_workspace()
        if self._own_executor:
            self.executor.close()

    def __enter__(self) -> RepoEnvironment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _SharedRuns:
    """Results of identical requests, made once: :meth:`claim` gives a finished result, waits for
    one in flight, or (None) tells the caller to make it and :meth:`publish` it (or :meth:`abandon`
    the claim when it failed, so a later caller tries again). Least recently made ones beyond
    ``limit`` are forgotten."""

    def __init__(self, limit: int = 4096) -> None:
        self._lock = threading.Lock()
        self._done: collections.OrderedDict[str, ExecutionResult] = collections.OrderedDict()
        self._running: dict[str, threading.Event] = {}
        self.limit = limit

    def claim(self, key: str) -> ExecutionResult | None:
        while True:
            with self._lock:
                if key in self._done:
                    self._done.move_to_end(key)
                    return self._done[key]
                running = self._running.get(key)
                if running is None:
                    self._running[key] = threading.Event()
                    return None
            running.wait()  # another episode makes it; then it is done, or abandoned and ours to make

    def publish(self, key: str, result: ExecutionResult) -> None:
        with self._lock:
            self._done[key] = result
            while len(self._done) > self.limit:
                self._done.popitem(last=False)
            self._running.pop(key).set()

    def abandon(self, key: str) -> None:
        with self._lock:
            self._running.pop(key).set()


_SHARED: weakref.WeakKeyDictionary[Any, _SharedRuns] = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


def _baselines(executor: Any) -> _SharedRuns:
    """The original repositories' grading runs made on ``executor``, shared by its environments."""
    with _SHARED_LOCK:
        runs = _SHARED.get(executor)
        if runs is None:
            runs = _SHARED[executor] = _SharedRuns()
        return runs


_PLANS: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def _probe_plans(executor: Any) -> dict[str, Any]:
    """The tasks' probe plans made on ``executor`` (task key -> plan), shared by its environments
    (two episodes of one task ending at once may both make it: the same plan)."""
    with _SHARED_LOCK:
        plans = _PLANS.get(executor)
        if plans is None:
            plans = _PLANS[executor] = {}
        return plans


def _request_key(request: ExecutionRequest) -> str:
    """A digest of everything that decides what a request runs (not its label or nonce)."""
    data = request.to_dict()
    data.pop("id", None)
    data.pop("nonce", None)
    return hashlib.blake2b(json.dumps(data, sort_keys=True).encode(), digest_size=20).hexdigest()


def visible_tests_request(task: Task, files: dict[str, str], targets: list[str], limits: Limits) -> ExecutionRequest:
    """The agent's ``run_tests``: the task's visible tests (or ``targets``) on ``files`` as they are,
    with the task's setup, not graded."""
    args = pytest_args(task.test_command)
    if targets:
        # a target is a path: one that starts with "-" (a file named -pNAME) must not become an option
        args = [a for a in args if a.startswith("-")] + [f"./{t}" if t.startswith("-") else t for t in targets]
    return ExecutionRequest(files={**files, **task.setup_files()}, command=[*task.setup_args(), *args],
                            runner="pytest", env=task.execution_env(), limits=limits, id=f"{task.id}/run_tests")


def grading_request(task: Task, files: dict[str, str], limits: Limits, label: str) -> ExecutionRequest:
    """One graded execution of the visible and the hidden tests on ``files`` plus the hidden overlay.

    The hidden tests, the task's own ``conftest.py`` files and the files its ``readonly`` patterns
    keep from the agent (as the task ships them) are laid over the agent's files and are trusted; so
    is a pytest config file the agent left unchanged. A
    conftest the agent added is not loaded, a config file it changed keeps its options but not its
    ``addopts``, and canaries check the report (:func:`codemoe.sandbox.runners.child_setup`). The
    task's setup commands and ``env`` come with it and run in the sandbox before the tests.
    """
    original = task.repo_files()
    conftests = {path: text for path, text in original.items() if path.rsplit("/", 1)[-1] == "conftest.py"}
    # the task's files the agent may not write (its visible tests, where the task says so) as the task
    # ships them, trusted: sealed and checked, so code under test that rewrites a visible test module
    # before pytest collects it (or its data) is refused, not scored
    fixed = {path: text for path, text in original.items() if matches_readonly(path, task.readonly) and not task.is_hidden(path)}
    overlay = {path: text for path, text in files.items() if not task.is_hidden(path)}
    overlay.update(fixed)
    overlay.update(conftests)
    overlay.update(task.hidden_files)
    overlay.update(task.setup_files())
    unchanged_configs = {path for path, text in overlay.items()
                         if path.rsplit("/", 1)[-1] in PYTEST_CONFIG_FILES and original.get(path) == text}
    command = [*task.setup_args(), *pytest_args(task.grading_command())]
    # the hidden test modules are laid out empty (pytest imports them from the request): code under test
    # that reads the work dir, itself or through a program it starts, finds no hidden test to copy answers from
    private = sorted(p for p in task.hidden_files if is_test_file(p.rsplit("/", 1)[-1]) and p.endswith(".py"))
    return ExecutionRequest(files=dict(overlay), command=command, runner="pytest", env=task.execution_env(),
                            limits=limits, id=f"{task.id}/{label}", graded=True,
                            trusted=sorted({*conftests, *fixed, *task.hidden_files, *unchanged_configs}), private=private)


def _default_executor() -> Executor:
    from codemoe.sandbox.local import LocalExecutor

    return LocalExecutor()


def build_repo_environment(config: RepoEnvironmentConfig, executor: Executor | None = None) -> RepoEnvironment:
    """Factory of the ``repo`` environment component (kind ``environment``)."""
    return RepoEnvironment(dataclasses.replace(config), executor=executor)
