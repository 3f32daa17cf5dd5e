"""Multi-step agent episodes as rollouts: the policy acts, the environment answers, turn after turn.

An episode starts from the task's prompt. Each turn the engine samples one action (at most
``max_new_tokens``), the environment takes it and returns an observation, a step reward and
whether the episode is over; the observation's tokens (at most ``max_observation_tokens``) join the
history the next action is sampled from. After the last turn the environment gives the outcome
(:class:`codemoe.rl.rollout.Score`).

As a rollout row an episode is ``prompt + [action, observation, action, ...]``: the completion is
everything after the prompt, the mask is 1 on action tokens only (the policy is trained on what it
said, never on what the environment said), and ``step_rewards [B, T]`` holds each step reward on
the last token of its action and the outcome reward on the last token of the last action. The
estimators then do the credit assignment (mission R4): GRPO-family estimators compare whole
episode returns within a group, REINFORCE++ and GAE spread rewards back over the actions before
them (skipping the observation tokens). Rows come grouped by task, in task order, the group's
samples in order, however the episodes were scheduled.

Episodes run concurrently, each at its own pace (continuous batching of episodes). A task's group
starts with one engine call for its ``n`` samples (one prefill of the shared prompt); from then on
every episode is its own chain of jobs on a thread pool, one job per turn: the environment steps on
the action (its sandbox executions run beside every other episode's, as many at once as the
executor has workers), then the engine is asked for the next action, a one-prompt call that the
engine batches with the calls of every other live episode (the embedded engine's scheduler admits
them into its running batch; a remote engine sends each as its own request). A slow test run holds
up only its own episode. At most ``max_live_episodes`` episodes are live (started, not ended: each
holds a workspace and a history in the engine); when an episode ends its slot goes to the next
task's group. Each call's sampling seed is derived from the run's seed, the task's index, the
sample's index and the turn (:func:`episode_seed`), never from which episodes share the engine at
that moment, so an engine whose samples depend only on prompt, parameters and seed (the embedded
engine's per-sample random streams) gives the same rollouts token for token however many episodes
run at once, ``concurrent=False`` (one job at a time) included.

An episode whose environment or engine call raises ends there, failed; the others run on. Its
group's rows stay in place but are masked out of the loss (a group-relative baseline over a group
missing a member is not the comparison the estimators make), its own row scores 0 with the
component ``episode_error``, and a ``RuntimeWarning`` names every failed episode's task, sample and
turn with the error. When every episode failed there is nothing to train on and
:class:`EpisodeError` is raised with the same account.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from codemoe.core.contracts import SamplingParams
from codemoe.core.errors import CodemoeError, ConfigError
from codemoe.rl.rollout import Rollouts, Score, padded_rows, score_fields

__all__ = ["DEFAULT_MAX_LIVE_EPISODES", "Environment", "EpisodeError", "Turn", "episode_seed", "run_episodes"]

# Live episodes by default: the embedded engine's default KV-cache slots (max_batch_size), so every
# live episode's next action can be decoded in one batch; more would only wait in the engine's queue
# while holding a workspace.
DEFAULT_MAX_LIVE_EPISODES = 256
# How long an engine call may wait for the calls of episodes still in an environment call, so that
# the engine admits them together (see _Admission): shorter than one decode step of a batch, and
# small against a sandbox execution (tens of milliseconds and up), which it never waits out.
ADMISSION_WINDOW_S = 0.02


@dataclass
class Turn:
    """The environment's answer to one action."""

    observation: str | list[int]  # shown to the policy next turn (text, or token ids)
    reward: float = 0.0  # step (process) reward of the action just taken
    done: bool = False  # the episode is over (no observation is appended)
    # appended after the observation and never cut by max_observation_tokens (a chat template's end
    # of the tool turn and the opening of the next assistant turn: see codemoe.core.chat)
    tail: str | list[int] = ""


