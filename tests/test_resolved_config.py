"""Every shipped pipeline's resolved config (what `config show` prints and each run saves as
config.yaml) composes and validates back to itself: validating it gives, at every level of nesting,
the configs that validating the pipeline gave, written out the same way."""

from __future__ import annotations

from pathlib import Path

import pytest
from codemoe.core.config import compose, list_pipelines, resolve_defaults, search_path, validate_pipeline
from omegaconf import OmegaConf

PIPELINES = list_pipelines(search_path())


def test_the_packages_ship_the_pipelines():
    assert {"smoke", "quickstart", "agentic", "agentic-repos"} <= set(PIPELINES)


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_a_resolved_config_runs_the_same_stages_and_resolves_to_itself(registry, tmp_path: Path, pipeline: str):
    cfg = compose(pipeline)
    resolved = resolve_defaults(cfg, registry)
    saved = tmp_path / "config.yaml"
    saved.write_text(OmegaConf.to_yaml(resolved))
    again = compose(saved)
    validate_pipeline(again, registry)
    assert OmegaConf.to_container(resolve_defaults(again, registry)) == OmegaConf.to_container(resolved)
    assert OmegaConf.to_container(again) == OmegaConf.to_container(resolved)  # nothing left to expand or default
