"""Read reward presets (``registry/rewards/<name>.yaml``) without codemoe-core.

codemoe-core expands a preset named in a pipeline itself; this module serves the sandbox on its own
(``codemoe sandbox hack-report --recipe seed2-weighted``, tests, notebooks). A preset may start from
another with ``_base_: <preset>``; mappings merge key by key (as omegaconf merges them), other values
replace the base's.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from codemoe.sandbox.rewards.registration import RewardSpecError

__all__ = ["load_preset", "rewards_dir"]


def rewards_dir(start: Path | None = None) -> Path:
    """``$CODEMOE_REGISTRY/rewards``, else the nearest ``registry/rewards`` above ``start`` (or cwd)."""
    env = os.environ.get("CODEMOE_REGISTRY")
    if env:
        return Path(env) / "rewards"
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "registry" / "rewards").is_dir():
            return folder / "registry" / "rewards"
    raise RewardSpecError(f"no registry/rewards folder in {here} or above; set CODEMOE_REGISTRY")


def load_preset(name_or_path: str | Path, *, folder: Path | None = None, _depth: int = 0) -> dict[str, Any]:
    """The reward spec in a preset file, given its name (``seed2-weighted``) or a YAML path."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        folder = folder or rewards_dir()
        path = folder / f"{name_or_path}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in path.parent.glob("*.yaml")) if path.parent.is_dir() else []
        raise RewardSpecError(f"no reward preset {path}; presets there: {', '.join(known) or 'none'}")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise RewardSpecError(f"{path}: a reward preset is a mapping with 'name: <reward component>'")
    base = data.pop("_base_", None)
    if base is not None:
        if _depth > 8:
            raise RewardSpecError(f"{path}: presets inherit from each other in a cycle")
        data = _merge(load_preset(base, folder=path.parent, _depth=_depth + 1), data)
    return data


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = _merge(out[key], value) if both else value
    return out
