import functools
from pathlib import Path
from typing import Any

import pytest
from codemoe.core import ConfigError
from codemoe.core import compose as compose_with_shipped
from codemoe.core.config import find_registry_dir, stage_specs

# the tests of composition see only their own registry, not the presets the installed packages ship
compose = functools.partial(compose_with_shipped, preset_dirs=())


@pytest.fixture
def reg(tmp_path: Path) -> Path:
    """A registry with one pipeline, model presets (one inheriting another) and a shared section."""
    root = tmp_path / "registry"
    (root / "pipelines").mkdir(parents=True)
    (root / "models").mkdir()
    (root / "models" / "tiny.yaml").write_text("name: toy\nlayers: 2\nhidden: 64\n")
    (root / "models" / "wide.yaml").write_text("_base_: tiny\nhidden: 256\n")
    (root / "pipelines" / "train.yaml").write_text(
        "run: {seed: 7}\n"
        "model: tiny\n"
        "lr: 0.001\n"
        "stages:\n"
        "  sft: {name: trainer, model: '${model}', lr: '${lr}'}\n"
        "  eval: evaluator\n"
    )
    return root


def test_presets_expand_and_interpolation_resolves(reg: Path):
    cfg = compose("train", registry_dir=reg)
    assert cfg.model.layers == 2 and cfg.model.hidden == 64
    assert cfg.stages.sft.model.hidden == 64  # ${model} resolved after expansion
    assert cfg.run.name == "train" and cfg.run.seed == 7 and cfg.run.dir == "runs"


def test_overrides_apply_before_interpolation(reg: Path):
    cfg = compose("train", ["lr=0.5", "model.layers=4"], registry_dir=reg)
    assert cfg.stages.sft.lr == 0.5
    assert cfg.stages.sft.model.layers == 4


def test_override_can_name_another_preset_and_base_is_inherited(reg: Path):
    cfg = compose("train", ["model=wide"], registry_dir=reg)
    assert cfg.model.hidden == 256 and cfg.model.layers == 2


def test_misspelled_override_key_suggests(reg: Path):
    with pytest.raises(ConfigError, match="no key 'lrr' under the top level.*did you mean 'lr'"):
        compose("train", ["lrr=1"], registry_dir=reg)


def test_plus_adds_a_new_key(reg: Path):
    assert compose("train", ["+extra.flag=true"], registry_dir=reg).extra.flag is True


def test_override_without_equals_is_refused(reg: Path):
    with pytest.raises(ConfigError, match="not of the form key=value"):
        compose("train", ["lr"], registry_dir=reg)


def test_unknown_preset_lists_available(reg: Path):
    with pytest.raises(ConfigError) as err:
        compose("train", ["model=tiy"], registry_dir=reg)
    assert "did you mean 'tiny'" in str(err.value) and "Presets there: tiny, wide" in str(err.value)


def test_unknown_pipeline_lists_pipelines(reg: Path):
    with pytest.raises(ConfigError, match="unknown pipeline 'trian'.*did you mean 'train'.*: train"):
        compose("trian", registry_dir=reg)


def test_bad_run_value_names_key_and_value(reg: Path):
    with pytest.raises(ConfigError, match=r"'run.seed': bad value 'x'.*int"):
        compose("train", ["run.seed=x"], registry_dir=reg)


def test_stage_specs_default_name_to_stage_id(reg: Path):
    specs = dict(stage_specs(compose("train", registry_dir=reg)))
    assert specs["eval"] == {"name": "evaluator"}
    assert specs["sft"]["name"] == "trainer"


def test_pipeline_without_stages_is_refused(reg: Path):
    (reg / "pipelines" / "empty.yaml").write_text("run: {seed: 1}\n")
    with pytest.raises(ConfigError, match="non-empty 'stages:'"):
        compose("empty", registry_dir=reg)


