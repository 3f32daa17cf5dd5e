"""From what the worker observed to an :class:`ExecutionResult` status and reason.

Pure functions over plain data, so every rule is a known-answer test. The order of the rules is
the order of :func:`decide`: limits the worker enforced first, then what the runner proved.

Every message on the result channel counts only with the execution's nonce, and a ``setup-error``
only before the runner's ``start`` marker (before it, no code under test has run in the child; a
"sandbox fault" written later is the program's). In a graded pytest run the canary tests decide
whether the report can be believed (:mod:`codemoe.sandbox.canary`).
"""

from __future__ import annotations

import hmac
import json
import signal as signals
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = ["INTEGRITY_KINDS", "SIGNED", "Observation", "decide", "opened"]

# The kind of a channel line that carries another message and its HMAC-SHA256 under the nonce
# (codemoe.sandbox.pytest_report.sign_line): the pytest runner's messages, which the code under test
# could read on their way (a pipe of its own put in the channel's place) but never learns the key from.
SIGNED = "signed"


def opened(messages: list[dict[str, Any]], nonce: str) -> list[dict[str, Any]]:
    """The channel's messages, each signed one replaced by what it carries (with the nonce) when its
    HMAC under ``nonce`` is right and dropped otherwise; an unsigned pytest report is dropped too (the
    reporter signs every one: one that came in the clear carried a nonce read from memory)."""
    out = []
    key = nonce.encode()
    for message in messages:
        kind = message.get("kind")
        if kind == SIGNED:
            body, mac = message.get("body"), message.get("mac")
            if not (isinstance(body, str) and isinstance(mac, str)):
                continue
            if not hmac.compare_digest(hmac.digest(key, body.encode(), "sha256").hex(), mac):
                continue
            try:
                inner = json.loads(body)
            except ValueError:
                continue
            if isinstance(inner, dict) and inner.get("kind") != SIGNED:
                out.append({**inner, "nonce": nonce})
        elif kind != "pytest":
            out.append(message)
    return out

_MEMORY_MARKERS = ("MemoryError", "std::bad_alloc", "Cannot allocate memory", "out of memory")
_FILE_SIZE_MARKERS = ("File too large", "Errno 27")
_PYTEST_EXIT = {2: "interrupted", 3: "pytest internal error", 4: "pytest usage error", 5: "no tests collected"}
# What ExecutionResult.integrity may say: the run's own account of its tests cannot be believed. Each
# runner's verdict names it with the reason it gives (a reason quotes test ids and the program's own
# messages, which can hold any word, so nothing downstream may search a reason for one).
INTEGRITY_KINDS = ("early-exit", "no-report", "forged-report", "forged-comparison", "forged-environment")


@dataclass
class Observation:
    """What the worker saw of one execution."""

    runner: str | None
    nonce: str
    exit_code: int | None  # None when a signal ended the process
    signal: int | None
    wall_timeout: bool  # the worker killed it at the deadline
    output_limit: bool  # the worker killed it for too much output
    cpu_s: float  # CPU time the execution used
    cpu_limit_s: float
    max_file_mb: float
    stderr_tail: str  # last bytes of stderr, decoded
    messages: list[dict[str, Any]] = field(default_factory=list)  # from the result channel
    oom_kill: bool = False  # the execution's cgroup counted an OOM kill (a trusted observation)
    canaries: dict[str, str] = field(default_factory=dict)  # graded pytest: canary node id -> expected outcome
    canaries_required: bool = True  # False when the run's options may honestly stop or deselect them
    canary_replaced: str = ""  # graded pytest: the module.name the canary module replaced, which the report must name

    def __post_init__(self) -> None:
        self.messages = _authentic(self.messages, self.nonce)


def _authentic(messages: list[dict[str, Any]], nonce: str) -> list[dict[str, Any]]:
    """The messages with this execution's nonce; setup errors only from before the runner started."""
    kept, started = [], False
    for message in messages:
        if message.get("nonce") != nonce:
            continue
        kind = message.get("kind")
        if kind == "start":
            started = True
        elif kind != "setup-error" or not started:
            kept.append(message)
    return kept


def decide(obs: Observation) -> tuple[str, str, dict[str, str], str]:
    """Return (status, reason, tests, integrity) for ``obs``; ``integrity`` is one of
    ``INTEGRITY_KINDS`` when the run's own account of its tests cannot be believed, else ""."""
    status, reason, tests, integrity = _decide(obs)
    if obs.runner == "asserts" and status != "passed":  # its one test is the whole run
        tests = dict.fromkeys(tests, "failed")
    return status, reason, tests, integrity


