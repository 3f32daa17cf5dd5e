"""Errors raised by codemoe's spine. Each names what was wrong, where, and what to do."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = [
    "CodemoeError",
    "ConfigError",
    "PluginError",
    "RegistryError",
    "did_you_mean",
]


class CodemoeError(Exception):
    """Base of every error codemoe raises on purpose; the CLI prints these without a traceback."""


class ConfigError(CodemoeError, ValueError):
    """A configuration value is missing, misspelled or of the wrong type."""


class RegistryError(CodemoeError, LookupError):
    """A component is unknown, or two plugins registered the same (kind, name)."""


class PluginError(CodemoeError, RuntimeError):
    """A plugin failed to load or implements a hook that does not exist."""


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """Return ``" (did you mean 'x'?)"`` for the closest choice, or ``""`` when none is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""
