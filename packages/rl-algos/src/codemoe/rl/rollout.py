"""Rollouts as tensors: what the engine sampled and the sandbox scored, padded into ``[B, T]``.

Rows come in groups of ``G`` consecutive samples of one prompt. ``T`` is the sampling budget
``max_new_tokens`` for every batch, so constant-normaliser aggregations see the same horizon
everywhere and chunks from different ranks line up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

__all__ = ["Rollouts", "Score", "build_rollouts"]


@dataclass
class Score:
    """What the reward side says about one sample."""

    reward: float  # the recipe's total
    passed: bool = False  # the sample solved its task (counts toward the pass rate)
    components: dict[str, float] = field(default_factory=dict)  # per-component values (and extra reward metrics), for the logs


@dataclass
class Rollouts:
    """One rank's rollouts of one step."""

    prompt_ids: list[list[int]]  # B prompts (each repeated G times)
    completions: Tensor  # [B, T] sampled token ids, padded with pad_id
    mask: Tensor  # [B, T] float, 1.0 on sampled tokens
    engine_logp: Tensor  # [B, T] the engine's log-probs of the sampled tokens (NaN where it gave none)
    rewards: Tensor  # [B] recipe totals
    passed: Tensor  # [B] bool
    group_size: int
    texts: list[str] = field(default_factory=list)
    components: list[dict[str, float]] = field(default_factory=list)
    # per row [P + n - 1, layers, k]: the experts the engine used at every position it ran (prompt,
    # then each sampled token but the last), for routing replay; None when the engine gave none
    routes: list[Tensor] | None = None
    # [B, T] per-token rewards already placed (multi-step episodes: each step reward on its action's
    # last token, the outcome on the last action's); None: the outcome goes on the last valid token
    step_rewards: Tensor | None = None

    @property
    def groups(self) -> int:
        return len(self.prompt_ids) // self.group_size

    def zero_signal(self) -> Tensor:
        """``[groups]`` bool: every sample of the group got the same reward."""
        grouped = self.rewards.view(-1, self.group_size)
        return (grouped == grouped[:, :1]).all(-1)

    def rows(self, groups: Tensor) -> Tensor:
        """Row indices ``[len(groups) * G]`` of the given group indices."""
        g = self.group_size
        return (groups.unsqueeze(-1) * g + torch.arange(g)).flatten()

    def select(self, groups: Tensor) -> Rollouts:
        """The rollouts of the given groups, in that order."""
        rows = self.rows(groups).tolist()
        return Rollouts(group_size=self.group_size, **{name: _rows(getattr(self, name), rows) for name in _ROW_FIELDS})

    def to(self, device: torch.device) -> Rollouts:
        """The same rollouts with every tensor (routes included) on ``device``, the trainer's."""
        return Rollouts(group_size=self.group_size, **{name: _to(getattr(self, name), device) for name in _ROW_FIELDS})

    @staticmethod
    def concat(parts: list[Rollouts]) -> Rollouts:
        """Rows of every part, in order."""
        joined = {name: _join([getattr(p, name) for p in parts]) for name in _ROW_FIELDS}
        return Rollouts(group_size=parts[0].group_size, **joined)


# Fields with one entry per row (everything but group_size).
_ROW_FIELDS = (
    "prompt_ids",
    "completions",
    "mask",
    "engine_logp",
    "rewards",
    "passed",
    "texts",
    "components",
    "routes",
    "step_rewards",
)


def _rows(value: Any, rows: list[int]) -> Any:
    if value is None:
        return None
    return value[rows] if isinstance(value, Tensor) else [value[i] for i in rows]


def _to(value: Any, device: torch.device) -> Any:
    if isinstance(value, Tensor):
        return value.to(device)
    if isinstance(value, list) and value and isinstance(value[0], Tensor):
        return [v.to(device) for v in value]
    return value


def _join(values: list[Any]) -> Any:
    if any(v is None for v in values):
        return None
    return torch.cat(values) if isinstance(values[0], Tensor) else [x for v in values for x in v]


def build_rollouts(outputs: list[Any], scores: list[Score], horizon: int, pad_id: int) -> Rollouts:
    """Engine outputs (one per prompt, ``n`` samples each) and their scores -> padded tensors."""
    rows = [(out.prompt_token_ids, sample) for out in outputs for sample in out.samples]
    cut = [sample.token_ids[:horizon] for _, sample in rows]
    completions, mask, engine_logp = padded_rows(
        cut, [[1.0] * len(t) for t in cut], [sample.logprobs[:horizon] for _, sample in rows], horizon, pad_id
    )
    return Rollouts(
        prompt_ids=[list(prompt) for prompt, _ in rows],
        completions=completions,
        mask=mask,
        engine_logp=engine_logp,
        group_size=len(outputs[0].samples),
        texts=[sample.text for _, sample in rows],
        routes=_engine_routes(outputs, horizon),
        **score_fields(scores),
    )


def padded_rows(
    tokens: list[list[int]], mask: list[list[float]], logprobs: list[list[float]], width: int, pad_id: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-row completion tokens, loss mask and engine log-probs (none: NaN) as ``[B, width]``
    tensors: (completions padded with ``pad_id``, mask padded with 0, log-probs padded with NaN)."""
    b = len(tokens)
    completions = torch.full((b, width), pad_id, dtype=torch.long)
    padded_mask = torch.zeros(b, width)
    engine_logp = torch.full((b, width), float("nan"))
    for i, (ids, keep, logp) in enumerate(zip(tokens, mask, logprobs)):
        completions[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        padded_mask[i, : len(keep)] = torch.tensor(keep, dtype=torch.float32)
        if logp:
            engine_logp[i, : len(logp)] = torch.tensor(logp, dtype=torch.float32)
    return completions, padded_mask, engine_logp


def score_fields(scores: list[Score]) -> dict[str, Any]:
    """The :class:`Rollouts` fields that come from the rows' scores."""
    return {
        "rewards": torch.tensor([s.reward for s in scores], dtype=torch.float32),
        "passed": torch.tensor([s.passed for s in scores], dtype=torch.bool),
        "components": [dict(s.components) for s in scores],
    }


def _engine_routes(outputs: list[Any], horizon: int) -> list[Tensor] | None:
    """Per row, the experts of every position the engine ran: the prompt, then each sampled token
    that was fed back (all but the last); None when the engine reports no routing."""
    if any(out.prompt_routing is None for out in outputs):
        return None
    return [
        torch.cat([out.prompt_routing, sample.routing[1 : min(len(sample.token_ids), horizon)]])
        for out in outputs
        for sample in out.samples
    ]