def _decide(obs: Observation) -> tuple[str, str, dict[str, str], str]:
    tests = _tests(obs)
    if obs.wall_timeout:
        return "timeout", "wall-clock limit reached; the process tree was killed", tests, ""
    if _cpu_limited(obs):
        return "timeout", f"CPU-time limit ({obs.cpu_limit_s:g} s) reached", tests, ""
    if obs.output_limit:
        return "output-limit", "output exceeded max_output_bytes; the process tree was killed", tests, ""
    setup = _first(obs, "setup-error")
    if setup is not None:
        return "error", f"sandbox: {setup.get('message', '')}", tests, ""
    if _memory(obs):
        return "memory", "memory limit reached", tests, ""
    if obs.signal is not None:
        return "killed", f"killed by {_signal_name(obs.signal)}", tests, ""
    status, reason, integrity = _RUNNER_VERDICTS[obs.runner](obs, tests)
    if integrity.startswith("forged-"):  # no outcome of a forged run counts, whichever part was forged
        tests = {k: "failed" for k in tests}
    if status != "passed" and not integrity and any(m in obs.stderr_tail for m in _FILE_SIZE_MARKERS):
        reason = f"file-size limit ({obs.max_file_mb:g} MiB) exceeded; {reason}"
    return status, reason, tests, integrity


def _tests(obs: Observation) -> dict[str, str]:
    report = _report(obs)
    if report is not None:
        tests = report.get("tests", {})
        tests = {str(k): str(v) for k, v in tests.items()} if isinstance(tests, dict) else {}
        if not obs.canaries:
            return tests
        own = {k: v for k, v in tests.items() if k not in obs.canaries}
        return {k: "failed" for k in own} if _forgery(obs, report, tests) else own
    if obs.runner == "asserts":
        done = _first(obs, "done")
        passed = done is not None and done.get("nonce") == obs.nonce and obs.exit_code == 0
        return {"checks.py": "passed" if passed else "failed"}
    return {}


def _forgery(obs: Observation, report: dict[str, Any], tests: dict[str, str]) -> str:
    """Why the canaries say the report was forged ("" when they do not). They may be missing
    honestly when collection failed or the session was stopped, or the run's options deselect them.
    """
    ran_through = report.get("exitstatus") in (0, 1) and not report.get("collect_errors")
    for nodeid, expected in obs.canaries.items():
        got = tests.get(nodeid)
        if got is None and obs.canaries_required and ran_through:
            return f"canary test {nodeid} is missing from the report"
        if expected == "failed" and got == "passed":
            return f"canary test {nodeid}, which must fail, was reported passed"
    return ""


def _reports(obs: Observation) -> list[dict[str, Any]]:
    """The pytest reports that carry this execution's nonce (one, unless the run is forged)."""
    return [m for m in obs.messages if m.get("kind") == "pytest" and m.get("nonce") == obs.nonce]


def _report(obs: Observation) -> dict[str, Any] | None:
    """The first pytest report that carries this execution's nonce."""
    return next(iter(_reports(obs)), None)


def _first(obs: Observation, kind: str) -> dict[str, Any] | None:
    return next((m for m in obs.messages if m.get("kind") == kind), None)


def _cpu_limited(obs: Observation) -> bool:
    """RLIMIT_CPU ends PID 1 of a namespace with SIGKILL at the limit (SIGXCPU elsewhere). The
    reported CPU time can read a little under the limit on a loaded machine, hence the margin.
    """
    if obs.signal == signals.SIGXCPU:
        return True
    return obs.signal == signals.SIGKILL and obs.cpu_s >= 0.5 * obs.cpu_limit_s


def _memory(obs: Observation) -> bool:
    if obs.oom_kill:
        return True
    if _first(obs, "memory") is not None:
        return True
    report = _report(obs)
    if report is not None and report.get("memory"):
        return True
    if obs.exit_code not in (None, 0):
        lines = [line for line in obs.stderr_tail.splitlines() if line.strip()]
        return bool(lines) and any(m in lines[-1] for m in _MEMORY_MARKERS)
    return False


def _signal_name(signum: int) -> str:
    try:
        return signals.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _command_verdict(obs: Observation, tests: dict[str, str]) -> tuple[str, str, str]:
    if obs.exit_code == 0:
        return "passed", "", ""
    return "failed", f"exit code {obs.exit_code}", ""


