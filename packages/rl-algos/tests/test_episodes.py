"""Multi-step agent episodes: their rollout layout, credit assignment over actions, and learning."""

from __future__ import annotations

import math
import threading
import time
from types import SimpleNamespace

import pytest
import torch
from codemoe.core.contracts import SamplingParams
from codemoe.core.errors import ConfigError
from codemoe.rl.advantages import AdvantageInput, GAEAdvantage, GAEConfig, ReinforcePPAdvantage, ReinforcePPConfig
from codemoe.rl.episodes import EpisodeError, Turn, episode_seed, run_episodes
from codemoe.rl.rollout import Score
from rl_toy import ToyEpisodeEnvironment
from test_trainer import TIMING, _fit, _trainer


class ScriptedEngine:
    """Answers turn ``k`` of every episode with ``actions[k]`` (log-prob -0.5 per token), as a real
    engine would: from the prompt alone, whichever calls and threads the prompts come in. A prompt's
    turn is the number of distinct prompts answered before that are proper prefixes of it (its own
    episode's earlier turns; the episodes a test runs act alike, so siblings' prompts are the same)."""

    def __init__(self, actions: list[list[int]], texts: list[str] | None = None) -> None:
        self.actions = actions
        self.texts = texts or [f"a{k + 1}" for k in range(len(actions))]
        self.prompts: list[list[list[int]]] = []  # every call's prompts, in call order
        self._answered: set[tuple[int, ...]] = set()
        self._lock = threading.Lock()

    def generate(self, prompts, params):
        with self._lock:
            self.prompts.append([list(p) for p in prompts])
            outputs = []
            for prompt in prompts:
                key = tuple(prompt)
                turn = sum(len(seen) < len(key) and key[: len(seen)] == seen for seen in self._answered)
                tokens = self.actions[turn]
                sample = SimpleNamespace(token_ids=tokens, text=self.texts[turn], logprobs=[-0.5] * len(tokens))
                outputs.append(SimpleNamespace(prompt_token_ids=list(prompt), samples=[sample] * params.n))
            self._answered.update(tuple(p) for p in prompts)
            return outputs


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
    assert engine.prompts[0] == [[3, 4]] and sorted(engine.prompts[1:]) == [[[3, 4, 5, 6, 9]]] * 2
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


class VaryingEnvironment:
    """A toy whose episodes end at different turns, with steps that take different times.

    The episode ends after an action whose first token is even, or at the fifth turn; each step
    sleeps 0-3 ms by the action, so episodes run at their own pace and the threads interleave
    differently from run to run. Observation: the action's first token mod 5, plus 1.
    """

    def __init__(self) -> None:
        self.turns = 0

    def reset(self, task) -> list[int]:
        return list(task.prompt)

    def step(self, action, token_ids) -> Turn:
        self.turns += 1
        time.sleep(0.001 * (token_ids[0] % 4))
        return Turn(observation=[token_ids[0] % 5 + 1], reward=0.1 * self.turns, done=token_ids[0] % 2 == 0)

    def outcome(self) -> Score:
        return Score(reward=float(self.turns), passed=self.turns > 1)


class GenerateOnly:
    """An engine seen through the contract alone: ``generate`` (no ``submit`` / ``collect`` to queue with)."""

    def __init__(self, engine) -> None:
        self.engine = engine

    def generate(self, prompts, params):
        return self.engine.generate(prompts, params)


def _varying(registry, generate_only: bool = False, **options):
    from rl_toy import tiny_policy, toy_tasks

    engine = registry.build("engine", {"name": "embedded"}, model=tiny_policy(), tokenizer=None)
    engine = GenerateOnly(engine) if generate_only else engine
    params = SamplingParams(n=2, max_new_tokens=2, seed=7, ignore_eos=True)
    tasks = toy_tasks(6, prompt_len=3)
    rollouts = run_episodes(
        engine, VaryingEnvironment, tasks, params, max_turns=5, max_observation_tokens=1, pad_id=0, **options
    )
    return tasks, rollouts


