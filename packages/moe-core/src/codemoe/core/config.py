"""Config composition and validation (omegaconf).

A pipeline is a YAML file in ``registry/pipelines/``. Composition, in order:

1. load the pipeline file;
2. expand presets: a bare string under key ``K`` names the file ``registry/<K>/<value>.yaml`` (or
   ``registry/<K>s/...``) when such a folder exists; a preset may start from another with
   ``_base_: <preset>``;
3. apply ``key=value`` overrides from the command line (``+key=value`` adds a key that is not there);
4. expand presets again (an override may name one), then resolve ``${...}`` interpolation;
5. validate every stage, and every nested component spec, against its component's config dataclass.

Errors name the key path, the bad value and what was expected.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from codemoe.core.errors import ConfigError, did_you_mean
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

__all__ = [
    "RunConfig",
    "compose",
    "find_registry_dir",
    "list_pipelines",
    "spec_name",
    "stage_specs",
    "validate_component",
    "validate_pipeline",
]

DEFAULT_PIPELINE = "quickstart"  # what `codemoe run` and `make run` run
_MAX_PRESET_DEPTH = 16


@dataclasses.dataclass
class RunConfig:
    """The ``run:`` section of a pipeline."""

    name: str = "run"  # run directories are named <name>-<timestamp>
    dir: str = "runs"  # parent folder of run directories
    seed: int = 0  # global seed, given to every stage through the run context


# ---------------------------------------------------------------------------------------------
# locating files
# ---------------------------------------------------------------------------------------------


def find_registry_dir(start: Path | None = None) -> Path:
    """The ``registry/`` folder: ``$CODEMOE_REGISTRY``, else the nearest one above ``start``/cwd."""
    env = os.environ.get("CODEMOE_REGISTRY")
    if env:
        path = Path(env)
        if not (path / "pipelines").is_dir():
            raise ConfigError(f"CODEMOE_REGISTRY={env} has no pipelines/ folder")
        return path
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "registry" / "pipelines").is_dir():
            return folder / "registry"
    raise ConfigError(
        f"no registry/pipelines/ folder in {here} or above it; run from a codemoe checkout or set "
        "CODEMOE_REGISTRY to the registry folder"
    )


def list_pipelines(registry_dir: Path) -> list[str]:
    """Names of the pipelines in ``registry_dir/pipelines``."""
    return sorted(p.stem for p in (registry_dir / "pipelines").glob("*.yaml"))


def _pipeline_path(pipeline: str | Path | None, registry_dir: Path) -> Path:
    if pipeline is None:
        pipeline = DEFAULT_PIPELINE
    path = Path(pipeline)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise ConfigError(f"pipeline file {path} does not exist")
        return path
    candidate = registry_dir / "pipelines" / f"{pipeline}.yaml"
    if not candidate.is_file():
        names = list_pipelines(registry_dir)
        raise ConfigError(
            f"unknown pipeline '{pipeline}'{did_you_mean(str(pipeline), names)}. "
            f"Pipelines in {registry_dir / 'pipelines'}: {', '.join(names) or 'none'}."
        )
    return candidate


def _load_yaml(path: Path) -> dict[str, Any]:
    try:
        data = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except (OmegaConfBaseException, OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


# ---------------------------------------------------------------------------------------------
# presets
# ---------------------------------------------------------------------------------------------


def _preset_folder(registry_dir: Path, key: str) -> Path | None:
    for folder in (registry_dir / key, registry_dir / f"{key}s"):
        if folder.is_dir() and key not in ("pipelines", "pipeline"):
            return folder
    return None


def _load_preset(folder: Path, name: str, where: str, depth: int) -> dict[str, Any]:
    path = folder / f"{name}.yaml"
    if not path.is_file():
        names = sorted(p.stem for p in folder.glob("*.yaml"))
        raise ConfigError(
            f"'{where}': no preset '{name}' in {folder}{did_you_mean(name, names)}. "
            f"Presets there: {', '.join(names) or 'none'}."
        )
    data = _load_yaml(path)
    base = data.pop("_base_", None)
    if base is not None:
        if depth > _MAX_PRESET_DEPTH:
            raise ConfigError(f"'{where}': presets in {folder} inherit from each other in a cycle")
        parent = _load_preset(folder, str(base), where, depth + 1)
        data = OmegaConf.to_container(OmegaConf.merge(parent, data), resolve=False)  # type: ignore[assignment]
    return data


def _expand(node: Any, registry_dir: Path, path: str, depth: int = 0) -> Any:
    if depth > _MAX_PRESET_DEPTH:
        raise ConfigError(f"'{path}': presets nest deeper than {_MAX_PRESET_DEPTH} levels (a cycle?)")
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            sub = f"{path}.{key}" if path else str(key)
            folder = _preset_folder(registry_dir, str(key))
            if folder is not None and isinstance(value, str) and not value.startswith("${"):
                value = _expand(_load_preset(folder, value, sub, 0), registry_dir, sub, depth + 1)
            else:
                value = _expand(value, registry_dir, sub, depth)
            out[key] = value
        return out
    if isinstance(node, list):
        return [_expand(v, registry_dir, f"{path}[{i}]", depth) for i, v in enumerate(node)]
    return node


# ---------------------------------------------------------------------------------------------
# overrides
# ---------------------------------------------------------------------------------------------


def _apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    cfg = OmegaConf.create(data)
    for item in overrides:
        key, sep, raw = item.partition("=")
        add = key.startswith("+")
        key = key.lstrip("+").strip()
        if not sep or not key:
            raise ConfigError(f"override '{item}' is not of the form key=value")
        if not add:
            _check_override_key(OmegaConf.to_container(cfg, resolve=False), key, item)
        try:
            value = OmegaConf.from_dotlist([f"{key}={raw}"])
            cfg = OmegaConf.merge(cfg, value)
        except OmegaConfBaseException as exc:
            raise ConfigError(f"override '{item}': {exc}") from exc
    return OmegaConf.to_container(cfg, resolve=False)  # type: ignore[return-value]


def _check_override_key(data: Mapping[str, Any], key: str, item: str) -> None:
    """Refuse an override of a key that is not there (a typo), with the keys that are."""
    node: Any = data
    walked: list[str] = []
    for part in key.split("."):
        if not isinstance(node, Mapping):
            return  # below a bare value (a preset name being replaced by a mapping): allowed
        if part in node:
            node = node[part]
            walked.append(part)
            continue
        if _is_component_spec(node, walked):
            return  # an option of a component: its schema validates the name, with suggestions
        keys = [str(k) for k in node]
        at = ".".join(walked) or "the top level"
        raise ConfigError(
            f"override '{item}': no key '{part}' under {at}{did_you_mean(part, keys)}. "
            f"Keys there: {', '.join(keys) or 'none'}. Write +{key}=... to add a new key."
        )


def _is_component_spec(node: Mapping[str, Any], walked: list[str]) -> bool:
    """A mapping that selects a component (has ``name``, or is a stage) accepts its schema's options."""
    return "name" in node or (len(walked) == 2 and walked[0] == "stages")


