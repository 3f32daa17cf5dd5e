"""Model presets: YAML files in a ``models/`` folder naming a ``model`` component and its options.

codemoe-core ships its presets in ``codemoe/core/presets/models/``; an overlay folder (a checkout's
``registry/models/`` or ``$CODEMOE_REGISTRY/models``) comes first, and so overrides them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from codemoe.core.config import load_preset as _load_preset
from codemoe.core.config import preset_folders, preset_names, search_path
from codemoe.core.errors import ConfigError
from omegaconf import OmegaConf

__all__ = ["list_presets", "load_preset"]


def _models_dirs(registry_dir: Path | None) -> list[Path]:
    return preset_folders(search_path(registry_dir), "models")


def list_presets(registry_dir: Path | None = None) -> list[str]:
    """Names of the model presets (shipped and overlay)."""
    return preset_names(_models_dirs(registry_dir))


def load_preset(name: str, registry_dir: Path | None = None) -> dict[str, Any]:
    """The model spec of preset ``name`` (a preset may start from another with ``_base_: <preset>``)."""
    data = _load_preset(_models_dirs(registry_dir), name, "model")
    data = OmegaConf.to_container(OmegaConf.create(data), resolve=True)
    if not isinstance(data, dict) or "name" not in data:
        raise ConfigError(f"model preset '{name}': a model preset is a mapping with 'name: <model component>'")
    return data