class Environment(Protocol):
    """One episode: ``reset`` -> ``step`` ... -> ``outcome``.

    :func:`run_episodes` makes one environment per episode and calls it from one thread at a time,
    but the environments of different episodes from different threads at once: what they share
    (a sandbox executor, a cache) must be safe to use concurrently. A method that raises ends its
    episode as failed (see the module docstring); an environment that also has ``close()`` is
    closed then, to release what ``outcome()`` would have released.
    """

    def reset(self, task: Any) -> str | list[int]:
        """Start an episode on ``task``; returns its prompt (text or token ids)."""
        ...

    def step(self, action: str, token_ids: list[int]) -> Turn:
        """Take the policy's action (its text and tokens)."""
        ...

    def outcome(self) -> Score:
        """The finished episode's outcome: its reward is added on the last action's last token."""
        ...


class EpisodeError(CodemoeError, RuntimeError):
    """Every episode of a :func:`run_episodes` call failed; the message names each one's task and turn."""


@dataclass
class _Episode:
    task_index: int
    sample: int
    prompt: list[int] = field(default_factory=list)
    env: Environment | None = None
    tokens: list[int] = field(default_factory=list)  # actions and observations after the prompt
    action: list[bool] = field(default_factory=list)  # per token: the policy produced it
    logprobs: list[float] = field(default_factory=list)  # engine log-prob per token (NaN on observations)
    rewards: list[tuple[int, float]] = field(default_factory=list)  # (token index, step reward)
    texts: list[str] = field(default_factory=list)  # each action's text
    score: Score | None = None  # the outcome, once the episode ended
    failure: str = ""  # what raised, once the episode failed

    def act(self, sample: Any) -> None:
        token_ids = list(sample.token_ids)
        self.tokens += token_ids
        self.action += [True] * len(token_ids)
        self.logprobs += list(sample.logprobs) if sample.logprobs else [math.nan] * len(token_ids)
        self.texts.append(sample.text)

    def observe(self, token_ids: list[int]) -> None:
        self.tokens += token_ids
        self.action += [False] * len(token_ids)
        self.logprobs += [math.nan] * len(token_ids)


def run_episodes(
    engine: Any,
    make_env: Callable[[], Environment],
    tasks: Sequence[Any],
    params: SamplingParams,
    *,
    max_turns: int,
    max_observation_tokens: int,
    pad_id: int,
    max_live_episodes: int = DEFAULT_MAX_LIVE_EPISODES,
    concurrent: bool = True,
    admission_window_s: float = ADMISSION_WINDOW_S,
) -> Rollouts:
    """``params.n`` episodes of every task, as rollouts (rows grouped by task, see the module docstring).

    ``max_live_episodes`` caps the episodes started and not yet ended (at least ``params.n``: a
    group starts together). ``concurrent=False`` runs one job (a group's start or one turn of one
    episode) at a time in a single thread: the same rollouts, for engines that cannot take calls
    from several threads.
    """
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1, got {max_turns}")
    if max_live_episodes < params.n:
        raise ConfigError(
            f"'max_live_episodes' is {max_live_episodes}, below the group size {params.n}: a task's {params.n} "
            f"episodes start together from one prompt; set max_live_episodes to at least {params.n}"
        )
    workers = max_live_episodes if concurrent else 1
    admission = _Admission(engine, admission_window_s if workers > 1 else 0.0)  # one thread: no one else can arrive
    runner = _Runner(engine, admission, make_env, tasks, params, max_turns, max_observation_tokens)
    episodes = runner.run(max_live_episodes, workers)
    _report(episodes, tasks)
    return _to_rollouts(episodes, params.n, horizon(params.max_new_tokens, max_turns, max_observation_tokens), pad_id)


def horizon(max_new_tokens: int, max_turns: int, max_observation_tokens: int) -> int:
    """Tokens after the prompt an episode can have: every action and every observation but the last."""
    return max_turns * max_new_tokens + (max_turns - 1) * max_observation_tokens


