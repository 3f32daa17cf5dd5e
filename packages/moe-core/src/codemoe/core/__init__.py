"""codemoe-core: the plugin spine (hooks, registry, config, runs, CLI) and the MoE model code.

Importing ``codemoe.core`` does not import torch; the model code lives in submodules.
"""

from codemoe.core.config import RunConfig, compose, find_registry_dir, validate_component, validate_pipeline
from codemoe.core.errors import CodemoeError, ConfigError, PluginError, RegistryError
from codemoe.core.hookspecs import hookimpl, hookspec
from codemoe.core.plugins import Hooks, PluginInfo, PluginManager, build_plugin_manager, build_registry, plugin_infos
from codemoe.core.registry import Component, Registry
from codemoe.core.runs import MetricsWriter, RunContext, StageInfo, run_pipeline

__all__ = [
    "CodemoeError",
    "Component",
    "ConfigError",
    "Hooks",
    "MetricsWriter",
    "PluginError",
    "PluginInfo",
    "PluginManager",
    "Registry",
    "RegistryError",
    "RunConfig",
    "RunContext",
    "StageInfo",
    "build_plugin_manager",
    "build_registry",
    "compose",
    "find_registry_dir",
    "hookimpl",
    "hookspec",
    "plugin_infos",
    "run_pipeline",
    "validate_component",
    "validate_pipeline",
]