def test_concurrent_episodes_give_the_rollouts_of_one_at_a_time_token_for_token(registry):
    """Every way of running the episodes (all live at once, one turn of one episode at a time, one
    group at a time refilled as episodes end, each call sent at once, calls through ``generate``
    rather than the engine's queue) gives the same rows in the same order."""
    tasks, alone = _varying(registry, concurrent=False)
    runs = {
        "all live": _varying(registry)[1],
        "one group live": _varying(registry, max_live_episodes=2)[1],
        "no admission window": _varying(registry, admission_window_s=0.0)[1],
        "generate calls only": _varying(registry, generate_only=True)[1],
    }
    lengths = alone.mask.sum(-1)
    assert len(set(lengths.tolist())) > 2  # episodes ended at different turns: slots were refilled unevenly
    assert alone.prompt_ids == [t.prompt for t in tasks for _ in range(2)]  # grouped by task, in task order
    for name, rollouts in runs.items():
        assert rollouts.prompt_ids == alone.prompt_ids, name
        assert torch.equal(rollouts.completions, alone.completions), name
        assert torch.equal(rollouts.mask, alone.mask), name
        assert torch.equal(rollouts.rewards, alone.rewards) and torch.equal(rollouts.step_rewards, alone.step_rewards)
        # the same tokens' log-probs, computed in batches of other shapes: fp32 rounding only
        torch.testing.assert_close(rollouts.engine_logp, alone.engine_logp, atol=1e-5, rtol=0, equal_nan=True)


class MeetingEnvironment:
    """Each step waits at a barrier with ``parties`` steps of other episodes: a step completes only
    when that many steps are in flight at once (10 s timeout, then BrokenBarrierError)."""

    def __init__(self, barrier: threading.Barrier) -> None:
        self.barrier = barrier

    def reset(self, task) -> list[int]:
        return [3, 4]

    def step(self, action, token_ids) -> Turn:
        self.barrier.wait()
        return Turn(observation=[9], done=True)

    def outcome(self) -> Score:
        return Score(reward=1.0, passed=True)


def test_the_steps_of_live_episodes_run_at_the_same_time():
    barrier = threading.Barrier(4, timeout=10)
    engine = ScriptedEngine([[5]])
    rollouts = run_episodes(
        engine, lambda: MeetingEnvironment(barrier), ["a", "b"], SamplingParams(n=2, max_new_tokens=1),
        max_turns=1, max_observation_tokens=1, pad_id=0,
    )
    assert rollouts.rewards.tolist() == [1.0] * 4


class GatedEnvironment:
    """Task ``long``'s episodes step only once ``gate`` is open; the others end after one step,
    counting themselves. ``live`` tracks episodes between reset and outcome."""

    def __init__(self, state: dict) -> None:
        self.state, self.task = state, None

    def reset(self, task) -> list[int]:
        self.task = task
        with self.state["lock"]:
            self.state["live"] += 1
            self.state["peak"] = max(self.state["peak"], self.state["live"])
        return [3, 4]

    def step(self, action, token_ids) -> Turn:
        if self.task == "long" and not self.state["gate"].wait(10):
            raise TimeoutError("the short tasks never finished while the long episodes were live")
        return Turn(observation=[9], done=True)

    def outcome(self) -> Score:
        with self.state["lock"]:
            self.state["live"] -= 1
            if self.task != "long":
                self.state["short_done"] += 1
                if self.state["short_done"] == 6:
                    self.state["gate"].set()
        return Score(reward=1.0, passed=True)


def test_ended_episodes_free_their_slots_while_a_long_episode_runs():
    """With room for two groups, the long task's group holds one slot pair while the three short
    tasks pass through the other one after another; at most four episodes are ever live."""
    state = {"lock": threading.Lock(), "gate": threading.Event(), "live": 0, "peak": 0, "short_done": 0}
    tasks = ["long", "s1", "s2", "s3"]
    rollouts = run_episodes(
        ScriptedEngine([[5]]), lambda: GatedEnvironment(state), tasks, SamplingParams(n=2, max_new_tokens=1),
        max_turns=1, max_observation_tokens=1, pad_id=0, max_live_episodes=4,
    )
    assert state["peak"] == 4 and state["live"] == 0
    assert rollouts.rewards.tolist() == [1.0] * 8 and rollouts.mask.sum().item() == 8


class FailingEnvironment(ScriptedEnvironment):
    """ScriptedEnvironment whose second step raises for task ``bad``, sample-independent."""

    def __init__(self) -> None:
        super().__init__()
        self.task = None
        self.closed = False

    def reset(self, task) -> list[int]:
        self.task = task
        return super().reset(task)

    def step(self, action, token_ids) -> Turn:
        if self.task == "bad" and self.turn == 1:
            raise OSError("the sandbox went away")
        return super().step(action, token_ids)

    def close(self) -> None:
        self.closed = True


