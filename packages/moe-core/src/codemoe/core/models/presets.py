"""Model presets: YAML files in ``registry/models/`` naming a ``model`` component and its options."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from codemoe.core.config import find_registry_dir
from codemoe.core.errors import ConfigError, did_you_mean
from omegaconf import OmegaConf

__all__ = ["list_presets", "load_preset"]

_MAX_DEPTH = 16


def _models_dir(registry_dir: Path | None) -> Path:
    return (registry_dir or find_registry_dir()) / "models"


def list_presets(registry_dir: Path | None = None) -> list[str]:
    """Names of the model presets."""
    return sorted(p.stem for p in _models_dir(registry_dir).glob("*.yaml"))


def load_preset(name: str, registry_dir: Path | None = None, _depth: int = 0) -> dict[str, Any]:
    """The model spec of preset ``name`` (a preset may start from another with ``_base_: <preset>``)."""
    folder = _models_dir(registry_dir)
    path = folder / f"{name}.yaml"
    if not path.is_file():
        names = list_presets(registry_dir)
        raise ConfigError(
            f"no model preset '{name}' in {folder}{did_you_mean(name, names)}. Presets: {', '.join(names) or 'none'}."
        )
    data = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a model preset is a mapping with 'name: <model component>'")
    base = data.pop("_base_", None)
    if base is not None:
        if _depth > _MAX_DEPTH:
            raise ConfigError(f"{path}: model presets inherit from each other in a cycle")
        parent = load_preset(str(base), registry_dir, _depth + 1)
        data = OmegaConf.to_container(OmegaConf.merge(parent, data), resolve=True)
    return data
