"""Fixtures of the evals tests: a plugin with stages that write known evaluations and curves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from codemoe.core import Hooks, build_plugin_manager, build_registry, hookimpl
from codemoe.evals.evaluate import write_evaluation
from codemoe.evals.passk import TaskOutcome
from codemoe.evals.summary import summarize


@dataclass
class KnownEvalConfig:
    """A stage that records an evaluation with a known pass rate (no model involved)."""

    solved: int = 10  # tasks whose samples all pass; the rest all fail
    tasks: int = 40
    samples: int = 4
    step: int = 0


class KnownEvalStage:
    def __init__(self, config: KnownEvalConfig) -> None:
        self.config = config

    def run(self, ctx: Any, stage: Any) -> dict[str, Any]:
        c = self.config
        outcomes = [
            TaskOutcome(f"t{i}", "even" if i % 2 == 0 else "odd", c.samples, c.samples if i < c.solved else 0)
            for i in range(c.tasks)
        ]
        summary = summarize(outcomes, [1, 2], resamples=500)
        path = write_evaluation(ctx.stage_dir(stage), [], summary)
        return {
            "kind": "eval",
            "suite": "known",
            "split": "heldout",
            "step": c.step,
            "summary": str(path),
            "total_parameters": 1000,
            "active_parameters": 250,
        }


@dataclass
class CurvesConfig:
    """A stage that logs training curves the way a trainer does."""

    steps: int = 6


class CurvesStage:
    def __init__(self, config: CurvesConfig) -> None:
        self.config = config

    def run(self, ctx: Any, stage: Any) -> dict[str, Any]:
        for step in range(1, self.config.steps + 1):
            load = {f"expert_load/{layer}/{e}": (0.4 if e == step % 4 else 0.2) for layer in range(2) for e in range(4)}
            ctx.metrics.write(
                stage.id,
                step,
                reward_mean=step / 10,
                pass_rate=step / 20,
                kl=0.01 * step,
                entropy=1.0 - 0.05 * step,
                **load,
            )
        return {"steps": self.config.steps}


class _Plugin:
    @hookimpl
    def codemoe_register_components(self, registry) -> None:
        registry.register("stage", "known_eval", KnownEvalStage, KnownEvalConfig, summary="test: known evaluation")
        registry.register("stage", "curves", CurvesStage, CurvesConfig, summary="test: training curves")


@pytest.fixture
def spine() -> tuple[Any, Any, Hooks]:
    """(plugin manager, registry, hooks) with the installed plugins plus the test stages."""
    pm = build_plugin_manager(extra_plugins=[("evals-test", _Plugin())])
    return pm, build_registry(pm), Hooks(pm)


@pytest.fixture
def off_policy_records():
    """``off_policy_records(lag)``: four RL steps as an asynchronous stage logs them (``lag``), or as
    a synchronous one on the policy itself."""
    return _off_policy_records


def _off_policy_records(lag: bool) -> list[dict]:
    """Four RL steps as an asynchronous stage logs them (``lag``), or as a synchronous one on the
    policy itself: no lag, log-prob gaps of float error (up to 2e-5 nats, as the synchronous
    quickstart logs them), one near-tied routing decision in 2,000 flipped."""
    out = []
    for step in range(1, 5):
        record = {"stage": "rl", "step": step, "is_weight_mean": 1.0, "is_weight_min": 1.0, "is_weight_max": 1.0,
                  "is_truncated_frac": 0.0, "is_masked_frac": 0.0, "logp_mismatch_mean": 1e-6,
                  "logp_mismatch_max": 2e-5 * step / 4, "routing_agreement": 0.9995 if step == 2 else 1.0}
        if lag:
            staleness = 0 if step == 1 else 1
            record.update({"staleness_mean": float(staleness), f"staleness/{staleness}": 1.0,
                           "stale_dropped": 1.0 if step == 3 else 0.0, "is_weight_min": 0.5 - 0.1 * step,
                           "is_weight_max": 1.5 + 0.1 * step, "is_truncated_frac": 0.01 * step,
                           "logp_mismatch_mean": 0.01 * step, "logp_mismatch_max": 0.5 * step,
                           "routing_agreement": 1.0 - 0.01 * step})
        out.append(record)
    return out
