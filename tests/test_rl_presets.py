"""Every algorithm preset codemoe-rl ships (codemoe/rl/presets/algos) composes, validates and builds; variants are configs."""

from __future__ import annotations

from pathlib import Path

import codemoe.rl
import pytest
from codemoe.core import compose, validate_pipeline

REGISTRY = Path(__file__).resolve().parents[1] / "registry"
PRESETS = sorted(p.stem for p in (Path(codemoe.rl.__file__).parent / "presets" / "algos").glob("*.yaml"))


def _algorithm(registry, tmp_path, preset: str, overrides=()):
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(f"run: {{name: t}}\nstages:\n  rl:\n    name: rl\n    algo: {preset}\n")
    cfg = compose(pipeline, list(overrides), registry_dir=REGISTRY)
    [(_, _, stage_config)] = validate_pipeline(cfg, registry)
    return registry.build("algorithm", stage_config.algo, registry=registry)


def test_the_family_is_there():
    assert {"grpo", "ppo", "dr_grpo", "dapo", "rloo", "gspo", "reinforce_pp"} <= set(PRESETS)


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_builds(registry, tmp_path, preset):
    algo = _algorithm(registry, tmp_path, preset)
    assert algo.config.group_size >= 2


def test_variants_differ_only_in_strategies(registry, tmp_path):
    grpo, dapo, ppo = (_algorithm(registry, tmp_path, p) for p in ("grpo", "dapo", "ppo"))
    assert type(grpo.advantage).__name__ == "GRPOAdvantage" and grpo.config.kl_coef > 0
    assert dapo.policy_loss.config.clip_high == 0.28 and dapo.config.dynamic_sampling.refill_rounds == 2
    assert type(dapo.loss_agg).__name__ == "TokenMean" and dapo.config.kl_coef == 0
    assert type(ppo.advantage).__name__ == "GAEAdvantage" and ppo.config.critic is not None


def test_command_line_override_reaches_the_strategy(registry, tmp_path):
    algo = _algorithm(registry, tmp_path, "grpo", ["stages.rl.algo.policy_loss.clip_high=0.3"])
    assert algo.policy_loss.config.clip_high == 0.3


def test_grpo_without_kl_is_grpo_with_no_reference_policy(registry, tmp_path):
    grpo, nokl = (_algorithm(registry, tmp_path, p) for p in ("grpo", "grpo_no_kl"))
    assert nokl.config.kl_coef == 0 and not nokl.uses_reference and grpo.uses_reference
    rest = lambda algo: {k: v for k, v in vars(algo.config).items() if k != "kl_coef"}  # noqa: E731
    assert rest(nokl) == rest(grpo)