def test_a_failing_step_names_its_task_and_turn_and_the_other_episodes_are_kept():
    made: list[FailingEnvironment] = []

    def make() -> FailingEnvironment:
        made.append(FailingEnvironment())
        return made[-1]

    engine = ScriptedEngine([[5, 6], [7, 8, 11]])
    with pytest.warns(RuntimeWarning, match=r"(?s)2 of 6 episodes failed.*'bad'.*turn 2: the environment raised OSError"):
        rollouts = run_episodes(
            engine, make, ["good", "bad", "fine"], SamplingParams(n=2, max_new_tokens=3),
            max_turns=3, max_observation_tokens=4, pad_id=0,
        )
    assert rollouts.rewards.tolist() == pytest.approx([1.3, 1.3, 0.0, 0.0, 1.3, 1.3])  # groups in task order
    assert rollouts.components[2] == {"episode_error": 1.0}
    assert rollouts.mask[2:4].sum() == 0  # the failed group trains nothing
    assert rollouts.mask[0].sum() == 5 and rollouts.mask[4].sum() == 5  # the others are whole
    assert [env.closed for env in made if env.task == "bad"] == [True, True]


def test_when_every_episode_fails_the_error_lists_them():
    with pytest.raises(EpisodeError, match=r"(?s)every one of the 2 episodes failed.*'bad'.*sample 1, turn 2"):
        run_episodes(
            ScriptedEngine([[5, 6], [7]]), FailingEnvironment, ["bad"], SamplingParams(n=2, max_new_tokens=3),
            max_turns=3, max_observation_tokens=4, pad_id=0,
        )


def test_a_cap_below_the_group_size_is_a_config_error():
    with pytest.raises(ConfigError, match="'max_live_episodes' is 3, below the group size 4"):
        run_episodes(
            ScriptedEngine([[5]]), ScriptedEnvironment, ["task"], SamplingParams(n=4, max_new_tokens=1),
            max_turns=1, max_observation_tokens=1, pad_id=0, max_live_episodes=3,
        )


def test_episode_seeds_depend_on_task_sample_and_turn_only():
    seeds = {episode_seed(5, task, sample, turn) for task in range(3) for sample in (None, 0, 1) for turn in range(3)}
    assert len(seeds) == 27 and all(0 <= s < 2**62 for s in seeds)
    assert episode_seed(5, 1, 0, 2) == episode_seed(5, 1, 0, 2) != episode_seed(6, 1, 0, 2)
    assert episode_seed(None, 1, 0, 2) is None


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


def test_micro_batches_sorted_by_length_train_like_one_forward(registry, tmp_path):
    """``micro_batch_size: 3``: each minibatch's rows (episodes that ended at different turns, so rows
    of different lengths) run in length-sorted forwards of 3 whose gradients make one step; losses,
    KL, clipping, IS statistics, entropies and gradient norms match one forward step after step, and
    so do the trained weights. float64 as in the shared-prompt test (the forwards sum in another
    order; training amplifies that), the balance term off (each forward's own routing is by design)."""
    algo = {"kl_coef": 0.05, "epochs": 2, "minibatches": 2, "balance_coef": 0.0, "group_size": 4}
    options = {"steps": 3, "max_turns": 5, "max_new_tokens": 2, "max_observation_tokens": 1, "prompt_len": 3}
    trainers, parts = {}, []
    for size in (0, 3):
        trainer = _trainer(registry, tmp_path / str(size), algo, environment=VaryingEnvironment,
                           dtype=torch.float64, micro_batch_size=size, **options)
        if size:
            def recorded(rollouts, rows, split=trainer._micro_batches):
                parts.append(split(rollouts, rows))
                return parts[-1]

            trainer._micro_batches = recorded
        trainers[size] = (trainer, _fit(trainer))
    (one, one_history), (micro, micro_history) = trainers[0], trainers[3]
    # the split really happened: a minibatch's 8 rows in forwards of 3, 3 and 2, the reference
    # policy's forward over the step's 16 rows in forwards of 3 too
    sizes = [[len(p) for p in split] for split in parts]
    assert [3, 3, 2] in sizes and [3, 3, 3, 3, 3, 1] in sizes and all(sum(s) in (8, 16) for s in sizes)
    for a, b in zip(one_history, micro_history):
        routing = {k for k in a if k.startswith(("moe/", "expert_load/")) or k == "balance_loss"}
        bad = {k: (a[k], b[k]) for k in set(a) - TIMING - routing if abs(a[k] - b[k]) > 1e-4 * max(1.0, abs(a[k]))}
        assert not bad, bad
    # Adam divides by the root of each gradient's second moment, so an element whose gradient is
    # rounding noise in both runs moves by noise-driven steps: 4e-7 apart after 12 updates measured,
    # where a wrong gradient moves weights by the learning rate's scale (1e-2)
    for name, value in one.policy.state_dict().items():
        torch.testing.assert_close(micro.policy.state_dict()[name], value, rtol=0, atol=1e-5)


def test_a_negative_micro_batch_size_is_a_config_error(registry, tmp_path):
    with pytest.raises(ConfigError, match="micro_batch_size: -1 is negative"):
        _trainer(registry, tmp_path, micro_batch_size=-1)
