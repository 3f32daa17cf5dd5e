"""Asynchronous rollouts: a producer thread generates and scores the next batches while the trainer
learns from the current one, with bounded staleness.

A policy *version* counts the optimizer-step rounds applied (the weights after step ``s`` are version
``s``). Every batch is tagged with the version of the weights that sampled all its groups, and the
trainer at step ``s`` (holding version ``s - 1``) sees it ``staleness = s - 1 - version`` versions old.

How the bound ``max_staleness: K`` is kept (``stale_groups``):

- ``wait`` (the default): admission control. The producer starts batch ``b`` only once the engine
  holds version ``b - 1 - K`` and the trainer moves the engine to version ``v`` only once batch
  ``v + K`` is complete, so batch ``b`` is always sampled by the weights of step ``max(0, b - 1 - K)``:
  nothing is ever older than K, nothing is thrown away, and a run does not depend on timing (the
  same seed gives the same run; ``K = 0`` is the synchronous trainer, step for step).
- ``drop`` / ``keep``: the producer runs free, ``K + 1`` batches ahead at most, always from the
  newest weights; a batch older than K when the trainer takes it is dropped (the producer makes
  another: over-sampling) or kept (trained on, the ``is_correction`` strategy re-weighting it).
  Under ``drop`` the producer does not start a batch that is sure to be dropped: one that, taken
  after the batches ahead of it that will be kept, would be older than K even if nothing else
  delayed it; it waits for the next weights instead (on one rank a batch is then never dropped,
  and no generation is thrown away). With refill collectives under torchrun it starts such a batch
  anyway, as every rank's producer must pass the same batches when the run stops.

The engine's weights change only between the producer's batches (a batch's refill rounds all see
one version): the trainer's weight sync takes the producer's request lock. With ``in_flight:
finish`` a batch in flight at a sync ends on the old weights and keeps its old version; with
``abort`` the trainer asks the producer to stop it and calls the engine's ``abort()`` if it
has one (the call in flight then returns at once; without it, the call runs to its end): the batch
is thrown away, the sync happens, and the batch is made again, same tasks and seeds, from the new
weights.

The engine must hold weights of its own (a snapshot of the policy, refreshed at every sync): the
trainer's optimizer steps then never meet a generation mid-forward, and generation overlaps the
whole update, backward included. An engine built on the trainer's policy module is refused.

Under ``torchrun`` every rank runs a producer beside its trainer, with the same guarantees. Its one
collective, the all-gather of zero-signal counts before a refill round, runs on a gloo process
group of its own (made by every rank at :meth:`RolloutProducer.start`), so it never interleaves
with the trainer thread's collectives (FSDP2's gathers and reductions, the weight sync's gathers,
the metrics), which keep the default group. Each rank's engine runs a whole copy of the policy
(taken before the trainer shards it: no collective in generation; an engine on a sharded model is
refused) and gets the whole state dict at each sync, gathered before the sync takes the request
lock (so no trainer holds its producer back while it waits for another rank). What the ranks must
agree on, they agree on where they already meet:

- **The batch sequence.** Every rank's producer makes the same batch numbers in the same order,
  and every rank draws the same tasks for them from the data stream (its slice of each), so their
  refill collectives pair. Under ``wait`` that follows from the schedule (batch ``v + K + 1`` is not
  admitted before the sync, and every rank's producer makes the same batches from the same
  versions); a free-running producer (``drop`` / ``keep``) is admitted by the batches its trainer
  took, which every rank counts alike.
- **A batch's version.** A free-running producer starts a batch from whatever its engine holds,
  which follows its own rank's timing; when the trainers take batch ``b`` they all-gather the
  versions it was made from (their own collective, one per batch taken) and tag it with the oldest.
  So every rank computes the same staleness and drops the same batches (a batch counts as old as
  its oldest part), the cursor its checkpoint records is the same everywhere, and the bound K holds
  for every part.
- **An abort** (``in_flight: abort``). Without refill rounds a producer has no collective, so a
  rank aborts and remakes its part of the batch alone. With them, a rank's abort flag travels in
  the next refill all-gather and every rank aborts there together (a flag raised after a batch's
  last all-gather lets that batch finish on the old weights). Likewise at the end of the run: a
  producer with refill collectives still passes every batch its trainer admitted, joining the
  batch's first all-gather with its abort flag set and generating nothing, so no rank is left
  waiting in one.

What stays refused under ``torchrun`` (a ``ConfigError`` naming the key): ``drop``, ``keep`` and
``abort`` with an engine that serves every rank (one server behind all clients, where rank 0's push
would land in the middle of the other ranks' batches), and an engine on a sharded model.
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass
from typing import Any

import torch
from codemoe.core.errors import ConfigError
from codemoe.rl.rollout import Rollouts
from codemoe.rl.weight_sync import runs_policy, takes_whole_state, whole_state

__all__ = [
    "IN_FLIGHT",
    "STALE_GROUPS",
    "Batch",
    "BatchAborted",
    "RolloutProducer",
    "check_async_config",
    "check_async_options",
    "staleness_metrics",
]

STALE_GROUPS = ("wait", "drop", "keep")
IN_FLIGHT = ("finish", "abort")


@dataclass
class Batch:
    """One step's worth of scored groups, as the producer made it."""

    index: int  # the producer's batch number (sampling seeds derive from it, as from a step)
    rollouts: Rollouts
    rounds: int  # dynamic-sampling refill rounds it took
    version: int  # the policy version whose weights sampled every group of it
    cursor: int  # the data stream's position after it: where a checkpoint taken after training on it resumes
    seconds: float  # the producer's wall time on it (generation and scoring)


