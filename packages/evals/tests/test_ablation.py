"""The ablation runner: variants of one pipeline, each compared with the baseline variant."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from codemoe.core.errors import ConfigError
from codemoe.evals.ablation import format_ablation, load_ablation, run_ablation

PIPELINE = """
run: {name: abl}
stages:
  eval_sft: {name: known_eval, solved: 8}
  eval_rl: {name: known_eval, solved: 20}
"""


def _spec(tmp_path: Path, pipeline: Path, extra: str = "") -> Path:
    path = tmp_path / "ablation.yaml"
    path.write_text(
        f"""
name: rl-vs-sft
pipeline: {pipeline}
baseline: without_rl
variants:
  with_rl: {{eval_stage: eval_rl}}
  without_rl: {{eval_stage: eval_sft}}
  bigger: {{overrides: [stages.eval_rl.solved=24]}}
{extra}
"""
    )
    return path


def test_variants_are_run_and_compared_with_the_baseline(spine, write_pipeline, tmp_path: Path, registry_dir: Path):
    _, registry, hooks = spine
    spec = load_ablation(_spec(tmp_path, write_pipeline(PIPELINE)))
    result = run_ablation(
        spec, registry, hooks, registry_dir=registry_dir, show_progress=False, out_dir=tmp_path / "runs"
    )
    rows = result["variants"]
    assert rows["without_rl"]["pass@1"]["value"] == pytest.approx(0.2)
    assert rows["with_rl"]["vs_baseline"]["absolute"]["value"] == pytest.approx(0.3)
    assert rows["with_rl"]["vs_baseline"]["relative"]["value"] == pytest.approx(1.5)
    assert rows["bigger"]["eval_stage"] == "eval_rl"  # default: the last eval stage
    assert rows["bigger"]["pass@1"]["value"] == pytest.approx(0.6)
    assert rows["with_rl"]["active_parameters"] == 250
    saved = json.loads((tmp_path / "runs" / "ablation-rl-vs-sft.json").read_text())
    assert saved["baseline"] == "without_rl"
    assert rows["with_rl"]["run_dir"] == rows["without_rl"]["run_dir"]  # same overrides, one run
    assert len({r["run_dir"] for r in rows.values()}) == 2
    assert "with_rl" in format_ablation(result) and "rel +150.0%" in format_ablation(result)


def test_spec_errors_are_explained(tmp_path: Path, write_pipeline):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\npipeline: p\nbaseline: nope\nvariants: {a: {}, b: {}}\n")
    with pytest.raises(ConfigError, match="baseline 'nope' is not a variant"):
        load_ablation(bad)
    bad.write_text("name: x\npipeline: p\nbaseline: a\nvariants: {a: {}}\n")
    with pytest.raises(ConfigError, match="at least two variants"):
        load_ablation(bad)


def test_ready_specs_load_by_name():
    moe = load_ablation("moe-vs-dense")
    assert moe.pipeline == "quickstart" and moe.baseline == "dense" and moe.max_active_ratio > 1
    assert "stages.sft.model.num_experts=1" in moe.variants["dense"].overrides
    rl = load_ablation("rl-vs-sft")
    assert {v.eval_stage for v in rl.variants.values()} == {"eval_rl", "eval_sft"}
    with pytest.raises(ConfigError, match="rl-vs-sft"):
        load_ablation("nope")


def test_moe_and_dense_variants_have_equal_active_parameters(registry_dir: Path):
    from codemoe.core import compose
    from codemoe.core.models import count_parameters

    spec = load_ablation("moe-vs-dense")
    counts = {}
    for name, variant in spec.variants.items():
        cfg = compose(spec.pipeline, variant.overrides, registry_dir=registry_dir)
        counts[name] = count_parameters(dict(cfg.stages.sft.model), vocab_size=cfg.stages.sft.vocab_size)
    assert counts["moe"].total > 2 * counts["dense"].total
    assert counts["moe"].active / counts["dense"].active == pytest.approx(1.0, abs=0.01)


def test_seeds_run_every_variant_once_each_and_compare_over_runs_and_tasks(
    spine, write_pipeline, tmp_path: Path, registry_dir: Path
):
    """``seeds`` runs each variant once per value of ``seed_key`` (here the eval stage's solved count,
    16 and 24 of 40 tasks, standing in for training runs that came out differently); a variant's
    pass@1 is the mean over its runs (0.4 and 0.6: 0.5), and its difference to the baseline is taken
    over runs and tasks, so its interval is wider than either run's own paired comparison."""
    from codemoe.evals.ablation import ablation_markdown, format_plan, plan_ablations
    from codemoe.evals.stats import improvement

    _, registry, hooks = spine
    path = tmp_path / "seeds.yaml"
    path.write_text(f"""
name: rl-vs-sft
pipeline: {write_pipeline(PIPELINE)}
baseline: without_rl
seeds: [16, 24]
seed_key: stages.eval_rl.solved
variants:
  with_rl: {{eval_stage: eval_rl}}
  without_rl: {{eval_stage: eval_sft}}
""")
    spec = load_ablation(path)
    plan = plan_ablations([spec], registry, registry_dir=registry_dir, out_dir=tmp_path / "runs")
    assert len(plan.runs) == 2 and "run 2 rl-vs-sft-with_rl-seed24" in format_plan(plan)  # both arms read each run
    result = run_ablation(spec, registry, hooks, registry_dir=registry_dir, show_progress=False, out_dir=tmp_path / "runs")
    rows = result["variants"]
    assert [s["pass@1"] for s in rows["with_rl"]["seeds"]] == [pytest.approx(0.4), pytest.approx(0.6)]
    assert rows["with_rl"]["pass@1"]["value"] == pytest.approx(0.5)
    diff = rows["with_rl"]["vs_baseline"]["absolute"]
    assert diff["value"] == pytest.approx(0.3)
    single = improvement({f"t{i}": float(i < 8) for i in range(40)}, {f"t{i}": float(i < 16) for i in range(40)})
    assert diff["high"] - diff["low"] > single.absolute.high - single.absolute.low
    assert "| 160 x 2 seeds |" in ablation_markdown([result]) and "2 seeds" in format_ablation(result)


def test_seeds_must_be_distinct_values_that_change_every_variant(spine, tmp_path: Path, write_pipeline, registry_dir):
    for bad in ("seeds: 3", "seeds: [1, 1]"):
        with pytest.raises(ConfigError, match="seeds must be a list of distinct values"):
            load_ablation(_spec(tmp_path, write_pipeline(PIPELINE), bad))
    from codemoe.evals.ablation import plan_ablations

    # variant 'bigger' sets the seed key itself: both seeds give it one run
    spec = load_ablation(_spec(tmp_path, write_pipeline(PIPELINE), "seeds: [16, 24]\nseed_key: stages.eval_rl.solved"))
    with pytest.raises(ConfigError, match="variant 'bigger': two of seeds \\[16, 24\\] give it the same run"):
        plan_ablations([spec], spine[1], registry_dir=registry_dir, out_dir=tmp_path / "runs")
