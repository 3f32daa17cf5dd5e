"""Fixtures of the router tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def registry():
    """The registry of every installed plugin (built once)."""
    from codemoe.core.models import default_registry

    return default_registry()


def make_router(registry, spec: dict, hidden_size: int = 16, num_experts: int = 8, seed: int = 0):
    """A router from its spec with normal(0, 1) weights."""
    import torch

    router = registry.build("router", spec, hidden_size=hidden_size, num_experts=num_experts)
    torch.manual_seed(seed)
    with torch.no_grad():
        router.weight.normal_()
    return router


@pytest.fixture
def router_factory(registry):
    return lambda spec, **kw: make_router(registry, spec, **kw)
