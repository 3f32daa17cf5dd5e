"""Fixtures of the MoE layer and model tests: the plugin registry and tiny model specs."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def moe_registry():
    """The registry of every installed plugin (built once: loading plugins takes seconds)."""
    from codemoe.core.models import default_registry

    return default_registry()


@pytest.fixture
def tiny_spec() -> dict:
    """A two-layer model small enough for a test (tens of thousands of parameters)."""
    return {
        "name": "qwen3_moe",
        "vocab_size": 64,
        "hidden_size": 32,
        "num_layers": 2,
        "num_heads": 2,
        "num_kv_heads": 1,
        "head_dim": 16,
        "num_experts": 4,
        "moe_intermediate_size": 16,
        "router": {"name": "softmax_topk", "top_k": 2},
    }
