"""One rendering of an agent's conversation for SFT, RL episodes and agent evaluation.

A reference trajectory is played in the real repository environment (local sandbox) on a generated
repository task; then the three consumers see it: SFT's per-episode example, the RL trainer's
episode row (the engine's tokens plus the observations, token-in/token-out) and agent evaluation's
text history. Each must equal the tokenizer's chat template over the episode's messages, or what SFT
taught would be asked for in a context the policy never saw.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
from codemoe.core import build_plugin_manager, build_registry
from codemoe.core.chat import ChatFormat
from codemoe.core.contracts import SamplingParams, play, repository_task
from codemoe.core.tokenizer import train_tokenizer


@pytest.fixture(scope="module")
def played(tmp_path_factory):
    """A synthetic-repos task, its oracle episode, and a tokenizer trained on the transcript."""
    registry = build_registry(build_plugin_manager())
    suite = registry.build("suite", {"name": "synthetic-repos", "seed": 3, "train_tasks": 9, "heldout_tasks": 9,
                                     "path": str(tmp_path_factory.mktemp("repos"))})
    task = next(t for t in suite.tasks("train") if t.family == "multi-round-error-correction")  # a failing run mid-way
    executor = registry.build("executor", {"name": "local", "workers": 1})
    env = registry.build("environment", {"name": "repo", "step_budget": 20}, executor=executor)
    episode = play(env, repository_task(task), registry.build("scripted_agent", "oracle", task=repository_task(task)))
    assert episode.resolved
    tokenizer = train_tokenizer([m["content"] for m in episode.messages], 512)
    yield SimpleNamespace(registry=registry, task=task, executor=executor, episode=episode, tokenizer=tokenizer)
    executor.close()


def _rendered(tokenizer, messages) -> list[int]:
    """The template's tokens for ``messages`` up to the end of the last action (its end-of-sequence token)."""
    last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    text = tokenizer.apply_chat_template(messages[: last + 1], tokenize=False)
    close = ChatFormat(tokenizer).close  # "<|eos|>\n": the tokens after the eos are not the policy's
    return list(tokenizer.encode(text[: len(text) - len(close) + len(tokenizer.eos_token)]))


def test_an_observation_turn_extends_the_history_as_the_template_renders_the_conversation(played):
    tokenizer, messages = played.tokenizer, played.episode.messages
    chat = ChatFormat(tokenizer)
    ids = list(tokenizer.encode(chat.prompt(messages[:2])))
    for i in range(2, len(messages) - 1, 2):
        action = [*tokenizer.encode(messages[i]["content"]), tokenizer.eos_token_id]  # as the engine ends it
        turn = chat.observation(messages[i + 1]["content"], action_token_ids=action)
        ids += action + list(tokenizer.encode(turn.text)) + list(tokenizer.encode(turn.tail))
        whole = tokenizer.apply_chat_template(messages[: i + 2], tokenize=False, add_generation_prompt=True)
        assert ids == list(tokenizer.encode(whole)), f"after message {i + 1}"
    # an action known only as text (special tokens stripped) gets the whole close written out
    text_turn = chat.observation("x")
    assert text_turn.text.startswith(tokenizer.eos_token) and not chat.observation(
        "x", action_token_ids=[5, tokenizer.eos_token_id]).text.startswith(tokenizer.eos_token)


def test_sft_learns_every_action_of_an_episode_in_the_tokens_the_trainer_sees(played):
    from codemoe.rl.sft import episode_examples, trajectory_pairs

    tokenizer, messages = played.tokenizer, played.episode.messages
    record = {"messages": messages, "resolved": True}
    (example,) = episode_examples(tokenizer, [record], max_tokens=100_000)
    assert example.prompt_ids + example.completion_ids == _rendered(tokenizer, messages)
    actions = [m["content"] for m in messages if m["role"] == "assistant"]
    learned = [t for t, m in zip(example.completion_ids, example.loss_mask, strict=True) if m]
    assert learned == [t for a in actions for t in [*tokenizer.encode(a), tokenizer.eos_token_id]]
    # the per-turn examples are the same targets, each after the same context
    for (prompt, completion), k in zip(trajectory_pairs(tokenizer, [record]), range(len(actions)), strict=True):
        assert completion == actions[k]
        context = tokenizer.encode(prompt)
        assert (example.prompt_ids + example.completion_ids)[: len(context)] == context
    assert episode_examples(tokenizer, [{**record, "resolved": False}], max_tokens=100) == []
    (cut,) = episode_examples(tokenizer, [record], max_tokens=40)
    assert len(cut.completion_ids) == len(cut.loss_mask) == 40


