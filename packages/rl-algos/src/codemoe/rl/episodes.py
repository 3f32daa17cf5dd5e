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
them (skipping the observation tokens). The first turn samples the group from the shared prompt
(``n`` samples, one prefill); later turns send each episode's history as its own prompt, which
an engine with a prefix cache continues without recomputing it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from codemoe.core.contracts import SamplingParams
from codemoe.rl.rollout import Rollouts, Score, padded_rows, score_fields

__all__ = ["Environment", "Turn", "run_episodes"]


@dataclass
class Turn:
    """The environment's answer to one action."""

    observation: str | list[int]  # shown to the policy next turn (text, or token ids)
    reward: float = 0.0  # step (process) reward of the action just taken
    done: bool = False  # the episode is over (no observation is appended)


class Environment(Protocol):
    """One episode at a time: ``reset`` -> ``step`` ... -> ``outcome``."""

    def reset(self, task: Any) -> str | list[int]:
        """Start an episode on ``task``; returns its prompt (text or token ids)."""
        ...

    def step(self, action: str, token_ids: list[int]) -> Turn:
        """Take the policy's action (its text and tokens)."""
        ...

    def outcome(self) -> Score:
        """The finished episode's outcome: its reward is added on the last action's last token."""
        ...


@dataclass
class _Episode:
    env: Environment
    prompt: list[int]
    tokens: list[int] = field(default_factory=list)  # actions and observations after the prompt
    action: list[bool] = field(default_factory=list)  # per token: the policy produced it
    logprobs: list[float] = field(default_factory=list)  # engine log-prob per token (NaN on observations)
    rewards: list[tuple[int, float]] = field(default_factory=list)  # (token index, step reward)
    texts: list[str] = field(default_factory=list)  # each action's text
    done: bool = False

    def act(self, token_ids: list[int], logprobs: list[float] | None) -> None:
        self.tokens += token_ids
        self.action += [True] * len(token_ids)
        self.logprobs += list(logprobs) if logprobs else [math.nan] * len(token_ids)


def run_episodes(
    engine: Any,
    make_env: Callable[[], Environment],
    tasks: Sequence[Any],
    params: SamplingParams,
    *,
    max_turns: int,
    max_observation_tokens: int,
    pad_id: int,
) -> Rollouts:
    """``params.n`` episodes of every task, as rollouts (rows grouped by task, see the module docstring)."""
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1, got {max_turns}")
    group = params.n
    episodes: list[_Episode] = []
    for task in tasks:
        for _ in range(group):
            env = make_env()
            episodes.append(_Episode(env, _ids(engine, env.reset(task), "the environment's prompt")))
    for turn in range(max_turns):
        active = [e for e in episodes if not e.done]
        if not active:
            break
        if turn == 0:  # the group's samples from its shared prompt: one prefill per task
            outputs = engine.generate([episodes[i * group].prompt for i in range(len(tasks))], params)
            samples = [s for out in outputs for s in out.samples]
        else:
            follow = SamplingParams(**{**vars(params), "n": 1, "seed": _turn_seed(params.seed, turn)})
            outputs = engine.generate([e.prompt + e.tokens for e in active], follow)
            samples = [out.samples[0] for out in outputs]
        for episode, sample in zip(active, samples, strict=True):
            episode.act(list(sample.token_ids), sample.logprobs)
            episode.texts.append(sample.text)
            answer = episode.env.step(sample.text, list(sample.token_ids))
            episode.rewards.append((_last_action(episode), float(answer.reward)))
            if answer.done or turn == max_turns - 1:
                episode.done = True
                continue
            observation = _ids(engine, answer.observation, "an observation")[:max_observation_tokens]
            episode.tokens += observation
            episode.action += [False] * len(observation)
            episode.logprobs += [math.nan] * len(observation)
    return _to_rollouts(episodes, group, horizon(params.max_new_tokens, max_turns, max_observation_tokens), pad_id)


def horizon(max_new_tokens: int, max_turns: int, max_observation_tokens: int) -> int:
    """Tokens after the prompt an episode can have: every action and every observation but the last."""
    return max_turns * max_new_tokens + (max_turns - 1) * max_observation_tokens


def _last_action(episode: _Episode) -> int:
    """Index of the episode's latest action token (0 when it has none: an all-empty episode,
    whose mask is all zeros, so the reward there reaches no token, as for an empty completion)."""
    for i in range(len(episode.action) - 1, -1, -1):
        if episode.action[i]:
            return i
    return 0


def _turn_seed(seed: int | None, turn: int) -> int | None:
    return None if seed is None else (seed * 1_000_003 + turn) % (1 << 62)


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
    completions, mask, engine_logp = padded_rows(
        [e.tokens for e in episodes], [e.action for e in episodes], [e.logprobs for e in episodes], width, pad_id
    )
    step_rewards = torch.zeros(len(episodes), width)
    scores = []
    for row, episode in enumerate(episodes):
        outcome = episode.env.outcome()
        for index, reward in episode.rewards:
            step_rewards[row, index] += reward
        step_rewards[row, _last_action(episode)] += outcome.reward
        total = outcome.reward + sum(r for _, r in episode.rewards)
        scores.append(Score(reward=total, passed=outcome.passed, components=dict(outcome.components)))
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
