from pathlib import Path

import pytest
from codemoe.core import ConfigError, compose
from codemoe.core.config import find_registry_dir, stage_specs


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
    with pytest.raises(ConfigError, match="no pipelines/ folder"):
        find_registry_dir()


def test_options_of_a_component_spec_may_be_overridden_without_plus(reg: Path):
    cfg = compose("train", ["stages.sft.warmup=5", "model.dropout=0.1"], registry_dir=reg)
    assert cfg.stages.sft.warmup == 5  # the stage's schema validates the option later
    assert cfg.model.dropout == 0.1
