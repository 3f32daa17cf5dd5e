"""The sandbox's repository environment (kind ``environment``, e.g. ``repo``) as RL episodes.

Each episode: the environment copies the task's repository into a private workspace, and the
policy sees the episode's first messages (the system turn with the tools and their JSON schemas,
the task) rendered by the tokenizer's chat template (:class:`codemoe.core.chat.ChatFormat`), as SFT
on reference trajectories renders them. Every action is one tool call, run in the sandbox; its
observation (file contents, test output, or the format error) joins the history as a tool turn
after the engine's own tokens of the action, so the history is what the template renders for the
whole conversation. The environment's step
budget is the trainer's ``max_turns``, so every episode ends graded (visible and hidden tests). The
reward recipe (kind ``reward``, e.g. ``seed1-stepwise``) scores the whole episode at the end: test
outcomes, task completion, step cost, format errors and hack checks; ``passed`` is the episode
having resolved its task.

Episodes run concurrently (:func:`codemoe.rl.episodes.run_episodes`): each has its own environment
and workspace, and they share the stage's one executor, whose workers run their executions side by
side.
"""

from __future__ import annotations

from typing import Any

from codemoe.core.chat import ChatFormat
from codemoe.core.contracts import Environment, repository_task
from codemoe.rl.episodes import Turn
from codemoe.rl.rollout import Score
from codemoe.rl.scoring import logged_values

__all__ = ["RepoEpisodes"]


class RepoEpisodes:
    """One repository episode, over an environment built for it (see the module docstring)."""

    def __init__(self, environment: Environment, recipe: Any, chat: ChatFormat) -> None:
        self.environment, self.recipe, self.chat = environment, recipe, chat

    def reset(self, task: Any) -> str:
        self.environment.reset(repository_task(task, needed_by="a multi-step episode"))
        episode = self.environment.episode
        assert episode is not None
        return self.chat.prompt(episode.messages)

    def step(self, action: str, token_ids: list[int]) -> Turn:
        result = self.environment.step(action)
        if result.done:
            return Turn(observation="", reward=0.0, done=True)
        text = self.chat.observation(result.observation, action_token_ids=token_ids)
        return Turn(observation=text.text, reward=0.0, done=False, tail=text.tail)

    def outcome(self) -> Score:
        episode = self.environment.episode
        if episode is None or not episode.done:
            raise RuntimeError("the episode has not ended: the environment's step budget must equal max_turns")
        recipe = self.recipe(episode.to_reward_input())
        self.environment.close_workspace()
        return Score(reward=float(recipe.total), passed=episode.resolved, components=logged_values(recipe))

    def close(self) -> None:
        """Delete the workspace of an episode that failed before its outcome (which deletes it otherwise)."""
        self.environment.close_workspace()