class BatchAborted(Exception):
    """The batch in flight was aborted by a weight sync (``in_flight: abort``): raised in the
    producer's thread and caught by it, which makes the batch again; ``final``: by the end of the
    run on some rank, so no rank makes it again (no trainer needs it)."""

    def __init__(self, final: bool = False) -> None:
        super().__init__("final" if final else "")
        self.final = final


_PASSED = object()  # what _make returns for a batch every rank passes for good (the run is ending)


def check_async_options(config: Any) -> None:
    """Refuse asynchronous options that are wrong in themselves, naming the key (at validation)."""
    if config.stale_groups not in STALE_GROUPS:
        raise ConfigError(f"'stale_groups': {config.stale_groups!r} is not one of {', '.join(STALE_GROUPS)}")
    if config.in_flight not in IN_FLIGHT:
        raise ConfigError(f"'in_flight': {config.in_flight!r} is not one of {', '.join(IN_FLIGHT)}")
    k = config.max_staleness
    if k is None:
        return
    if k < 0:
        raise ConfigError(f"'max_staleness': must be >= 0 (or null for the synchronous loop), got {k}")
    if config.stale_groups != "wait" and k == 0:
        raise ConfigError(
            f"'stale_groups': {config.stale_groups} needs max_staleness >= 1 (a free-running producer is always "
            "one version behind); max_staleness: 0 is the synchronous schedule, use stale_groups: wait"
        )


def check_async_config(config: Any, *, world: int, engine: Any, policy: Any) -> None:
    """Refuse asynchronous settings that cannot work with this launch and engine, naming the key."""
    check_async_options(config)
    if config.max_staleness is None:
        return
    if runs_policy(engine, policy):
        raise ConfigError(
            "'max_staleness': the engine runs the trainer's policy module itself, so it would sample weights "
            "mid-update; build it on a copy of the policy (the rl stage does when max_staleness is set)"
        )
    if world > 1:
        _check_distributed(config, engine)


def _check_distributed(config: Any, engine: Any) -> None:
    """Under torchrun the ranks' producers must agree on what the module docstring lists; what
    they cannot agree on is refused."""
    free = config.stale_groups != "wait" or config.in_flight == "abort"
    if free and getattr(engine, "serves_every_rank", False):
        key, value = ("stale_groups", config.stale_groups) if config.stale_groups != "wait" else ("in_flight", "abort")
        raise ConfigError(
            f"'{key}': {value} with an engine that serves every rank (one server behind all of them): rank 0's weight "
            "push would land in the middle of the other ranks' batches; under torchrun give each rank an engine of "
            "its own, or use stale_groups: wait and in_flight: finish"
        )
    from torch.distributed.fsdp import FSDPModule

    if isinstance(getattr(engine, "model", None), FSDPModule):
        raise ConfigError(
            "'max_staleness': the engine's model is sharded (FSDP2), so every generation would be a collective of "
            "the default process group on the producer's thread; under torchrun build the engine on a whole copy "
            "of the policy before the trainer shards it (the rl stage does)"
        )


