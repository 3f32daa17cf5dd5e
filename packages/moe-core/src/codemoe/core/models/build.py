"""Building models from specs: a preset name or ``{name: <model component>, **options}``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["build_model", "default_registry", "resolve_spec"]


def default_registry() -> Any:
    """The registry of every installed codemoe plugin."""
    from codemoe.core.plugins import build_plugin_manager, build_registry

    return build_registry(build_plugin_manager())


def resolve_spec(spec: Mapping[str, Any] | str) -> dict[str, Any]:
    """A model spec as a mapping: a string names a model preset (``codemoe/core/presets/models/``, or the overlay's ``models/``)."""
    from codemoe.core.models.presets import load_preset
    from omegaconf import DictConfig, OmegaConf

    if isinstance(spec, str):
        return load_preset(spec)
    if isinstance(spec, DictConfig):
        return OmegaConf.to_container(spec, resolve=True)  # type: ignore[return-value]
    return dict(spec)


def build_model(spec: Mapping[str, Any] | str, *, vocab_size: int | None = None, registry: Any = None):
    """Build a ``transformers`` causal LM with codemoe MoE blocks from a spec or preset name.

    ``vocab_size`` overrides the spec's (use the tokenizer's ``len(tokenizer)``); ``registry``
    defaults to the one built from every installed plugin. Build under ``torch.device("meta")``
    to get the structure without allocating it.
    """
    registry = registry or default_registry()
    return registry.build("model", resolve_spec(spec), where="model", registry=registry, vocab_size=vocab_size)
