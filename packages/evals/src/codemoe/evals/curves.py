"""Reading training curves out of a run's ``metrics.jsonl``.

Trainers name their metrics; these functions find the usual ones by name so that reports work for
any trainer that follows the conventions:

- reward: ``reward_mean`` (else ``reward``);
- pass rate during training: ``pass_rate``; loss: ``loss`` (SFT's also ``token_acc`` and its ``phase``);
- the reward's spread: ``reward_std``; each reward component's mean: ``reward/<component>``;
- KL: ``kl`` (else the first key starting with ``kl``); entropy: ``entropy``;
- expert load: either one key ``expert_load`` holding ``[layers][experts]`` token fractions, or scalar
  keys whose name starts with ``expert_load`` and ends in ``<layer><sep><expert>`` numbers
  (``expert_load/3/7``, ``expert_load.l3.e7``, ``expert_load_layer3_expert7``).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["Series", "expert_load", "labels", "off_policy_stages", "read_metrics", "series"]

Series = tuple[list[int], list[float]]  # (steps, values)

_LOAD_KEY = re.compile(r"^expert_load\D*?(\d+)\D+(\d+)$")
_ALIASES = {
    "reward": ("reward_mean", "reward"),
    "pass_rate": ("pass_rate",),
    "kl": ("kl", "kl_mean"),
    "entropy": ("entropy", "entropy_mean"),
}


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The records of ``run_dir/metrics.jsonl`` (empty when there is none)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def series(records: Sequence[dict[str, Any]], quantity: str, stage: str | None = None) -> dict[str, Series]:
    """Per stage: the (steps, values) of ``quantity`` ('reward', 'pass_rate', 'kl', 'entropy' or a
    metric name), from records that have a step."""
    names = _ALIASES.get(quantity, (quantity,))
    out: dict[str, Series] = {}
    by_stage: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        if record.get("step") is not None and (stage is None or record.get("stage") == stage):
            by_stage[record["stage"]].append(record)
    for stage_id, rows in by_stage.items():
        for name in names:
            points = [(int(r["step"]), _number(r.get(name))) for r in rows]
            points = [(s, v) for s, v in points if v is not None]
            if points:
                out[stage_id] = ([s for s, _ in points], [v for _, v in points])
                break
    return out


def labels(records: Sequence[dict[str, Any]], key: str, stage: str) -> list[tuple[int, str]]:
    """(step, text) of a text metric of one stage, such as SFT's ``phase``, in record order."""
    return [
        (int(r["step"]), r[key])
        for r in records
        if r.get("stage") == stage and r.get("step") is not None and isinstance(r.get(key), str)
    ]


def expert_load(
    records: Sequence[dict[str, Any]], stage: str | None = None
) -> tuple[list[int], list[list[list[float]]]]:
    """Expert load over training: (steps, load[step][layer][expert]).

    With ``stage`` None: the stage that logged expert load most often (a trainer); when every stage
    logged it at most once (evaluations of successive checkpoints), all of them by step. Missing
    cells are 0.
    """
    by_stage: dict[str, list[tuple[int, list[list[float]]]]] = defaultdict(list)
    for record in records:
        if record.get("step") is None or (stage is not None and record.get("stage") != stage):
            continue
        grid = _load_grid(record)
        if grid is not None:
            by_stage[record["stage"]].append((int(record["step"]), grid))
    if not by_stage:
        return [], []
    busiest = max(by_stage.values(), key=len)
    points = busiest if len(busiest) > 1 else sorted((p for v in by_stage.values() for p in v), key=lambda p: p[0])
    return [s for s, _ in points], [g for _, g in points]


def _load_grid(record: dict[str, Any]) -> list[list[float]] | None:
    nested = record.get("expert_load")
    if isinstance(nested, list) and nested and all(isinstance(row, list) for row in nested):
        return [[float(v) for v in row] for row in nested]
    cells: dict[tuple[int, int], float] = {}
    for key, value in record.items():
        match = _LOAD_KEY.match(key)
        number = _number(value)
        if match and number is not None:
            cells[(int(match.group(1)), int(match.group(2)))] = number
    if not cells:
        return None
    layers = max(layer for layer, _ in cells) + 1
    experts = max(expert for _, expert in cells) + 1
    return [[cells.get((layer, e), 0.0) for e in range(experts)] for layer in range(layers)]


# An engine that is the trainer's policy gives its log-probs up to float error (2e-5 nats at most
# over the synchronous quickstart's 600 steps: another order of the same fp32 sums) and may flip a
# near-tied routing decision; a policy lag or another engine moves them by tenths of a nat.
GAP_NATS = 1e-3
AGREEMENT = 0.999


def off_policy_stages(records: Sequence[dict[str, Any]], *, gap_nats: float = GAP_NATS,
                      agreement_min: float = AGREEMENT) -> list[str]:
    """Stages whose rollouts were not all the trainer's own policy's: a policy lag was logged
    (``staleness_mean``), or the engine's log-probs or routing differ from the trainer's by more
    than float error (a gap over ``gap_nats``, or a share of routing decisions agreed under
    ``agreement_min``). The defaults hold for fp32 on one device; an engine in bf16, or another
    kernel library, has a float error of its own: pass its bounds."""
    lag, gap, agreement = (series(records, q) for q in ("staleness_mean", "logp_mismatch_max", "routing_agreement"))
    stages = dict.fromkeys([*lag, *gap, *agreement])
    return [
        sid for sid in stages
        if sid in lag
        or any(v > gap_nats for v in gap.get(sid, ([], []))[1])
        or any(v < agreement_min for v in agreement.get(sid, ([], []))[1])
    ]