class _Replay:
    """An engine that answers each episode's k-th call with the k-th reference action, in the tokenizer's
    tokens with the end-of-sequence token, as the embedded engine ends a sample."""

    def __init__(self, tokenizer, actions: list[str]) -> None:
        self.tokenizer, self.actions, self.prompts, self._lock = tokenizer, actions, [], threading.Lock()

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text))

    def generate(self, prompts, params):
        with self._lock:
            outputs = []
            for prompt in prompts:
                self.prompts.append(list(prompt))
                turn = sum(len(p) < len(prompt) and list(prompt[: len(p)]) == p for p in self.prompts[:-1])
                text = self.actions[min(turn, len(self.actions) - 1)]
                ids = [*self.encode(text), self.tokenizer.eos_token_id]
                sample = SimpleNamespace(token_ids=ids, text=text, logprobs=[-0.1] * len(ids), routing=None)
                outputs.append(SimpleNamespace(prompt_token_ids=list(prompt), samples=[sample] * params.n))
            return outputs


def test_an_rl_episode_row_is_the_template_rendering_of_its_conversation(played):
    from codemoe.rl.episodes import run_episodes
    from codemoe.rl.repo_episodes import RepoEpisodes

    tokenizer, messages, registry = played.tokenizer, played.episode.messages, played.registry
    actions = [m["content"] for m in messages if m["role"] == "assistant"]
    recipe = registry.build("reward", {"name": "weighted_sum", "components": {"task_complete": {"weight": 1.0}}})
    chat = ChatFormat(tokenizer)
    make = lambda: RepoEpisodes(  # noqa: E731
        registry.build("environment", {"name": "repo", "step_budget": 20}, executor=played.executor),  # as played
        recipe, chat)
    rollouts = run_episodes(_Replay(tokenizer, actions), make, [played.task], SamplingParams(n=1, max_new_tokens=4096),
                            max_turns=len(actions), max_observation_tokens=100_000, pad_id=tokenizer.pad_token_id)
    row = rollouts.completions[0, : int(rollouts.mask[0].nonzero().max()) + 1].tolist()
    assert rollouts.prompt_ids[0] + row == _rendered(tokenizer, messages)
    assert bool(rollouts.passed[0])

    # a capped observation keeps its tail: the next assistant turn is still opened
    short = lambda: RepoEpisodes(  # noqa: E731
        registry.build("environment", {"name": "repo", "step_budget": 2}, executor=played.executor), recipe, chat)
    rollouts = run_episodes(_Replay(tokenizer, actions[:2]), short, [played.task], SamplingParams(n=1, max_new_tokens=4096),
                            max_turns=2, max_observation_tokens=24, pad_id=tokenizer.pad_token_id)
    first = len(tokenizer.encode(actions[0])) + 1
    observation = rollouts.completions[0, first : first + 24].tolist()
    assert observation[-len(tokenizer.encode(chat.tail)):] == list(tokenizer.encode(chat.tail))


def test_agent_evaluation_prompts_are_the_template_rendering_of_the_conversation(played):
    from codemoe.evals.agent_eval import run_agent_episodes

    tokenizer, messages, registry = played.tokenizer, played.episode.messages, played.registry
    actions = [m["content"] for m in messages if m["role"] == "assistant"]
    seen: list[str] = []

    def generate(prompts, n, turn):
        seen.extend(prompts)
        return [[actions[turn]] * n for _ in prompts]

    make = lambda: registry.build("environment", {"name": "repo", "step_budget": 20},  # noqa: E731
                                  executor=played.executor)
    (graded,) = run_agent_episodes(generate, make, [played.task], samples=1, max_turns=len(actions),
                                   chat=ChatFormat(tokenizer))
    assert graded.passed
    for k, prompt in enumerate(seen):
        upto = messages[: 2 + 2 * k]
        assert prompt == tokenizer.apply_chat_template(upto, tokenize=False, add_generation_prompt=True), f"turn {k}"