# ---------------------------------------------------------------------------------------------
# composition
# ---------------------------------------------------------------------------------------------


def compose(
    pipeline: str | Path | None = None,
    overrides: Sequence[str] = (),
    *,
    registry_dir: Path | None = None,
) -> DictConfig:
    """Compose a pipeline with its presets and overrides into one resolved config."""
    registry_dir = registry_dir or find_registry_dir()
    path = _pipeline_path(pipeline, registry_dir)
    data = _expand(_load_yaml(path), registry_dir, "")
    data = _expand(_apply_overrides(data, overrides), registry_dir, "")
    cfg = OmegaConf.create(data)
    try:
        OmegaConf.resolve(cfg)
    except OmegaConfBaseException as exc:
        raise ConfigError(f"{path}: interpolation failed at '{exc.full_key}': {exc.msg}") from exc
    run = dict(cfg.get("run") or {})
    run.setdefault("name", Path(path).stem)
    cfg.run = dataclasses.asdict(_merge_into(RunConfig, run, "run"))
    if "stages" not in cfg or not isinstance(cfg.stages, DictConfig) or not cfg.stages:
        raise ConfigError(f"{path}: a pipeline needs a non-empty 'stages:' mapping (stage id -> spec)")
    return cfg


def stage_specs(cfg: DictConfig) -> list[tuple[str, dict[str, Any]]]:
    """(stage id, spec) in pipeline order; a spec's ``name`` defaults to its stage id."""
    out = []
    for stage_id, spec in cfg.stages.items():
        if isinstance(spec, str):
            spec = {"name": spec}
        elif spec is None:
            spec = {}
        else:
            spec = OmegaConf.to_container(spec, resolve=True)
        if not isinstance(spec, dict):
            raise ConfigError(f"'stages.{stage_id}': expected a mapping or a component name")
        spec.setdefault("name", str(stage_id))
        out.append((str(stage_id), spec))
    return out


# ---------------------------------------------------------------------------------------------
# validation against component schemas
# ---------------------------------------------------------------------------------------------


def spec_name(kind: str, spec: Mapping[str, Any] | str, *, where: str = "") -> str:
    """The component name a spec selects."""
    if isinstance(spec, str):
        return spec
    if isinstance(spec, Mapping) and isinstance(spec.get("name"), str):
        return spec["name"]
    at = where or kind
    raise ConfigError(f"'{at}': a {kind} spec needs 'name: <registered {kind} name>', got {spec!r}")