def episode_seed(seed: int | None, task: int, sample: int | None, turn: int) -> int | None:
    """The sampling seed of one engine call: a group's first action (``sample`` None, turn 0) or
    ``turn`` of one episode. It depends on nothing but these, so an episode's samples do not depend
    on the episodes sharing the engine with it; None (a fresh seed per call) stays None."""
    if seed is None:
        return None
    digest = hashlib.blake2b(f"{seed}/{task}/{sample}/{turn}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 2  # 62 bits, like every seed codemoe passes an engine


class _Runner:
    """Starts groups while slots are free and runs each episode's turns as jobs on a thread pool."""

    def __init__(self, engine: Any, admission: _Admission, make_env: Callable[[], Environment],
                 tasks: Sequence[Any], params: SamplingParams, max_turns: int, max_observation_tokens: int) -> None:
        self.engine, self.admission, self.make_env, self.tasks, self.params = engine, admission, make_env, tasks, params
        self.max_turns, self.max_observation_tokens = max_turns, max_observation_tokens
        self.group = params.n

    def run(self, max_live: int, workers: int) -> list[_Episode]:
        """Every task's episodes, in row order, each ended (scored) or failed."""
        episodes = [_Episode(i, j) for i in range(len(self.tasks)) for j in range(self.group)]
        waiting = deque(range(len(self.tasks)))
        live = 0
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="codemoe-episode")
        try:
            jobs: dict[Future[list[tuple[_Episode, Any]]], int] = {}  # job -> live episodes it carries
            while waiting or jobs:
                while waiting and live + self.group <= max_live:
                    i = waiting.popleft()
                    self.admission.expect(self.group)
                    jobs[pool.submit(self._start, episodes[i * self.group : (i + 1) * self.group])] = self.group
                    live += self.group
                done, _ = wait(jobs, return_when=FIRST_COMPLETED)
                for job in done:
                    going = job.result()  # a job records its episode's failures; this raises only on a bug here
                    live -= jobs.pop(job) - len(going)
                    for episode, sample in going:
                        self.admission.expect(1)
                        jobs[pool.submit(self._turn, episode, sample)] = 1
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        return episodes

    # -- jobs: each returns the episodes that go on, with the action each takes next -----------

    def _start(self, group: list[_Episode]) -> list[tuple[_Episode, Any]]:
        """Reset the group's environments and sample every first action from the shared prompt."""
        task_index = group[0].task_index
        for episode in group:
            try:
                episode.env = self.make_env()
                episode.prompt = _ids(self.engine, episode.env.reset(self.tasks[task_index]), "the environment's prompt")
            except Exception as exc:  # recorded on the episodes, reported by run_episodes
                self.admission.leave(len(group))
                return _fail_all(group, f"at the start: the environment's reset raised {_describe(exc)}")
        first = SamplingParams(**{**vars(self.params), "seed": episode_seed(self.params.seed, task_index, None, 0)})
        try:
            samples = list(self.admission.generate(group[0].prompt, first, arriving=len(group)).samples)
        except Exception as exc:
            return _fail_all(group, f"turn 1: the engine raised {_describe(exc)}")
        return list(zip(group, samples, strict=True))

    def _turn(self, episode: _Episode, sample: Any) -> list[tuple[_Episode, Any]]:
        """Take ``sample`` as the episode's action, let the environment answer, sample the next action."""
        assert episode.env is not None
        episode.act(sample)
        turn = len(episode.texts)  # 1-based number of this action
        try:
            answer = episode.env.step(sample.text, list(sample.token_ids))
            episode.rewards.append((_last_action(episode), float(answer.reward)))
            if answer.done or turn == self.max_turns:
                episode.score = episode.env.outcome()
                self.admission.leave(1)
                return []
            observation = _ids(self.engine, answer.observation, "an observation")
            tail = _ids(self.engine, answer.tail, "an observation's tail") if answer.tail else []
            if len(tail) > self.max_observation_tokens:
                raise ValueError(f"an observation's tail is {len(tail)} tokens, more than "
                                 f"max_observation_tokens={self.max_observation_tokens}")
        except Exception as exc:
            self.admission.leave(1)
            return _fail(episode, f"turn {turn}: the environment raised {_describe(exc)}")
        episode.observe(observation[: self.max_observation_tokens - len(tail)] + tail)
        follow = SamplingParams(**{
            **vars(self.params), "n": 1, "seed": episode_seed(self.params.seed, episode.task_index, episode.sample, turn),
        })
        try:
            output = self.admission.generate(episode.prompt + episode.tokens, follow, arriving=1)
        except Exception as exc:
            return _fail(episode, f"turn {turn + 1}: the engine raised {_describe(exc)}")
        return [(episode, output.samples[0])]


