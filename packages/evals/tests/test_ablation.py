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
