"""Multi-step agent episodes: their rollout layout, credit assignment over actions, and learning."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from codemoe.core.contracts import SamplingParams
from codemoe.core.errors import ConfigError
from codemoe.rl.advantages import AdvantageInput, GAEAdvantage, GAEConfig, ReinforcePPAdvantage, ReinforcePPConfig
from codemoe.rl.episodes import Turn, run_episodes
from codemoe.rl.rollout import Score
from rl_toy import ToyEpisodeEnvironment
from test_trainer import _fit, _trainer


class ScriptedEngine:
    """Answers turn ``k`` of every episode with ``actions[k]`` (log-prob -0.5 per token)."""

    def __init__(self, actions: list[list[int]]) -> None:
        self.actions, self.turn, self.prompts = actions, 0, []

    def generate(self, prompts, params):
        self.prompts.append([list(p) for p in prompts])
        tokens = self.actions[self.turn]
        self.turn += 1
        sample = SimpleNamespace(token_ids=tokens, text=f"a{self.turn}", logprobs=[-0.5] * len(tokens))
        return [SimpleNamespace(prompt_token_ids=list(p), samples=[sample] * params.n) for p in prompts]


class ScriptedEnvironment:
    """Observation ``[9] * turn``, step reward ``turn / 10``, done after two turns; outcome 1.0."""

    def __init__(self) -> None:
        self.turn = 0

    def reset(self, task) -> list[int]:
        return [3, 4]

    def step(self, action, token_ids) -> Turn:
        self.turn += 1
        return Turn(observation=[9] * self.turn, reward=self.turn / 10, done=self.turn == 2)

    def outcome(self) -> Score:
        return Score(reward=1.0, passed=True, components={"resolved": 1.0})


def test_an_episode_becomes_one_row_with_actions_masked_in_and_rewards_on_their_last_tokens():
    engine = ScriptedEngine([[5, 6], [7, 8, 11]])
    params = SamplingParams(n=2, max_new_tokens=3, seed=0)
    rollouts = run_episodes(
        engine, ScriptedEnvironment, ["task"], params, max_turns=3, max_observation_tokens=4, pad_id=0
    )
    # turn 0 sampled both episodes from the one prompt; turn 1 sent each history as its own prompt
    assert engine.prompts == [[[3, 4]], [[3, 4, 5, 6, 9], [3, 4, 5, 6, 9]]]
    assert rollouts.prompt_ids == [[3, 4], [3, 4]] and rollouts.group_size == 2
    width = 3 * 3 + 2 * 4
    assert rollouts.completions.shape == (2, width)
    assert rollouts.completions[0, :6].tolist() == [5, 6, 9, 7, 8, 11] and rollouts.completions[0, 6:].eq(0).all()
    assert rollouts.mask[0, :7].tolist() == [1, 1, 0, 1, 1, 1, 0]
    assert rollouts.engine_logp[0, :6].nan_to_num(1.0).tolist() == [-0.5, -0.5, 1.0, -0.5, -0.5, -0.5]
    # step 1 (0.1) on token 1, step 2 (0.2) plus the outcome (1.0) on token 5
    assert rollouts.step_rewards[0].tolist() == pytest.approx([0, 0.1, 0, 0, 0, 1.2] + [0] * (width - 6))
    assert rollouts.rewards.tolist() == pytest.approx([1.3, 1.3]) and rollouts.passed.all()
    assert rollouts.texts == ["a1\na2", "a1\na2"]


def test_an_observation_keeps_its_first_tokens_only():
    engine = ScriptedEngine([[5], [6]])
    rollouts = run_episodes(
        engine,
        ScriptedEnvironment,
        ["task"],
        SamplingParams(n=1, max_new_tokens=1),
        max_turns=2,
        max_observation_tokens=0,
        pad_id=0,
    )
    assert rollouts.completions[0].tolist() == [5, 6]


def _compact(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Rows of ``x`` with the masked positions removed, right-padded with zeros."""
    out = torch.zeros_like(x)
    for row in range(x.shape[0]):
        kept = x[row][mask[row] > 0]
        out[row, : kept.numel()] = kept
    return out


