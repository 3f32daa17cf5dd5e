"""The component registry: (kind, name) -> factory with a typed config schema.

A component's config is a dataclass whose fields are its options with documented defaults. The
registry and YAML share names: ``{name: softmax_topk, top_k: 2}`` in a config builds the ``router``
component ``softmax_topk`` with ``top_k=2``. Factories and config classes may be given as
``"module:attr"`` strings so that listing components does not import torch.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import inspect
import io
import tokenize
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codemoe.core.errors import ConfigError, RegistryError, did_you_mean

__all__ = ["Component", "Option", "Registry", "build_portable", "config_options"]


def _resolve(target: Any) -> Any:
    """Import ``"module:attr"`` targets; return anything else unchanged."""
    if not isinstance(target, str):
        return target
    module_name, _, attr = target.partition(":")
    if not attr:
        raise RegistryError(f"bad import target {target!r}: expected 'module:attribute'")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


@dataclass(frozen=True)
class Component:
    """One registered component."""

    kind: str
    name: str
    factory: Callable[..., Any] | str
    config: type | str | None
    plugin: str
    summary: str

    def config_class(self) -> type | None:
        """The config dataclass (imported on first use when given as a string)."""
        cls = _resolve(self.config)
        if cls is not None and not dataclasses.is_dataclass(cls):
            raise RegistryError(
                f"{self.kind} '{self.name}' (plugin {self.plugin}): config {cls!r} is not a dataclass"
            )
        return cls

    def options(self) -> list[Option]:
        """The component's options: every field of its config dataclass (none without one)."""
        cls = self.config_class()
        return config_options(cls) if cls is not None else []

    def build(self, config: Any = None, /, **kwargs: Any) -> Any:
        """Call the factory with the validated config (when the component has one) and kwargs."""
        factory = _resolve(self.factory)
        if self.config is None:
            return factory(**kwargs)
        return factory(config, **kwargs)


@dataclass(frozen=True)
class Option:
    """One option of a component: a field of its config dataclass, as ``codemoe components KIND NAME``
    prints it."""

    name: str
    type: str
    default: Any  # the value the field takes when the config leaves it out (a factory's result)
    doc: str  # the field's comment in the source, or ``metadata={"doc": ...}``
    kind: str | None = None  # a nested component spec of this kind (``metadata={"kind": ...}``)


def config_options(cls: type) -> list[Option]:
    """Every field of config dataclass ``cls``, with its type, default and one-line doc.

    The doc is ``metadata["doc"]`` when given, else the comment on the field's line, else the
    comment lines right above it (codemoe's config classes document fields that way), looked up in
    the class that declares the field (a subclass inherits its base's docs).
    """
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            docs.update(_field_comments(klass))
    out = []
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING
        if dataclasses.is_dataclass(default) and not isinstance(default, type):
            default = dataclasses.asdict(default)
        elif isinstance(default, list):
            default = [dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v for v in default]
        type_name = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        doc = str(f.metadata.get("doc") or docs.get(f.name, ""))
        out.append(Option(f.name, type_name, "<required>" if default is dataclasses.MISSING else default, doc,
                          f.metadata.get("kind")))
    return out