def _asserts_verdict(obs: Observation, tests: dict[str, str]) -> tuple[str, str, str]:
    if tests.get("checks.py") == "passed":
        return "passed", "", ""
    compile_error = _first(obs, "compile-error")
    if compile_error is not None:
        return "error", f"compile: {compile_error.get('file')}: {compile_error.get('message')}", ""
    exception = _first(obs, "exception")
    if exception is not None:
        return "failed", f"{exception.get('file')}: {exception.get('message')}", ""
    early = _first(obs, "exit")
    if early is not None:
        return "failed", f"exited early ({early.get('file')} raised SystemExit({early.get('code')}))", "early-exit"
    return "failed", f"exited (code {obs.exit_code}) before the checks completed: no completion nonce", "early-exit"


def _pytest_verdict(obs: Observation, tests: dict[str, str]) -> tuple[str, str, str]:
    reports = _reports(obs)
    report = next(iter(reports), None)
    if len(reports) > 1:  # forked from the session, each process with its own guess: the first to report won
        return "failed", (f"forged test report: {len(reports)} reports, one per execution (a process forked from the "
                          "session sent another)"), "forged-report"
    if report is None:
        early = _first(obs, "exit")
        how = f"SystemExit({early.get('code')})" if early else f"exit code {obs.exit_code}"
        return "failed", f"no valid test report ({how}): the session did not finish", "no-report"
    exitstatus = int(report.get("exitstatus", -1))
    reported = report.get("tests", {})
    reported = {str(k): str(v) for k, v in reported.items()} if isinstance(reported, dict) else {}
    forged = _forgery(obs, report, reported) if obs.canaries else ""
    if forged:
        return "failed", f"forged test report: {forged}", "forged-report"
    liars = report.get("forged_comparisons")
    liars = [str(n) for n in liars if str(n) not in obs.canaries] if isinstance(liars, list) else []
    if liars:
        more = f" (and {len(liars) - 1} more)" if len(liars) > 1 else ""
        return "failed", (f"forged comparison in {liars[0]}{more}: an object under test answered a test's "
                          "comparison with what it is not"), "forged-comparison"
    tampered = report.get("tampered")
    tampered = [str(n) for n in tampered] if isinstance(tampered, list) else []
    if obs.canary_replaced:
        named = [n for n in tampered if n.split(" ", 1)[0] == obs.canary_replaced]
        tampered = [n for n in tampered if n not in named]
        if not named and any(nodeid in reported for nodeid in obs.canaries):  # its module was imported
            return "failed", (f"forged test report: the canary module's replacement of {obs.canary_replaced} "
                              "is not named: the environment check was taken out"), "forged-report"
    if tampered:
        more = f" (and {len(tampered) - 1} more)" if len(tampered) > 1 else ""
        return "failed", (f"forged test environment: {tampered[0]}{more}: code under test replaced what the "
                          "tests call, or the tests themselves (codemoe.sandbox.pristine)"), "forged-environment"
    bad = sorted(k for k, v in tests.items() if v in ("failed", "error"))
    failing_canary = any(expected == "failed" and reported.get(nodeid) == "failed"
                         for nodeid, expected in obs.canaries.items())
    if failing_canary and exitstatus == 1 and obs.exit_code == 1 and not bad:
        exitstatus = 0  # the failing canary alone (a failure no test of the task's was recorded with stays one)
        obs = replace(obs, exit_code=0)
    if report.get("collect_errors"):
        return "error", f"collection: {report['collect_errors'][0]}", ""
    if exitstatus in _PYTEST_EXIT:
        return "error", _PYTEST_EXIT[exitstatus], ""
    if bad:
        return "failed", f"{len(bad)} of {len(tests)} tests failed or errored: {', '.join(bad[:5])}", ""
    unmarked = report.get("unmarked_skips") if obs.canaries else None  # graded runs only
    unmarked = [str(n) for n in unmarked if str(n) in tests] if isinstance(unmarked, list) else []
    if unmarked:
        return "failed", (f"{len(unmarked)} of {len(tests)} tests skipped while they ran (or their module as it was "
                          "imported), not by a mark of theirs (pytest.skip, pytest.xfail, importorskip or skipTest "
                          f"called): {', '.join(unmarked[:5])}; a graded run counts such a test as not passed"), ""
    if exitstatus != 0 or obs.exit_code != 0:
        return "failed", f"pytest exit status {exitstatus}, process exit code {obs.exit_code}", ""
    if not tests:
        return "error", "no tests ran", ""
    return "passed", "", ""


_RUNNER_VERDICTS = {None: _command_verdict, "asserts": _asserts_verdict, "pytest": _pytest_verdict}
