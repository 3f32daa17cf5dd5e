"""Config composition and validation (omegaconf).

Pipelines and presets are YAML files looked up on a search path, first match wins: the overlay
folder (``--registry``, ``$CODEMOE_REGISTRY`` or a checkout's ``registry/``), then the ``presets/``
folder each plugin ships inside its package (``codemoe/core/presets/models/tiny.yaml``). A pipeline
is ``<root>/pipelines/<name>.yaml``. Composition, in order:

1. load the pipeline file;
2. expand presets: a bare string under key ``K`` names the file ``<root>/<K>/<value>.yaml`` (or
   ``<root>/<K>s/...``) when such a folder exists on the search path; a preset may start from
   another with ``_base_: <preset>``;
3. apply ``key=value`` overrides from the command line (``+key=value`` adds a key that is not there;
   ``stages.sft.phases.2.steps=30`` sets a list item's key);
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

import yaml
from codemoe.core.errors import ConfigError, did_you_mean
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

__all__ = [
    "RunConfig",
    "compose",
    "find_overlay_dir",
    "find_registry_dir",
    "list_pipelines",
    "load_preset",
    "load_yaml",
    "preset_folders",
    "resolve_defaults",
    "resolved_spec",
    "search_path",
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
    # experiment trackers every metric also goes to (codemoe.core.loggers): tensorboard, wandb; none by default
    loggers: list[Any] = dataclasses.field(default_factory=list, metadata={"kind": "logger"})


# ---------------------------------------------------------------------------------------------
# locating files: the overlay folder, then the presets the plugins ship
# ---------------------------------------------------------------------------------------------

# Folders a registry (an overlay or a package's shipped ``presets/``) may hold; one of them marks a
# ``registry/`` folder above the working directory as an overlay.
PRESET_FOLDERS = ("pipelines", "models", "rewards", "algos", "suites")


def find_overlay_dir(start: Path | None = None) -> Path | None:
    """The overlay folder: ``$CODEMOE_REGISTRY``, else the nearest ``registry/`` above ``start``/cwd
    that holds one of :data:`PRESET_FOLDERS`; ``None`` when there is none (an installed codemoe)."""
    env = os.environ.get("CODEMOE_REGISTRY")
    if env:
        path = Path(env)
        if not path.is_dir():
            raise ConfigError(f"CODEMOE_REGISTRY={env} is not a folder")
        return path
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if any((folder / "registry" / kind).is_dir() for kind in PRESET_FOLDERS):
            return folder / "registry"
    return None


def find_registry_dir(start: Path | None = None) -> Path:
    """The overlay folder (see :func:`find_overlay_dir`); raises when there is none."""
    found = find_overlay_dir(start)
    if found is None:
        here = (start or Path.cwd()).resolve()
        raise ConfigError(
            f"no registry/ folder in {here} or above it; the packages' own presets need none, but this "
            "needs a checkout's registry or CODEMOE_REGISTRY set to a registry folder"
        )
    return found


def shipped_preset_dirs() -> list[Path]:
    """The ``presets/`` folders of the installed plugins (see :func:`codemoe.core.plugins.preset_dirs`)."""
    from codemoe.core.plugins import build_plugin_manager, preset_dirs

    return preset_dirs(build_plugin_manager())


def search_path(registry_dir: Path | None = None, preset_dirs: Sequence[Path] | None = None) -> list[Path]:
    """Where presets are looked up, first match wins: the overlay (``registry_dir``, else
    :func:`find_overlay_dir`), then the plugins' shipped ``presets/`` folders (``preset_dirs``, else
    those of every installed plugin)."""
    overlay = registry_dir if registry_dir is not None else find_overlay_dir()
    shipped = list(preset_dirs) if preset_dirs is not None else shipped_preset_dirs()
    return [*([Path(overlay)] if overlay is not None else []), *shipped]


def list_pipelines(roots: Sequence[Path]) -> list[str]:
    """Names of the pipelines in the ``pipelines/`` folders of ``roots``."""
    return sorted({p.stem for root in roots for p in (Path(root) / "pipelines").glob("*.yaml")})


def _pipeline_path(pipeline: str | Path | None, roots: Sequence[Path]) -> Path:
    if pipeline is None:
        pipeline = DEFAULT_PIPELINE
    path = Path(pipeline)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise ConfigError(f"pipeline file {path} does not exist")
        return path
    for root in roots:
        candidate = Path(root) / "pipelines" / f"{pipeline}.yaml"
        if candidate.is_file():
            return candidate
    names = list_pipelines(roots)
    raise ConfigError(
        f"unknown pipeline '{pipeline}'{did_you_mean(str(pipeline), names)}. "
        f"Pipelines in {', '.join(str(Path(r) / 'pipelines') for r in roots) or 'no registry'}: "
        f"{', '.join(names) or 'none'}."
    )


def load_yaml(path: Path) -> dict[str, Any]:
    """A YAML mapping; a syntax error is one :class:`ConfigError` naming file, line and column."""
    try:
        data = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise ConfigError(f"{at}: YAML syntax error: {exc.problem or exc.context}") from None
    except (OmegaConfBaseException, OSError, ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


# ---------------------------------------------------------------------------------------------
# presets
# ---------------------------------------------------------------------------------------------


def preset_folders(roots: Sequence[Path], key: str) -> list[Path]:
    """The folders of ``roots`` that hold presets for key ``key`` (``<root>/<key>`` or ``<key>s``)."""
    if key in ("pipelines", "pipeline"):
        return []
    return [
        folder for root in roots for folder in (Path(root) / key, Path(root) / f"{key}s") if folder.is_dir()
    ]


def preset_names(folders: Sequence[Path]) -> list[str]:
    """Every preset name in ``folders``."""
    return sorted({p.stem for folder in folders for p in folder.glob("*.yaml")})


def load_preset(folders: Sequence[Path], name: str, where: str, depth: int = 0) -> dict[str, Any]:
    """Preset ``name`` from the first of ``folders`` that has it, with its ``_base_`` merged under it.

    A base of the same name is looked up in the folders after the one that holds the preset, so an
    overlay's ``tiny.yaml`` may start from the shipped ``tiny`` with ``_base_: tiny``.
    """
    index = next((i for i, folder in enumerate(folders) if (folder / f"{name}.yaml").is_file()), None)
    if index is None:
        names = preset_names(folders)
        raise ConfigError(
            f"'{where}': no preset '{name}' in {', '.join(map(str, folders))}{did_you_mean(name, names)}. "
            f"Presets there: {', '.join(names) or 'none'}."
        )
    data = load_yaml(folders[index] / f"{name}.yaml")
    base = data.pop("_base_", None)
    if base is not None:
        if depth > _MAX_PRESET_DEPTH:
            raise ConfigError(f"'{where}': presets in {folders[index]} inherit from each other in a cycle")
        below = folders[index + 1:] if str(base) == name else folders
        parent = load_preset(below, str(base), where, depth + 1)
        data = OmegaConf.to_container(OmegaConf.merge(parent, data), resolve=False)  # type: ignore[assignment]
    return data


def _expand(node: Any, roots: Sequence[Path], path: str, depth: int = 0) -> Any:
    if depth > _MAX_PRESET_DEPTH:
        raise ConfigError(f"'{path}': presets nest deeper than {_MAX_PRESET_DEPTH} levels (a cycle?)")
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            sub = f"{path}.{key}" if path else str(key)
            folders = preset_folders(roots, str(key))
            if folders and isinstance(value, str) and not value.startswith("${"):
                value = _expand(load_preset(folders, value, sub), roots, sub, depth + 1)
            else:
                value = _expand(value, roots, sub, depth)
            out[key] = value
        return out
    if isinstance(node, list):
        return [_expand(v, roots, f"{path}[{i}]", depth) for i, v in enumerate(node)]
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
        _detach_interpolations(cfg, key)
        _check_override_key(OmegaConf.to_container(cfg, resolve=False), key, item, add=add)
        try:
            value = OmegaConf.to_container(OmegaConf.from_dotlist([f"value={raw}"]), resolve=False)["value"]
            OmegaConf.update(cfg, key, value, merge=True, force_add=add)
        except OmegaConfBaseException as exc:
            raise ConfigError(f"override '{item}': {str(exc).splitlines()[0]}") from None
    return OmegaConf.to_container(cfg, resolve=False)  # type: ignore[return-value]


def _detach_interpolations(cfg: DictConfig, key: str) -> None:
    """Make the nodes above ``key`` that are interpolations (``suite: ${suite_spec}``) copies of what
    they point at, so an override of ``stages.eval.suite.seed`` changes that stage's suite and not
    the shared node every stage points at."""
    raw: Any = OmegaConf.to_container(cfg, resolve=False)
    parts = key.split(".")
    for depth in range(1, len(parts)):
        part = parts[depth - 1]
        if isinstance(raw, Mapping) and part in raw:
            raw = raw[part]
        elif isinstance(raw, list) and part.isdigit() and int(part) < len(raw):
            raw = raw[int(part)]
        else:
            return
        if isinstance(raw, str) and raw.strip().startswith("${"):
            prefix = ".".join(parts[:depth])
            try:
                resolved = OmegaConf.to_container(OmegaConf.select(cfg, prefix), resolve=True)
            except (OmegaConfBaseException, ValueError):
                return  # not a container after all: the override names what it names
            OmegaConf.update(cfg, prefix, resolved, merge=False)
            raw = resolved


def _check_override_key(data: Mapping[str, Any], key: str, item: str, *, add: bool = False) -> None:
    """Refuse an override of a key that is not there (a typo), with the keys that are; a list item
    is named by its index (``stages.sft.phases.2.steps``), which must be in range even for ``+``."""
    node: Any = data
    walked: list[str] = []
    for part in key.split("."):
        at = ".".join(walked) or "the top level"
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise ConfigError(
                    f"override '{item}': '{at}' is a list of {len(node)} items; '{part}' is not an index "
                    f"of it (0 to {len(node) - 1})"
                )
            node = node[int(part)]
            walked.append(part)
            continue
        if not isinstance(node, Mapping):
            return  # below a bare value (a preset name being replaced by a mapping): allowed
        if part in node:
            node = node[part]
            walked.append(part)
            continue
        if add or _is_component_spec(node, walked):
            return  # a new key, or an option of a component: its schema validates the name
        keys = [str(k) for k in node]
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
    preset_dirs: Sequence[Path] | None = None,
) -> DictConfig:
    """Compose a pipeline with its presets and overrides into one resolved config.

    Presets are looked up in ``registry_dir`` (default: the overlay, :func:`find_overlay_dir`) and
    then in the plugins' shipped ``preset_dirs`` (default: those of every installed plugin).
    """
    roots = search_path(registry_dir, preset_dirs)
    path = _pipeline_path(pipeline, roots)
    data = _expand(load_yaml(path), roots, "")
    data = _expand(_apply_overrides(data, overrides), roots, "")
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
    """The preset ``name`` of ``<folder_name>/`` on the search path, or ``name`` itself when it is a component."""
    if (kind, name) in registry:
        return name
    roots = search_path(preset_dirs=getattr(registry, "preset_dirs", []))
    return _expand(load_preset(preset_folders(roots, folder_name), name, where), roots, where)


def _merge_into(cls: type, values: Mapping[str, Any], where: str) -> Any:
    fields = [f.name for f in dataclasses.fields(cls)]
    for key in values:
        if key not in fields:
            raise ConfigError(
                f"'{where}.{key}': unknown option{did_you_mean(str(key), fields)}. "
                f"{cls.__name__} accepts: {', '.join(fields)}."
            )
    try:
        merged = OmegaConf.structured(cls)
        # a component spec that names its component (a name, or a mapping with 'name') replaces the
        # field's default spec: merged into it, a default recipe's terms (or options of another
        # component) would join the one the config names; a mapping without 'name' adds options to
        # the default component
        named = {k for k in _component_fields(cls) & set(values) if _names_component(values[k])}
        for key in named:
            merged[key] = values[key]
        merged = OmegaConf.merge(merged, {k: v for k, v in values.items() if k not in named})
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


def _component_fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls) if f.metadata.get("kind")}


def _names_component(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, Mapping) and "name" in value)


def _expected(cls: type, name: str) -> str:
    for field in dataclasses.fields(cls):
        if field.name == name:
            type_name = getattr(field.type, "__name__", None) or str(field.type)
            return f" (expected {type_name})"
    return ""


def validate_pipeline(cfg: DictConfig, registry: Any) -> list[tuple[str, str, Any]]:
    """Validate ``run:`` and every stage spec; return (stage id, component name, stage config) in order."""
    section = cfg.get("run")
    values = OmegaConf.to_container(section, resolve=True) if isinstance(section, DictConfig) else dict(section or {})
    run = _merge_into(RunConfig, values, "run")
    _validate_nested(registry, RunConfig, run, "run")  # run.loggers
    return [
        (stage_id, spec["name"], validate_component(registry, "stage", spec, where=f"stages.{stage_id}"))
        for stage_id, spec in stage_specs(cfg)
    ]


# ---------------------------------------------------------------------------------------------
# the resolved config: every component's defaults written out
# ---------------------------------------------------------------------------------------------


def resolved_spec(registry: Any, kind: str, spec: Mapping[str, Any] | str, *, where: str = "") -> dict[str, Any] | str:
    """``spec`` with every option of its component written out, its defaults included, recursively
    through nested component specs (a model's router, a recipe's parts); validating the result gives
    the same config as validating ``spec``."""
    name = spec_name(kind, spec, where=where)
    cls = registry.get(kind, name, where=where).config_class()
    if cls is None:
        return name if isinstance(spec, str) else {"name": name}
    config = validate_component(registry, kind, spec, where=where)
    out: dict[str, Any] = {"name": name}
    for f in dataclasses.fields(cls):
        value = getattr(config, f.name)
        nested = f.metadata.get("kind")
        sub = f"{where}.{f.name}" if where else f.name
        if nested is None or value is None:
            out[f.name] = _plain(value)
        elif f.metadata.get("by_label"):
            out[f.name] = {
                label: None if options is None else _without_name(
                    resolved_spec(registry, nested, {"name": str(label), **options}, where=f"{sub}.{label}"), label)
                for label, options in value.items()
            }
        elif isinstance(value, list):
            out[f.name] = [_nested(registry, f, nested, v, f"{sub}[{i}]") for i, v in enumerate(value)]
        else:
            out[f.name] = _nested(registry, f, nested, value, sub)
    return out


def _nested(registry: Any, f: dataclasses.Field, kind: str, value: Any, where: str) -> Any:
    if isinstance(value, str) and f.metadata.get("presets"):
        value = _named_preset(f.metadata["presets"], value, where, registry, kind)
    return resolved_spec(registry, kind, value, where=where)


def _without_name(spec: Any, label: Any) -> Any:
    """A by-label entry's options: its name is the label."""
    if isinstance(spec, dict) and spec.get("name") == str(label):
        return {k: v for k, v in spec.items() if k != "name"}
    return spec


def _plain(value: Any) -> Any:
    """A config value as YAML holds it: dataclasses as mappings, tuples and paths as lists and strings."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def resolve_defaults(cfg: DictConfig, registry: Any) -> DictConfig:
    """The composed ``cfg`` with every stage's options, and every nested component's, written out
    with their defaults (what ``codemoe config show`` prints and each run saves as ``config.yaml``,
    so ``codemoe run RUN_DIR/config.yaml`` runs the same stages with the same options)."""
    out = OmegaConf.to_container(cfg, resolve=True)
    run = _merge_into(RunConfig, dict(out.get("run") or {}), "run")
    out["run"] = _plain(run)
    for field in dataclasses.fields(RunConfig):
        kind = field.metadata.get("kind")
        if kind and isinstance(out["run"].get(field.name), list):
            out["run"][field.name] = [resolved_spec(registry, kind, spec, where=f"run.{field.name}[{i}]")
                                      for i, spec in enumerate(out["run"][field.name])]
    out["stages"] = {
        stage_id: resolved_spec(registry, "stage", spec, where=f"stages.{stage_id}") for stage_id, spec in stage_specs(cfg)
    }
    return OmegaConf.create(out)
