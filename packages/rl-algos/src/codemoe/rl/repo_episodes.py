"""The sandbox's repository environment (kind ``environment``, e.g. ``repo``) as RL episodes.

Each episode: the environment copies the task's repository into a private workspace, and the
policy sees the first prompt the environment renders (the tools and their JSON schemas, the task).
Every action is one tool call, run in the sandbox; its observation (file contents, test output, or
the format error) is the next turn's input. The environment's step
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

from codemoe.core.contracts import Environment, repository_task
from codemoe.rl.episodes import Turn
from codemoe.rl.rollout import Score
from codemoe.rl.scoring import logged_values

__all__ = ["RepoEpisodes"]


class RepoEpisodes:
    """One repository episode, over an environment built for it (see the module docstring)."""

    def __init__(self, environment: Environment, recipe: Any) -> None:
        self.environment, self.recipe = environment, recipe

    def reset(self, task: Any) -> str:
        return self.environment.reset(repository_task(task, needed_by="a multi-step episode"))

    def step(self, action: str, token_ids: list[int]) -> Turn:
        result = self.environment.step(action)
        return Turn(observation=f"\n{result.observation}\n", reward=0.0, done=result.done)

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
