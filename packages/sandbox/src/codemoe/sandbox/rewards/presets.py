"""Read reward presets (``rewards/<name>.yaml``) without codemoe-core.

The sandbox ships its presets in ``codemoe/sandbox/presets/rewards/``, so an installed sandbox finds
``seed2-weighted`` without a checkout; an overlay folder (``$CODEMOE_REGISTRY/rewards``, else a
checkout's ``registry/rewards`` above the working directory) is searched first and so overrides
them. codemoe-core expands a preset named in a pipeline itself, on the same search path; this module
serves the sandbox on its own (``codemoe sandbox hack-report --recipe seed2-weighted``, tests,
notebooks). A preset may start from another with ``_base_: <preset>``; mappings merge key by key
(as omegaconf merges them), other values replace the base's.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from codemoe.sandbox.rewards.registration import RewardSpecError

__all__ = ["SHIPPED_REWARDS", "load_preset", "rewards_dirs"]

SHIPPED_REWARDS = Path(__file__).resolve().parents[1] / "presets" / "rewards"  # package data


def rewards_dirs(start: Path | None = None) -> list[Path]:
    """The folders searched for reward presets, first match wins: the overlay's ``rewards/``
    (``$CODEMOE_REGISTRY``, else the nearest ``registry/rewards`` above ``start`` or cwd), then the
    presets this package ships."""
    env = os.environ.get("CODEMOE_REGISTRY")
    overlay = [Path(env) / "rewards"] if env else []
    if not env:
        here = (start or Path.cwd()).resolve()
        overlay = [folder / "registry" / "rewards" for folder in (here, *here.parents)
                   if (folder / "registry" / "rewards").is_dir()][:1]
    return [folder for folder in (*overlay, SHIPPED_REWARDS) if folder.is_dir()]


def load_preset(
    name_or_path: str | Path, *, folder: Path | None = None, folders: list[Path] | None = None, _depth: int = 0
) -> dict[str, Any]:
    """The reward spec in a preset file, given its name (``seed2-weighted``) or a YAML path.

    ``folder`` (or ``folders``, in order) replaces the search path of :func:`rewards_dirs`.
    """
    search = folders if folders is not None else [folder] if folder is not None else rewards_dirs()
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        found = [f / f"{name_or_path}.yaml" for f in search if (f / f"{name_or_path}.yaml").is_file()]
        if not found:
            known = sorted({p.stem for f in search if f.is_dir() for p in f.glob("*.yaml")})
            raise RewardSpecError(
                f"no reward preset '{name_or_path}' in {', '.join(map(str, search)) or 'no folder'}; "
                f"presets there: {', '.join(known) or 'none'}"
            )
        path = found[0]
    elif not path.is_file():
        raise RewardSpecError(f"reward preset file {path} does not exist")
    data = _read(path)
    base = data.pop("_base_", None)
    if base is not None:
        if _depth > 8:
            raise RewardSpecError(f"{path}: presets inherit from each other in a cycle")
        # a base of the same name is the one further down the search path (an overlay extending it)
        below = search[search.index(path.parent) + 1:] if str(base) == path.stem and path.parent in search else None
        data = _merge(load_preset(base, folders=below or [path.parent, *search], _depth=_depth + 1), data)
    return data


def _read(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise RewardSpecError(f"{at}: YAML syntax error: {exc.problem or exc.context}") from None
    if not isinstance(data, dict):
        raise RewardSpecError(f"{path}: a reward preset is a mapping with 'name: <reward component>'")
    return data


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = _merge(out[key], value) if both else value
    return out