def validate_component(registry: Any, kind: str, spec: Mapping[str, Any] | str, *, where: str = "") -> Any:
    """Validate a component spec against its config dataclass; return the config instance."""
    name = spec_name(kind, spec, where=where)
    component = registry.get(kind, name, where=where)
    values = {} if isinstance(spec, str) else {k: v for k, v in dict(spec).items() if k != "name"}
    if isinstance(values, DictConfig):
        values = OmegaConf.to_container(values, resolve=True)
    cls = component.config_class()
    if cls is None:
        if values:
            raise ConfigError(
                f"'{where or kind}': {kind} '{name}' takes no options, got {', '.join(map(str, values))}"
            )
        return None
    config = _merge_into(cls, values, where or f"{kind}:{name}")
    _validate_nested(registry, cls, config, where or f"{kind}:{name}")
    return config


def _validate_nested(registry: Any, cls: type, config: Any, where: str) -> None:
    """Fields declared with ``metadata={"kind": K}`` hold component specs of kind K, checked here so
    that a misspelling anywhere inside a stage stops the run before any stage starts.

    The field holds one spec, a list of specs, or with ``"by_label": True`` a mapping ``label ->
    options`` whose component name defaults to the label (a reward recipe's parts; ``null`` drops an
    entry). With ``"presets": F`` a bare string that names a file of ``registry/F/`` is that preset.
    """
    for field in dataclasses.fields(cls):
        kind = field.metadata.get("kind")
        value = getattr(config, field.name)
        if kind is None or value is None:
            continue
        sub = f"{where}.{field.name}"
        if field.metadata.get("by_label"):
            if not isinstance(value, Mapping):
                raise ConfigError(f"'{sub}': expected a mapping of {kind} label -> options, got {value!r}")
            specs = [(f"{sub}.{label}", {"name": str(label), **(options or {})}) for label, options in value.items()
                     if options is not None]
        elif isinstance(value, list):
            specs = [(f"{sub}[{i}]", spec) for i, spec in enumerate(value)]
        else:
            specs = [(sub, value)]
        for at, spec in specs:
            if isinstance(spec, str) and field.metadata.get("presets"):
                spec = _named_preset(field.metadata["presets"], spec, at, registry, kind)
            validate_component(registry, kind, spec, where=at)


def _named_preset(folder_name: str, name: str, where: str, registry: Any, kind: str) -> Any:
    """The preset ``name`` of ``registry/<folder_name>/``, or ``name`` itself when it is a component."""
    if (kind, name) in registry:
        return name
    return _expand(_load_preset(find_registry_dir() / folder_name, name, where, 0), find_registry_dir(), where)


def _merge_into(cls: type, values: Mapping[str, Any], where: str) -> Any:
    fields = [f.name for f in dataclasses.fields(cls)]
    for key in values:
        if key not in fields:
            raise ConfigError(
                f"'{where}.{key}': unknown option{did_you_mean(str(key), fields)}. "
                f"{cls.__name__} accepts: {', '.join(fields)}."
            )
    try:
        merged = OmegaConf.merge(OmegaConf.structured(cls), values)
        return OmegaConf.to_object(merged)
    except ConfigError as exc:  # the config class's own check (``__post_init__``), naming its field
        message = str(exc)
        field_name = message[1:].split("'", 1)[0] if message.startswith("'") else ""
        if field_name.split(".", 1)[0] in fields:  # a nested config's key too ('parallel.ep')
            raise ConfigError(f"'{where}.{field_name}'{message[len(field_name) + 2:]}") from None
        raise ConfigError(f"'{where}': {message}") from None
    except OmegaConfBaseException as exc:
        key = f"{where}.{exc.full_key}" if getattr(exc, "full_key", None) else where
        bad = values.get(str(exc.full_key).split(".")[0], "<missing>") if exc.full_key else "?"
        expected = _expected(cls, str(exc.full_key).split(".")[0]) if exc.full_key else ""
        message = (exc.msg or str(exc)).splitlines()[0]
        raise ConfigError(f"'{key}': bad value {bad!r}{expected}: {message}") from exc


def _expected(cls: type, name: str) -> str:
    for field in dataclasses.fields(cls):
        if field.name == name:
            type_name = getattr(field.type, "__name__", None) or str(field.type)
            return f" (expected {type_name})"
    return ""


def validate_pipeline(cfg: DictConfig, registry: Any) -> list[tuple[str, str, Any]]:
    """Validate every stage spec; return (stage id, component name, stage config) in order."""
    return [
        (stage_id, spec["name"], validate_component(registry, "stage", spec, where=f"stages.{stage_id}"))
        for stage_id, spec in stage_specs(cfg)
    ]