@pytest.mark.parametrize("estimator", ["gae", "reinforce_pp"])
def test_credit_skips_observation_tokens(estimator):
    """An episode's advantages equal those of the same actions with the observations cut out."""
    gen = torch.Generator().manual_seed(3)
    mask = torch.tensor([[1, 1, 0, 0, 1, 1, 1, 0, 0], [1, 0, 1, 1, 0, 1, 0, 0, 0]], dtype=torch.float32)
    rewards = torch.rand(2, 9, generator=gen) * mask
    values = torch.rand(2, 9, generator=gen) * mask
    if estimator == "gae":
        fn = GAEAdvantage(GAEConfig(gamma=0.9, lam=0.8, whiten=False))
    else:
        fn = ReinforcePPAdvantage(ReinforcePPConfig(gamma=0.9))
    compact_mask = _compact(mask, mask)
    holes = fn(AdvantageInput(rewards, mask, group_size=2, values=values))
    packed = fn(AdvantageInput(_compact(rewards, mask), compact_mask, group_size=2, values=_compact(values, mask)))
    torch.testing.assert_close(_compact(holes.advantages, mask), packed.advantages)
    if holes.returns is not None:
        torch.testing.assert_close(_compact(holes.returns * mask, mask), packed.returns * compact_mask)


def test_gae_known_answer_across_an_observation():
    # actions at 0 and 2 (observation at 1); reward 1 at the end; gamma 0.5, lam 1, values 0.2 and 0.4
    mask = torch.tensor([[1.0, 0.0, 1.0]])
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.2, 0.0, 0.4]])
    out = GAEAdvantage(GAEConfig(gamma=0.5, lam=1.0, whiten=False))(AdvantageInput(rewards, mask, 1, values=values))
    # A_2 = 1 - 0.4 = 0.6; A_0 = (0 + 0.5 * 0.4 - 0.2) + 0.5 * 0.6 = 0.3
    torch.testing.assert_close(out.advantages, torch.tensor([[0.3, 0.0, 0.6]]))


@pytest.mark.slow
def test_grpo_learns_a_two_step_episode(registry, tmp_path):
    """Each of two actions should be the task's target token twice; step rewards give the share of
    hits (0.5 per perfect action), the outcome 1.0 for two perfect actions: at most 2.0 per episode.

    A uniform policy earns 1/16 per episode and solves one in 16**4. The run is chaotic (another
    CPU's kernels or thread count give another trajectory), and this toy learns its four tasks one
    by one, each then liable to be forgotten: so the test judges the mean of the last 10 steps
    (640 episodes), not a step's peak, with a setting that learns robustly (16 samples a group,
    lr 1e-2: 2e-2 collapses groups onto one wrong answer). Over 32 trajectories (seeds, policy
    inits, 1 and 2 threads) the last 10 steps' mean reward was 0.95..1.65 and pass rate 0.25..0.73,
    against 0.7 and 0.15 here; an update that misses either action cannot pass (< 1/256 passed).
    """
    trainer = _trainer(
        registry,
        tmp_path,
        {"group_size": 16},
        environment=lambda: ToyEpisodeEnvironment(turns=2),
        steps=40,
        lr=1e-2,
        max_turns=2,
        max_new_tokens=2,
        max_observation_tokens=1,
    )
    history = _fit(trainer)
    rewards = [m["reward_mean"] for m in history]
    passed = [m["pass_rate"] for m in history]
    assert rewards[0] < 0.2 and passed[0] < 0.1
    late_reward, late_passed = sum(rewards[-10:]) / 10, sum(passed[-10:]) / 10
    assert late_reward > 0.7 and late_passed > 0.15, (late_reward, late_passed, rewards, passed)


def test_max_turns_without_an_environment_is_a_config_error(registry, tmp_path):
    with pytest.raises(ConfigError, match="max_turns=3 needs an environment"):
        _trainer(registry, tmp_path, max_turns=3)


def test_episode_rewards_reach_the_trainer_metrics(registry, tmp_path):
    trainer = _trainer(
        registry,
        tmp_path,
        environment=lambda: ToyEpisodeEnvironment(turns=2),
        steps=1,
        max_turns=2,
        max_observation_tokens=1,
    )
    (metrics,) = _fit(trainer)
    assert 0.0 <= metrics["reward_mean"] <= 2.0 and metrics["tokens"] > 0
    assert not math.isnan(metrics["loss"])
