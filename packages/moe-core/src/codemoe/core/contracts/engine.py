"""The engine contract: what every generation engine (kind ``engine``) takes and gives.

An engine turns prompts into samples. The RL trainer and the evals call only what is defined here,
so the embedded engine, the OpenAI client and the SGLang client (all in ``codemoe.serving``) are
interchangeable, and a plugin's engine is one more.

Log-prob convention (the same for every engine codemoe builds): ``Sample.logprobs[i]`` is
``log_softmax(logits / temperature)[token_ids[i]]`` over the whole vocabulary, at the position
that produced token ``i``; top-k / top-p truncation is not renormalised into it, so it is exactly
what a trainer recomputes with a teacher-forced forward at the same temperature. With
``temperature == 0`` (greedy) the temperature is taken as 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from codemoe.core.errors import CodemoeError

__all__ = [
    "ContextLengthError",
    "Engine",
    "EngineError",
    "GenerationOutput",
    "RequestError",
    "Sample",
    "SamplingParams",
]


class EngineError(CodemoeError, RuntimeError):
    """An engine cannot serve: weights do not fit the model, a remote server fails, ..."""


class RequestError(CodemoeError, ValueError):
    """A generation request is malformed (bad sampling parameter, empty prompt, ...)."""


class ContextLengthError(RequestError):
    """Prompt plus ``max_new_tokens`` exceed the model's context; nothing is truncated silently."""


@dataclass
class SamplingParams:
    """How to sample; one set applies to every prompt of a ``generate`` call."""

    n: int = 1  # samples per prompt (a GRPO group); the prompt is computed once for all of them
    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0  # nucleus sampling: keep the smallest set of tokens with this much mass
    top_k: int = 0  # keep the k most likely tokens; 0 keeps all
    max_new_tokens: int = 128  # generated tokens per sample, end-of-sequence token included
    stop: list[str] = field(default_factory=list)  # stop strings; the text ends before them
    seed: int | None = None  # same seed, same prompts -> same samples; None draws a fresh seed
    ignore_eos: bool = False  # keep generating past the end-of-sequence token (benchmarks)

    def validate(self) -> None:
        """Raise :class:`RequestError` naming the first bad field."""
        checks = [
            (self.n >= 1, "n", "must be at least 1"),
            (self.temperature >= 0, "temperature", "must be >= 0 (0 is greedy)"),
            (0 < self.top_p <= 1, "top_p", "must be in (0, 1]"),
            (self.top_k >= 0, "top_k", "must be >= 0 (0 keeps every token)"),
            (self.max_new_tokens >= 1, "max_new_tokens", "must be at least 1"),
            (all(isinstance(s, str) and s for s in self.stop), "stop", "must be non-empty strings"),
        ]
        for ok, name, rule in checks:
            if not ok:
                raise RequestError(f"sampling parameter '{name}' {rule}, got {getattr(self, name)!r}")


@dataclass
class Sample:
    """One generated continuation.

    ``routing`` is set only for models with codemoe MoE blocks: an int tensor
    ``[len(token_ids), num_moe_layers, k]``; row ``i`` holds the experts chosen at the position
    that produced token ``i`` (the same position as ``logprobs[i]``), for routing replay.
    """

    token_ids: list[int]
    text: str
    logprobs: list[float]
    finish_reason: str  # "stop" (end-of-sequence token or stop string), "length", or "abort" (cancelled)
    routing: Any = None


@dataclass
class GenerationOutput:
    """The samples of one prompt.

    ``prompt_routing`` (codemoe MoE models only) is ``[len(prompt_token_ids), layers, k]``: the
    experts chosen at each prompt position; its last row equals every sample's ``routing[0]``.
    """

    prompt_token_ids: list[int]
    samples: list[Sample]
    prompt_routing: Any = None


@runtime_checkable
class Engine(Protocol):
    """What every engine provides."""

    def generate(self, prompts: list[str] | list[list[int]], params: SamplingParams) -> list[GenerationOutput]:
        """One :class:`GenerationOutput` per prompt, in order, each with ``params.n`` samples."""
        ...

    def update_weights(self, state_dict: dict[str, Any] | None = None, path: str | None = None) -> None:
        """Load new policy weights from a state dict or a checkpoint directory."""
        ...

    def health(self) -> dict[str, Any]:
        """A JSON-able status: ``{"status": "ok", ...}`` when the engine can serve."""
        ...