def _field_comments(cls: type) -> dict[str, str]:
    """Field name -> its comment in the source of ``cls`` (empty when the source is not available)."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    lines = source.splitlines()
    indent = len(lines[0]) - len(lines[0].lstrip())
    source = "\n".join(line[indent:] for line in lines)
    comments: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string.lstrip("#").strip()
    code_lines = {i + 1 for i, line in enumerate(source.splitlines()) if line.strip() and not line.strip().startswith("#")}
    out = {}
    for node in ast.parse(source).body[0].body:  # type: ignore[attr-defined]
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        first, last = node.lineno, node.end_lineno or node.lineno
        trailing = comments.get(first) or comments.get(last)
        if trailing:
            out[node.target.id] = trailing
            continue
        above, line = [], first - 1
        while line in comments and line not in code_lines:
            above.insert(0, comments[line])
            line -= 1
        out[node.target.id] = " ".join(above)
    return out


class Registry:
    """Maps (kind, name) to a :class:`Component`.

    Plugins fill it from ``codemoe_register_components``; :func:`codemoe.core.build_registry`
    records which plugin registered what, so duplicates name both plugins.
    """

    def __init__(self) -> None:
        self._items: dict[tuple[str, str], Component] = {}
        self._plugin = "<direct>"
        self.preset_dirs: list[Path] = []  # the plugins' shipped presets/ folders, set by build_registry

    @contextmanager
    def registering_as(self, plugin: str) -> Iterator[Registry]:
        """Attribute the registrations made inside the block to ``plugin``."""
        previous, self._plugin = self._plugin, plugin
        try:
            yield self
        finally:
            self._plugin = previous

    def register(
        self,
        kind: str,
        name: str,
        factory: Callable[..., Any] | str,
        config: type | str | None = None,
        *,
        summary: str = "",
    ) -> None:
        """Register ``factory`` as component ``name`` of ``kind``.

        ``factory(config, **kwargs)`` is called with an instance of ``config`` (a dataclass), or
        ``factory(**kwargs)`` when ``config`` is None. ``summary`` is the one line that
        ``codemoe components`` prints; by default the first line of the factory's docstring.
        """
        key = (kind, name)
        if key in self._items:
            first = self._items[key]
            raise RegistryError(
                f"{kind} '{name}' is registered twice: by plugin '{first.plugin}' and by plugin "
                f"'{self._plugin}'. Rename one, or block a plugin with CODEMOE_DISABLE_PLUGINS."
            )
        if not summary and not isinstance(factory, str):
            summary = (factory.__doc__ or "").strip().splitlines()[0] if factory.__doc__ else ""
        self._items[key] = Component(kind, name, factory, config, self._plugin, summary)

    def kinds(self) -> list[str]:
        """Every kind that has at least one component, sorted."""
        return sorted({kind for kind, _ in self._items})

    def names(self, kind: str) -> list[str]:
        """The registered names of ``kind``, sorted."""
        return sorted(name for k, name in self._items if k == kind)

    def components(self, kind: str | None = None) -> list[Component]:
        """All components, or those of one kind, sorted by (kind, name)."""
        return [self._items[key] for key in sorted(self._items) if kind is None or key[0] == kind]

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self._items

    def get(self, kind: str, name: str, *, where: str = "") -> Component:
        """Return the component, or raise a :class:`RegistryError` listing the valid names."""
        try:
            return self._items[(kind, name)]
        except KeyError:
            pass
        at = f" at '{where}'" if where else ""
        valid = self.names(kind)
        if not valid:
            kinds = ", ".join(self.kinds()) or "none"
            raise RegistryError(
                f"unknown {kind} '{name}'{at}: no plugin registers components of kind '{kind}'"
                f"{did_you_mean(kind, self.kinds())}. Known kinds: {kinds}."
            ) from None
        raise RegistryError(
            f"unknown {kind} '{name}'{at}{did_you_mean(name, valid)}. "
            f"Valid {kind} names: {', '.join(valid)}."
        ) from None

    def make_config(self, kind: str, spec: Mapping[str, Any] | str, *, where: str = "") -> Any:
        """Validate ``spec`` (``{name: ..., **options}`` or a bare name) into the config dataclass."""
        from codemoe.core.config import validate_component

        return validate_component(self, kind, spec, where=where)

    def portable(self, kind: str, spec: Mapping[str, Any] | str, *, where: str = "") -> tuple[Any, Any]:
        """``(factory, config)``: what another process needs to build the component of ``spec``
        itself, with :func:`build_portable` (both pickle when the factory is a module-level name and
        the config a dataclass of plain values). Refused with a ``ConfigError`` naming ``where`` for a
        component whose factory builds nested components from this registry (``registry`` parameter)."""
        from codemoe.core.config import spec_name

        component = self.get(kind, spec_name(kind, spec, where=where), where=where)
        if _takes_registry(_resolve(component.factory)):
            raise ConfigError(
                f"{kind} '{component.name}'{f' at {where!r}' if where else ''} builds nested components from the "
                "registry, so it cannot be built in another process"
            )
        config = self.make_config(kind, spec, where=where) if component.config is not None else None
        return component.factory, config

    def build(self, kind: str, spec: Mapping[str, Any] | str, *, where: str = "", **kwargs: Any) -> Any:
        """Validate ``spec`` and build the component; ``kwargs`` go to the factory.

        ``spec`` is a bare name or a mapping with ``name`` and options; ``where`` is the config key
        path that errors name. A factory with a ``registry`` parameter gets this registry, so the
        components it builds inside (a recipe's parts, a model's router, a suite's task format) are
        found among every plugin of the run.
        """
        from codemoe.core.config import spec_name

        name = spec_name(kind, spec, where=where)
        component = self.get(kind, name, where=where)
        config = self.make_config(kind, spec, where=where)
        if "registry" not in kwargs and _takes_registry(_resolve(component.factory)):
            kwargs["registry"] = self  # nested components come from this registry, plugins included
        if component.config is None:
            return component.build(**kwargs)
        return component.build(config, **kwargs)


def build_portable(factory: Callable[..., Any] | str, config: Any, **kwargs: Any) -> Any:
    """Build a component from :meth:`Registry.portable`'s ``(factory, config)``, in any process."""
    factory = _resolve(factory)
    return factory(**kwargs) if config is None else factory(config, **kwargs)


@functools.cache
def _takes_registry(factory: Callable[..., Any]) -> bool:
    """Whether ``factory`` has a ``registry`` parameter (a component that builds nested components)."""
    try:
        return "registry" in inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a builtin or a class without an inspectable signature
        return False