@dataclass
class _Call:
    """One engine call waiting in :class:`_Admission`: a prompt and its own sampling parameters."""

    prompt: list[int]
    params: SamplingParams
    taken: bool = False  # in a batch a thread is sending
    sent: threading.Event = field(default_factory=threading.Event)
    handle: Any = None  # what the engine's submit() returned
    error: Exception | None = None


class _Admission:
    """Brings the engine calls of episodes whose environments answer at about the same time to the
    engine together, so that it admits them in one step (one prefill) and decodes them in step.

    Without it the first episode to be answered would start an engine step alone and the others
    would join one step later each, so every decode step would carry a few samples. A call waits
    until no live episode is in an environment call any more (every one is waiting or generating),
    or for ``window_s``, whichever comes first; then its batch is sent. An engine that queues
    requests without waiting (``submit`` / ``collect``: the embedded engine) has the whole batch
    queued by one thread before any of it is driven; another engine gets one ``generate`` call per
    request, at once. Which calls share a batch is timing; what they sample is not: every call
    carries its own seed and is the only prompt of its request.
    """

    def __init__(self, engine: Any, window_s: float) -> None:
        self.engine, self.window_s = engine, window_s
        self._queues = callable(getattr(engine, "submit", None)) and callable(getattr(engine, "collect", None))
        self._cond = threading.Condition()
        self._stepping = 0  # live episodes in an environment call, or about to be (queued jobs)
        self._batch: list[_Call] = []

    def expect(self, episodes: int) -> None:
        """``episodes`` episodes are about to be in an environment call (a job was queued)."""
        with self._cond:
            self._stepping += episodes

    def leave(self, episodes: int) -> None:
        """``episodes`` episodes ended after their environment call: no engine call follows."""
        with self._cond:
            self._stepping -= episodes
            self._cond.notify_all()

    def generate(self, prompt: list[int], params: SamplingParams, *, arriving: int) -> Any:
        """The engine's output for ``prompt`` (one prompt), sent with the batch it joins; the
        ``arriving`` episodes it samples for have left their environment call."""
        call = _Call(list(prompt), params)
        with self._cond:
            self._stepping -= arriving
            self._batch.append(call)
            self._cond.notify_all()
            deadline = time.monotonic() + self.window_s
            batch: list[_Call] = []
            while not call.taken:
                left = deadline - time.monotonic()
                if self._stepping <= 0 or left <= 0:
                    batch, self._batch = self._batch, []
                    for taken in batch:
                        taken.taken = True
                    self._cond.notify_all()
                else:
                    self._cond.wait(left)
        if batch:  # this thread sends the batch its call is in
            self._send(batch)
        call.sent.wait()
        if call.error is not None:
            raise call.error
        if self._queues:
            return self.engine.collect(call.prompt, call.handle)
        (output,) = self.engine.generate([call.prompt], call.params)
        return output

    def _send(self, batch: list[_Call]) -> None:
        for call in batch:
            if self._queues:
                try:
                    call.handle = self.engine.submit(call.prompt, call.params, seed=call.params.seed, prompt_index=0)
                except Exception as exc:  # raised in the thread whose call it is
                    call.error = exc
            call.sent.set()


