"""The scorer in a child process of its own (the ``rl`` stage's ``scorer_process``).

Why: with asynchronous rollouts (``max_staleness``) a producer thread scores the next batch while
the trainer's thread updates on this one. Scoring is Python: the sandbox client's requests and
replies (a thread per worker), and the reward recipe's hack detectors, which parse every distinct
program. In the trainer's interpreter each of those bursts holds the GIL that the update's forwards
take back at every torch call of a small model, and the update slows by much more than the bursts'
share of the time (``docs/performance.md``: the producer's thread active 6.5% of a quickstart step,
the update's forwards 27% longer). In a child process the same Python runs beside the update instead
of between it; the producer's side of a batch is a pipe write and a wait that holds no lock.

How:

- The child is started with ``spawn`` (:class:`codemoe.core.processes.SpawnProcess`: a clean
  interpreter that imports neither the parent's ``__main__`` nor torch). It builds its own verifier
  from the executor component's factory and validated config (so a ``local`` executor's warm
  workers are the child's, started there), and gets the reward recipe by pickle.
- A batch crosses as plain values (:func:`codemoe.rl.scoring.scoring_items`: task id, prompt,
  visible tests, completion texts; nothing hidden, no token ids) and comes back as one
  ``(reward, passed, components)`` per sample, wrapped here as the trainer's ``Score``; the answers
  are those of :class:`~codemoe.rl.scoring.VerifierScorer` in-process, to the bit.
- An error in the child's scoring is raised here as itself when it survives a pickle round trip
  (else a ``RuntimeError`` with its type and message); a child that dies fails the call in flight
  and every later one, naming its exit code. A child that neither answers nor dies (stopped, or
  stuck) is killed once a batch's deadline passes: what its every program running out its
  timeout one after another, twice over, would take, plus ``answer_slack_s``.
- The child exits when this process closes the pipe (:meth:`ProcessScorer.close`, or this process
  ends); its verifier's worker processes are closed with it.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import threading
import weakref
from collections.abc import Sequence
from typing import Any

from codemoe.core.errors import ConfigError
from codemoe.core.processes import SpawnProcess, close_child, portable_exception
from codemoe.core.registry import build_portable
from codemoe.rl.scoring import ScoringItem, VerifierScorer, Weighing

__all__ = ["ProcessScorer", "ScorerProcessError", "portable_parts"]

_READY_TIMEOUT_S = 300.0  # the child imports the sandbox's client and starts the verifier's workers
_CLOSE_WAIT_S = 30.0  # the child stops its verifier's workers on the way out


class ScorerProcessError(RuntimeError):
    """The scorer's child process could not start, or died."""