class RolloutProducer:
    """Runs ``trainer._collect(index)`` for the next batches on a thread of its own (see the module
    docstring); the trainer calls :meth:`take` for each step's batch and :meth:`publish` after each
    update, and :meth:`stop` at the end.

    What it uses of the trainer: ``_collect(index, env=) -> (Rollouts, rounds)``, which draws tasks
    from the data stream at ``cursor``, runs its collectives on ``env``, calls ``_after_request()``
    after every engine call and ``_gather_counts(env, count)`` for each refill round's all-gather;
    ``_sync_engine(state)``; ``env``, ``engine``, ``policy`` and ``algo``.
    """

    def __init__(self, trainer: Any, *, first: int, last: int, version: int) -> None:
        cfg = trainer.config
        self.trainer, self.k, self.stale, self.in_flight = trainer, cfg.max_staleness, cfg.stale_groups, cfg.in_flight
        self.next, self.last = first, last  # the next batch to make; the last one a 'wait' run needs
        self.version = version  # what the engine holds
        self.made = first - 1  # the newest complete batch
        self.taken = first - 1  # batches the trainer took (dropped ones included), as numbered
        self.step = first - 1  # the step the trainer took its last batch for
        self.buffer: collections.deque[Batch] = collections.deque()
        self.error: BaseException | None = None
        self.stopped = False
        self._cond = threading.Condition()
        self._request = threading.Lock()  # held while a batch is generated: no weight sync meanwhile
        self._abort = threading.Event()
        self._env = trainer.env  # the producer's collectives; a process group of their own from start()
        self._world = trainer.env.world
        # under torchrun with refill rounds a batch holds collectives, so aborts are agreed there, and
        # a free-running producer passes every batch admitted when it stops (the module docstring)
        self._gathers = self._world > 1 and trainer.algo.config.dynamic_sampling.refill_rounds > 0
        self._drain = self._gathers and self.stale != "wait"
        self._threads = torch.get_num_threads()  # intra-op threads are per thread: the producer uses the trainer's
        self._thread = threading.Thread(target=self._run, name="codemoe-rollouts", daemon=True)

    # ------------------------------------------------------------------------------------------
    # the trainer's side
    # ------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the thread; under torchrun every rank calls this at the same point (it makes the
        producer's process group)."""
        self._env = self.trainer.env.own_group()
        if self._gathers:
            self.trainer._gather_counts = self._gather_counts
        else:
            self.trainer._after_request = self._check_abort
        self._thread.start()

    def take(self, step: int) -> tuple[Batch, int, float]:
        """The batch to train step ``step`` on, how many were dropped as too stale before it, and how
        long the trainer waited. Under torchrun every rank's trainer calls this alike: the batch's
        version is agreed here (the oldest any rank made its part from)."""
        started, dropped = time.perf_counter(), 0
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self.buffer or self.error is not None)
                self._raise()
                batch = self.buffer.popleft()
                self.taken += 1
                self._cond.notify_all()
            batch.version = self._agreed_version(batch)
            if self.stale == "drop" and step - 1 - batch.version > self.k:
                dropped += 1
                continue
            with self._cond:
                self.step = step
                self._cond.notify_all()
            return batch, dropped, time.perf_counter() - started

    def publish(self, version: int) -> float:
        """Move the engine to the trainer's weights of ``version`` (between the producer's batches);
        returns how long the trainer waited for that."""
        started = time.perf_counter()
        trainer = self.trainer
        if self.in_flight == "abort":
            self._abort.set()
            abort = getattr(trainer.engine, "abort", None)  # optional: the call in flight returns now
            if abort is not None:
                abort()
        elif self.stale == "wait":  # batch version + K is still sampled by the weights the engine holds
            with self._cond:
                self._cond.wait_for(lambda: self.made >= min(version + self.k, self.last) or self.error is not None)
                self._raise()
        state = None
        if self._world > 1 and takes_whole_state(trainer.engine, trainer.policy):
            state = whole_state(trainer.policy, trainer.env)  # the trainers' collective, before the request lock
        with self._request:
            trainer._sync_engine(state)
            with self._cond:
                self.version = version
                self._abort.clear()
                self._cond.notify_all()
        return time.perf_counter() - started

    def stop(self) -> None:
        """End the thread (after the engine call in flight, if any, returns; with refill collectives
        under torchrun, after the batches admitted, which it passes without generating)."""
        with self._cond:
            self.stopped = True
            self._abort.set()
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join()
        self.trainer._after_request = None
        self.trainer._gather_counts = None

    def _agreed_version(self, batch: Batch) -> int:
        if self._world == 1:
            return batch.version
        answers = self.trainer.env.all_gather((batch.index, batch.version))
        if len({index for index, _ in answers}) != 1:
            raise RuntimeError(f"the ranks' producers are out of step: batches {[i for i, _ in answers]} taken together")
        return min(v for _, v in answers)

    # ------------------------------------------------------------------------------------------
    # the producer's thread
    # ------------------------------------------------------------------------------------------

    def _admitted(self) -> bool:
        if self.stale == "wait":
            return self.next <= min(self.version + 1 + self.k, self.last)
        waiting = self.next - 1 - self.taken  # batches made and not taken
        if waiting >= self.k + 1:  # this one included, K + 1 at most
            return False
        if self._gathers:  # every rank passes the same batches (the module docstring)
            return True
        # enough batches wait for the steps left (were one dropped, the count falls and this is asked again)
        if waiting >= self.last - self.step:
            return False
        return not (self.stale == "drop" and self._doomed())

    def _doomed(self) -> bool:
        """Whether a batch started now, from the weights the engine holds, is sure to be dropped: the
        trainer takes the buffered batches first, each kept one a step, so this one comes at that
        step at the earliest, and its age then already exceeds K (the trainer's agreed versions
        under torchrun can only make it older)."""
        step = self.step + 1
        for batch in self.buffer:
            if step - 1 - batch.version <= self.k:  # kept: trained on at this step
                step += 1
        return step - 1 - self.version > self.k

    def _run(self) -> None:
        torch.set_num_threads(self._threads)
        try:
            while True:
                with self._cond:
                    self._cond.wait_for(lambda: self.stopped or self._admitted())
                    if self.stopped and not (self._drain and self._admitted()):
                        return
                batch = self._make(self.next)
                if batch is _PASSED:  # the run ends on some rank: every rank passes this batch alike
                    with self._cond:
                        self.next += 1
                    continue
                if batch is None:  # aborted: made again once the trainer's sync is done
                    with self._cond:
                        self._cond.wait_for(lambda: self.stopped or not self._abort.is_set())
                    continue
                with self._cond:
                    self.buffer.append(batch)
                    self.made, self.next = batch.index, batch.index + 1
                    self._cond.notify_all()
        except BaseException as exc:  # handed to the trainer, which raises it in its own thread
            with self._cond:
                self.error = exc
                self._cond.notify_all()

    def _make(self, index: int) -> Any:
        """Batch ``index``; None if it was aborted (made again), ``_PASSED`` if passed for good."""
        with self._request:
            version, cursor, started = self.version, self.trainer.cursor, time.perf_counter()
            try:
                if self.stopped or self._abort.is_set():
                    if self._gathers:  # the other ranks meet this batch's first all-gather: abort it there too
                        self._gather_counts(self._env, 0)
                    return None
                rollouts, rounds = self.trainer._collect(index, env=self._env)
            except BatchAborted as exc:
                self.trainer.cursor = cursor  # the same tasks again, from the new weights
                return _PASSED if exc.final else None
        return Batch(index, rollouts, rounds, version, self.trainer.cursor, time.perf_counter() - started)

    def _check_abort(self) -> None:
        if self._abort.is_set():
            raise BatchAborted

    def _gather_counts(self, env: Any, count: int) -> list[int]:
        """A refill round's all-gather under torchrun: the zero-signal counts, and whether any rank
        aborts the batch (its trainer's sync) or stops (the run's end): then every rank does."""
        flag = 2 if self.stopped else int(self._abort.is_set())
        answers = env.all_gather((count, flag))
        flags = [f for _, f in answers]
        if any(flags):
            raise BatchAborted(final=2 in flags)
        return [int(c) for c, _ in answers]

    def _raise(self) -> None:
        """The producer's error, raised in the trainer's thread as itself (an ``EngineError`` stays one)."""
        if self.error is not None:
            raise self.error


def staleness_metrics(staleness: int, dropped: int) -> dict[str, float]:
    """The step's staleness histogram (share of its groups per staleness; every group of a batch
    has one version) and the batches dropped as too stale before it."""
    return {"staleness_mean": float(staleness), f"staleness/{staleness}": 1.0, "stale_dropped": float(dropped)}