def _fail_all(group: list[_Episode], why: str) -> list[tuple[_Episode, Any]]:
    for episode in group:
        _fail(episode, why)
    return []


def _fail(episode: _Episode, why: str) -> list[tuple[_Episode, Any]]:
    """End ``episode`` as failed; an environment with ``close()`` releases what ``outcome()`` would have."""
    episode.failure = why
    close = getattr(episode.env, "close", None)
    if close is not None:
        try:
            close()
        except Exception as exc:  # the episode already failed; say so too
            episode.failure += f" (and its close() raised {_describe(exc)})"
    return []


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _task_name(task: Any) -> str:
    return str(getattr(task, "id", task))


def _report(episodes: list[_Episode], tasks: Sequence[Any]) -> None:
    """Warn about failed episodes, naming task, sample and turn; raise when none is left to train on."""
    failed = [e for e in episodes if e.failure]
    if not failed:
        return
    lines = "\n".join(
        f"  task {_task_name(tasks[e.task_index])!r} (task {e.task_index}), sample {e.sample}, {e.failure}" for e in failed
    )
    if len(failed) == len(episodes):
        raise EpisodeError(f"every one of the {len(episodes)} episodes failed:\n{lines}")
    warnings.warn(
        f"{len(failed)} of {len(episodes)} episodes failed; their groups are kept, masked out of the loss:\n{lines}",
        RuntimeWarning,
        stacklevel=3,
    )


def _last_action(episode: _Episode) -> int:
    """Index of the episode's latest action token (0 when it has none: an all-empty episode,
    whose mask is all zeros, so the reward there reaches no token, as for an empty completion)."""
    for i in range(len(episode.action) - 1, -1, -1):
        if episode.action[i]:
            return i
    return 0


def _ids(engine: Any, value: str | list[int], what: str) -> list[int]:
    if isinstance(value, str):
        encode = getattr(engine, "encode", None)
        if encode is None:
            raise TypeError(f"{what} is text but the engine has no encode(): return token ids instead")
        return list(encode(value))
    if isinstance(value, (list, tuple)) and all(isinstance(t, int) for t in value):
        return list(value)
    raise TypeError(f"{what} must be text or a list of token ids, got {type(value).__name__}")


def _to_rollouts(episodes: list[_Episode], group: int, width: int, pad_id: int) -> Rollouts:
    failed_groups = {e.task_index for e in episodes if e.failure}
    for e in episodes:  # an episode that failed before its prompt was made shows its group's prompt
        if not e.prompt:
            e.prompt = next((s.prompt for s in episodes if s.task_index == e.task_index and s.prompt), [pad_id])
    completions, mask, engine_logp = padded_rows(
        [e.tokens for e in episodes], [e.action for e in episodes], [e.logprobs for e in episodes], width, pad_id
    )
    step_rewards = torch.zeros(len(episodes), width)
    scores = []
    for row, episode in enumerate(episodes):
        if episode.task_index in failed_groups:
            mask[row] = 0.0
        if episode.failure or episode.score is None:
            scores.append(Score(reward=0.0, passed=False, components={"episode_error": 1.0}))
            continue
        for index, reward in episode.rewards:
            step_rewards[row, index] += reward
        step_rewards[row, _last_action(episode)] += episode.score.reward
        total = episode.score.reward + sum(r for _, r in episode.rewards)
        scores.append(Score(reward=total, passed=episode.score.passed, components=dict(episode.score.components)))
    return Rollouts(
        prompt_ids=[e.prompt for e in episodes],
        completions=completions,
        mask=mask,
        engine_logp=engine_logp,
        group_size=group,
        texts=["\n".join(e.texts) for e in episodes],
        step_rewards=step_rewards,
        **score_fields(scores),
    )
