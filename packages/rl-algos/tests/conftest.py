"""Fixtures of the rl-algos tests: the real registry, and small deterministic torch settings."""

from __future__ import annotations

import pytest
import torch
from codemoe.core import build_plugin_manager, build_registry


@pytest.fixture(scope="session")
def registry():
    """The registry with every installed plugin, as ``codemoe run`` builds it."""
    return build_registry(build_plugin_manager())


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)
    torch.manual_seed(0)