def portable_parts(executor_factory: Any, executor_config: Any, recipe: Any, where: str) -> bytes:
    """The pickle that lets a child process build the verifier and hold the recipe, or a
    ``ConfigError`` naming ``where`` and what cannot cross (a lambda factory, a recipe holding an
    open file or a thread lock, ...)."""
    try:
        return pickle.dumps((executor_factory, executor_config, recipe), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise ConfigError(
            f"'{where}': the scorer cannot run in a child process: its executor factory, executor config or reward "
            f"recipe does not pickle ({type(exc).__name__}: {exc}); set scorer_process: false"
        ) from exc


class ProcessScorer(Weighing):
    """``scorer(tasks, outputs) -> scores`` as :class:`~codemoe.rl.scoring.VerifierScorer` gives them,
    computed in a child process (see the module docstring). ``parts`` is :func:`portable_parts`'
    pickle; the other options are the in-process scorer's. One call at a time is served (the
    trainer's producer makes one batch at a time); concurrent callers wait their turn."""

    def __init__(
        self,
        parts: bytes,
        *,
        timeout_s: float = 5.0,
        memory_mb: int = 1024,
        once_per_program: bool = True,
        ready_timeout_s: float = _READY_TIMEOUT_S,
        answer_slack_s: float = 60.0,
    ) -> None:
        self.checked = self.samples = 0  # programs sent to the verifier and samples scored, over the run
        self._timeout_s, self._answer_slack_s = timeout_s, answer_slack_s
        self._lock = threading.Lock()
        self._dead: str | None = None
        options = {"timeout_s": timeout_s, "memory_mb": memory_mb, "once_per_program": once_per_program}
        self._conn, child_conn = multiprocessing.Pipe()
        self._proc = SpawnProcess(target=_serve, args=(child_conn, parts, options), name="codemoe-scorer", daemon=True)
        self._proc.start()
        child_conn.close()
        try:
            kind, value = self._receive(ready_timeout_s)
        except ScorerProcessError:
            close_child(self._conn, self._proc, _CLOSE_WAIT_S)
            raise
        if kind != "ready":
            close_child(self._conn, self._proc, _CLOSE_WAIT_S)
            raise ScorerProcessError(f"the scorer's child process did not start: {value}")
        self.pid: int = value
        self._finalizer = weakref.finalize(self, close_child, self._conn, self._proc, _CLOSE_WAIT_S)

    def weigh(self, items: Sequence[ScoringItem]) -> list[tuple[float, bool, dict[str, float]]]:
        """:meth:`VerifierScorer.weigh`, in the child."""
        with self._lock:
            if self._dead is not None:
                raise ScorerProcessError(self._dead)
            try:
                self._conn.send_bytes(pickle.dumps(list(items), protocol=pickle.HIGHEST_PROTOCOL))
            except (OSError, ValueError) as exc:
                raise self._died(f"cannot be reached ({exc})") from exc
            deadline = self._answer_slack_s + 2 * self._timeout_s * len(items)
            kind, value = self._receive(deadline, kill=True)
        if kind == "error":
            raise value
        scores, checked, samples = value
        self.checked, self.samples = self.checked + checked, self.samples + samples
        return scores

    def close(self) -> None:
        """End the child and its verifier's workers; the scorer cannot be used afterwards."""
        self._dead = self._dead or "the scorer was closed"
        self._finalizer()

    def _receive(self, timeout: float, *, kill: bool = False) -> tuple[str, Any]:
        if not self._conn.poll(timeout):
            if kill:  # a batch's answer overdue: the child is stuck, and no later call could trust it
                self._proc.kill()
                raise self._died(f"did not answer within {timeout:.0f} s and was killed")
            raise ScorerProcessError(f"the scorer's child process did not answer within {timeout:.0f} s")
        try:
            return pickle.loads(self._conn.recv_bytes())
        except (EOFError, OSError) as exc:
            raise self._died("exited") from exc

    def _died(self, how: str) -> ScorerProcessError:
        self._proc.join(5)
        self._dead = f"the scorer's child process {how} (exit code {self._proc.exitcode})"
        return ScorerProcessError(self._dead)


# ----------------------------------------------------------------------------------------------
# the child
# ----------------------------------------------------------------------------------------------


def _serve(conn: Any, parts: bytes, options: dict[str, Any]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent ends this process

    def send(kind: str, value: Any) -> None:
        conn.send_bytes(pickle.dumps((kind, value), protocol=pickle.HIGHEST_PROTOCOL))

    verifier = None
    try:
        factory, config, recipe = pickle.loads(parts)
        verifier = build_portable(factory, config)
        scorer = VerifierScorer(verifier, recipe, **options)
    except BaseException as exc:
        send("error", f"{type(exc).__name__}: {exc}")
        _close_verifier(verifier)
        return
    send("ready", os.getpid())
    try:
        while True:
            try:
                items = pickle.loads(conn.recv_bytes())
            except (EOFError, OSError):
                return
            before = (scorer.checked, scorer.samples)
            try:
                scores = scorer.weigh(items)
            except BaseException as exc:
                send("error", portable_exception(exc, RuntimeError))
                continue
            send("ok", (scores, scorer.checked - before[0], scorer.samples - before[1]))
    finally:
        _close_verifier(verifier)


def _close_verifier(verifier: Any) -> None:
    close = getattr(verifier, "close", None)
    if close is not None:
        close()