def test_registry_dir_found_from_env_or_parents(reg: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("CODEMOE_REGISTRY", raising=False)
    nested = tmp_path / "a" / "b"
    nested.mkdir(parents=True)
    assert find_registry_dir(nested) == reg
    monkeypatch.setenv("CODEMOE_REGISTRY", str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match="is not a folder"):
        find_registry_dir()


def test_options_of_a_component_spec_may_be_overridden_without_plus(reg: Path):
    cfg = compose("train", ["stages.sft.warmup=5", "model.dropout=0.1"], registry_dir=reg)
    assert cfg.stages.sft.warmup == 5  # the stage's schema validates the option later
    assert cfg.model.dropout == 0.1


# -- list items, YAML errors ---------------------------------------------------------------------


@pytest.fixture
def phased(tmp_path: Path) -> Path:
    root = tmp_path / "registry"
    (root / "pipelines").mkdir(parents=True)
    (root / "pipelines" / "phased.yaml").write_text(
        "stages:\n  sft:\n    phases:\n      - {phase: router, steps: 10}\n      - {phase: experts, steps: 10}\n"
        "      - {phase: all, steps: 40}\n"
    )
    return root


def test_an_override_sets_a_list_item_by_index(phased: Path):
    cfg = compose("phased", ["stages.sft.phases.2.steps=30", "stages.sft.phases.0={phase: all, steps: 1}"],
                  registry_dir=phased)
    assert [dict(p) for p in cfg.stages.sft.phases] == [
        {"phase": "all", "steps": 1}, {"phase": "experts", "steps": 10}, {"phase": "all", "steps": 30}
    ]


@pytest.mark.parametrize("override", ["stages.sft.phases.3.steps=30", "stages.sft.phases.x.steps=30",
                                      "+stages.sft.phases.5.steps=1"])
def test_a_list_index_out_of_range_names_the_key(phased: Path, override: str):
    with pytest.raises(ConfigError, match=r"'stages.sft.phases' is a list of 3 items; '\w' is not an index of it \(0 to 2\)"):
        compose("phased", [override], registry_dir=phased)


def test_a_missing_key_inside_a_list_item_is_refused_with_the_keys_there(phased: Path):
    with pytest.raises(ConfigError, match=r"no key 'stpes' under stages.sft.phases.2 \(did you mean 'steps'\?\)"):
        compose("phased", ["stages.sft.phases.2.stpes=30"], registry_dir=phased)


def test_a_yaml_syntax_error_is_one_line_with_file_line_and_column(phased: Path):
    bad = phased / "pipelines" / "bad.yaml"
    bad.write_text("run:\n  name: x\nstages:\n  sft: {steps: 3\n  eval: {}\n")
    with pytest.raises(ConfigError) as err:
        compose("bad", registry_dir=phased)
    message = str(err.value)
    assert message.startswith(f"{bad}:5:7: YAML syntax error: did not find expected ',' or '}}'") and "\n" not in message
    assert err.value.__cause__ is None and err.value.__suppress_context__  # no chained yaml traceback


# -- shipped presets and the overlay ---------------------------------------------------------------


def test_shipped_presets_are_found_without_a_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("CODEMOE_REGISTRY", raising=False)
    monkeypatch.chdir(tmp_path)  # no registry/ above: only the packages' own presets
    (tmp_path / "p.yaml").write_text("stages:\n  sft: {model: tiny, suite: synthetic}\n  rl: {algo: grpo, reward: seed2-weighted}\n")
    cfg = compose_with_shipped(tmp_path / "p.yaml")
    assert cfg.stages.sft.model.name == "qwen3_moe" and cfg.stages.sft.model.hidden_size == 128
    assert cfg.stages.sft.suite.name == "synthetic" and cfg.stages.rl.algo.advantage.name == "grpo"
    assert cfg.stages.rl.reward.components.hack_penalty.weight == -0.1
    assert compose_with_shipped("smoke").run.name == "smoke"


def test_an_overlay_preset_overrides_the_shipped_one_and_may_extend_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("CODEMOE_REGISTRY", raising=False)
    overlay = tmp_path / "registry"
    (overlay / "models").mkdir(parents=True)
    (overlay / "models" / "tiny.yaml").write_text("_base_: tiny\nnum_layers: 1\n")  # the shipped tiny, one layer
    (tmp_path / "p.yaml").write_text("stages:\n  sft: {model: tiny}\n")
    monkeypatch.chdir(tmp_path)  # the overlay is found above the working directory
    model = compose_with_shipped(tmp_path / "p.yaml").stages.sft.model
    assert (model.name, model.num_layers, model.hidden_size) == ("qwen3_moe", 1, 128)


def test_a_named_component_spec_replaces_the_default_spec_and_options_alone_extend_it():
    from dataclasses import dataclass, field

    from codemoe.core.config import _merge_into

    @dataclass
    class Stage:
        reward: Any = field(default_factory=lambda: {"name": "weighted_sum", "components": {"task_complete": {"weight": 1.0}}},
                            metadata={"kind": "reward"})
        engine: Any = field(default_factory=lambda: {"name": "embedded"}, metadata={"kind": "engine"})
        steps: int = 1

    named = _merge_into(Stage, {"reward": {"name": "weighted_sum", "components": {"all_pass": {"weight": 10.0}}},
                                "engine": {"prefix_cache_tokens": 64}, "steps": 3}, "stages.rl")
    assert named.reward == {"name": "weighted_sum", "components": {"all_pass": {"weight": 10.0}}}  # no task_complete
    assert named.engine == {"name": "embedded", "prefix_cache_tokens": 64} and named.steps == 3
    assert _merge_into(Stage, {"reward": "agent-stepwise"}, "stages.rl").reward == "agent-stepwise"


def test_an_override_inside_a_shared_interpolated_node_changes_that_stage_only(tmp_path: Path):
    root = tmp_path / "registry"
    (root / "pipelines").mkdir(parents=True)
    (root / "pipelines" / "agent.yaml").write_text(
        "suite_spec: {name: repos, seed: 0}\n"
        "stages:\n"
        "  rl: {name: trainer, suite: '${suite_spec}'}\n"
        "  eval: {name: evaluator, suite: '${suite_spec}'}\n"
    )
    cfg = compose("agent", ["stages.eval.suite.seed=1"], registry_dir=root)
    assert cfg.stages.eval.suite.seed == 1
    assert cfg.stages.rl.suite.seed == 0 and cfg.suite_spec.seed == 0  # not written through the interpolation
    shared = compose("agent", ["suite_spec.seed=2"], registry_dir=root)
    assert shared.stages.rl.suite.seed == shared.stages.eval.suite.seed == 2  # the shared node still reaches all
