"""Toy-task helpers shared by the tests and the scripts they start (torchrun, SIGKILL runs): a tiny
MoE policy, a sampling engine of the tests' own (each prompt sampled from a seed mixed with the
prompt, so samples do not depend on how prompts are split over ranks), a toy task and its scorer."""

from __future__ import annotations

import copy
import zlib
from dataclasses import dataclass
from types import SimpleNamespace

import torch
from codemoe.core.models import build_model
from codemoe.core.models.presets import load_preset
from codemoe.rl.rollout import Score

VOCAB = 16


def tiny_policy(seed: int = 0) -> torch.nn.Module:
    """A codemoe MoE causal LM: 2 layers, 4 experts top-2, over a 16-token vocabulary."""
    torch.manual_seed(seed)
    spec = {**load_preset("micro"), "vocab_size": VOCAB, "moe_intermediate_size": 32, "max_position_embeddings": 64}
    return build_model(spec).eval()


class ToyEngine:
    """Samples ``n`` continuations per prompt from its own copy of the policy; no stop tokens."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = copy.deepcopy(model)
        self.calls = 0

    def update_weights(self, state_dict=None, path=None) -> None:
        self.model.load_state_dict(state_dict)

    @torch.no_grad()
    def generate(self, prompts, params):
        self.calls += 1
        outputs = []
        for prompt in prompts:
            key = zlib.crc32(repr((params.seed, list(prompt))).encode())
            gen = torch.Generator().manual_seed(key)
            ids = torch.tensor([list(prompt)] * params.n)
            logps = []
            for _ in range(params.max_new_tokens):
                logits = self.model(input_ids=ids).logits[:, -1].float() / params.temperature
                logprobs = torch.log_softmax(logits, -1)
                token = torch.multinomial(logprobs.exp(), 1, generator=gen)
                logps.append(logprobs.gather(-1, token))
                ids = torch.cat([ids, token], dim=1)
            completion = ids[:, len(prompt) :]
            lp = torch.cat(logps, dim=1)
            samples = [
                SimpleNamespace(
                    token_ids=completion[i].tolist(), text="", logprobs=lp[i].tolist(), finish_reason="length"
                )
                for i in range(params.n)
            ]
            outputs.append(SimpleNamespace(prompt_token_ids=list(prompt), samples=samples, prompt_routing=None))
        return outputs


class SharedToyEngine(ToyEngine):
    """A ToyEngine standing for one server behind every rank (``serves_every_rank``, as the remote
    engines declare): each update is logged to ``<log>-rank<R>.txt`` with the version it sets."""

    serves_every_rank = True

    def __init__(self, model: torch.nn.Module, log: str, rank: int) -> None:
        super().__init__(model)
        self.log, self.rank, self.weight_version = log, rank, None
        self.updates = 0

    def update_weights(self, state_dict=None, path=None) -> None:
        super().update_weights(state_dict, path)
        self.updates += 1
        self.weight_version = f"v{self.updates}"
        with open(f"{self.log}-rank{self.rank}.txt", "a") as fh:
            fh.write(f"update {self.weight_version}\n")

    def generate(self, prompts, params):
        with open(f"{self.log}-rank{self.rank}.txt", "a") as fh:
            fh.write(f"generate {self.weight_version}\n")
        return super().generate(prompts, params)


@dataclass
class ToyTask:
    """Prompt: one token. Goal: answer with the token after it, every time."""

    id: str
    prompt: list[int]
    target: int


def toy_tasks(count: int = 4, prompt_len: int = 1) -> list[ToyTask]:
    """``prompt_len`` > 1 repeats the prompt token (groups then share a prompt forward)."""
    return [ToyTask(id=f"toy-{i}", prompt=[i + 1] * prompt_len, target=(i + 2) % VOCAB) for i in range(count)]


def toy_scorer(tasks, outputs) -> list[Score]:
    """Reward: the fraction of completion tokens equal to the task's target (random policy: 1/16)."""
    scores = []
    for task, out in zip(tasks, outputs, strict=True):
        for sample in out.samples:
            hits = sum(t == task.target for t in sample.token_ids) / len(sample.token_ids)
            scores.append(Score(reward=hits, passed=hits == 1.0))
    return scores


class ToyEpisodeEnvironment:
    """A multi-step toy: each turn the policy should say the task's target token; ``turns`` turns.

    Step reward: the share of the action's tokens equal to the target. Observation: token 1 after a
    perfect action, token 2 otherwise (the policy sees how it did). Outcome: 1.0 (and passed) when
    every action was perfect, else 0.0.
    """

    def __init__(self, turns: int = 3) -> None:
        self.turns = turns
        self.task: ToyTask | None = None
        self.perfect: list[bool] = []

    def reset(self, task: ToyTask) -> list[int]:
        self.task, self.perfect = task, []
        return list(task.prompt)

    def step(self, action: str, token_ids: list[int]):
        from codemoe.rl.episodes import Turn

        assert self.task is not None
        hits = sum(t == self.task.target for t in token_ids) / max(len(token_ids), 1)
        self.perfect.append(hits == 1.0)
        return Turn(
            observation=[1 if hits == 1.0 else 2], reward=hits / self.turns, done=len(self.perfect) >= self.turns
        )

    def outcome(self) -> Score:
        solved = len(self.perfect) == self.turns and all(self.perfect)
        return Score(reward=1.0 if solved else 0.0, passed=solved)
