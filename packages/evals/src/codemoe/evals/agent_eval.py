"""Evaluating a policy as an agent: episodes in a repository environment, graded on hidden tests.

For each task of a repository suite (``agentic-core``, SWE-bench-style folders) the policy runs
``samples`` episodes: it sees the system prompt (the tools and their JSON schemas) and the task,
and each turn its completion is one tool call that the environment (kind ``environment``, e.g. the
sandbox's ``repo``) runs; the observation joins the conversation as a tool turn. The conversation
is rendered by the tokenizer's chat template (:class:`codemoe.core.chat.ChatFormat`), exactly as
SFT on reference trajectories and the RL trainer's episodes render it. An episode ends when the agent
submits or after ``max_turns`` actions (the environment's step budget), and the environment grades
it on the visible and hidden tests. A sample passes when its episode resolved the task, so pass@k,
its intervals, the per-family table and the review page are those of function-level evaluation.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from codemoe.core.chat import ChatFormat
from codemoe.core.contracts import Environment, repository_task
from codemoe.evals.agent_metrics import episode_facts
from codemoe.evals.grading import GradedSample

__all__ = ["agent_prompt", "run_agent_episodes"]

# Environment steps of one turn run on this many threads: each episode has its own environment, and
# their test runs reach the shared executor together, whose workers run them side by side (as the
# RL trainer's concurrent episodes do); every episode's step is the same whatever the order.
_STEP_THREADS = 16


def agent_prompt(environment: Environment, task: Any, chat: ChatFormat) -> str:
    """Reset ``environment`` on ``task`` (a repository suite's task); the policy's first prompt."""
    environment.reset(repository_task(task, needed_by="agent evaluation"))
    assert environment.episode is not None
    return chat.prompt(environment.episode.messages)


class _Run:
    def __init__(self, task: Any, index: int, environment: Any, chat: ChatFormat) -> None:
        self.task, self.index, self.environment, self.chat = task, index, environment, chat
        self.history = agent_prompt(environment, task, chat)
        self.transcript: list[str] = []
        self.last_observation = ""
        self.started = time.perf_counter()

    @property
    def done(self) -> bool:
        episode = self.environment.episode
        return episode is not None and episode.done

    def act(self, action: str) -> None:
        result = self.environment.step(action)
        self.last_observation = result.observation
        self.transcript += [f"[action]\n{action}", f"[observation]\n{result.observation}"]
        if not result.done:  # the action is known as text here (special tokens stripped): the whole close
            turn = self.chat.observation(result.observation)
            self.history += f"{action}{turn.text}{turn.tail}"

    def graded(self) -> GradedSample:
        episode = self.environment.episode
        resolved = bool(episode is not None and episode.done and episode.resolved)
        reason = "" if resolved else f"not resolved ({episode.stop_reason if episode else 'no episode'})"
        self.environment.close_workspace()
        return GradedSample(
            task_id=self.task.id,
            family=self.task.family,
            index=self.index,
            completion="\n".join(self.transcript),
            status="passed" if resolved else "failed",
            reason=reason,
            output=self.last_observation[-2000:],
            duration_s=round(time.perf_counter() - self.started, 3),
            episode=episode_facts(episode) if episode is not None else None,  # what the agent metrics count
        )


def run_agent_episodes(
    generate: Callable[[list[str], int, int], list[list[str]]],
    make_environment: Callable[[], Any],
    tasks: Sequence[Any],
    *,
    samples: int,
    max_turns: int,
    chat: ChatFormat,
    advance: Callable[[int], Any] | None = None,
) -> list[GradedSample]:
    """``samples`` graded episodes per task.

    ``generate(prompts, n, turn)`` returns ``n`` completions per prompt: the first turn asks for all
    samples of a task from its one prompt, later turns one completion per episode's history.
    """
    runs = [_Run(task, j, make_environment(), chat) for task in tasks for j in range(samples)]
    with ThreadPoolExecutor(max_workers=max(1, min(len(runs), _STEP_THREADS))) as pool:  # one pool for every turn
        for turn in range(max_turns):
            active = [r for r in runs if not r.done]
            if not active:
                break
            if turn == 0:
                firsts = generate([runs[i * samples].history for i in range(len(tasks))], samples, turn)
                actions = [a for per_task in firsts for a in per_task]
            else:
                actions = [out[0] for out in generate([r.history for r in active], 1, turn)]
            list(pool.map(lambda pair: pair[0].act(pair[1]), zip(active, actions, strict=True)))  # test runs side by side
            if advance is not None:
                advance(sum(r.done for r in active))  # episodes that ended this turn
    unfinished = [r for r in runs if not r.done]
    if unfinished:
        raise RuntimeError(
            f"{len(unfinished)} episodes did not end in {max_turns} turns: the environment's step budget must be max_turns"
        )
    return [run.graded() for run in runs]
