"""Fixtures of the rl-algos tests: the real registry and deterministic torch settings.

The toy-task helpers live in ``rl_toy.py`` next to this file, importable by the tests and by the
scripts they start.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from codemoe.core import build_plugin_manager, build_registry

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def registry():
    """The registry with every installed plugin, as ``codemoe run`` builds it."""
    return build_registry(build_plugin_manager())


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)
    torch.manual_seed(0)
