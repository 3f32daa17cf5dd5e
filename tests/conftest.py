"""Fixtures of the cross-package flows: the registry with every installed plugin, a tiny checkpoint.

Kept free of torch at import time, like the root conftest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from codemoe.core import Hooks, build_plugin_manager, build_registry
from codemoe.core.models.presets import load_preset


@pytest.fixture(scope="session")
def registry():
    """The registry with every installed plugin, as ``codemoe run`` builds it."""
    return build_registry(build_plugin_manager())


@pytest.fixture
def spine() -> tuple[Any, Any, Hooks]:
    """(plugin manager, registry, hooks) with every installed plugin."""
    pm = build_plugin_manager()
    return pm, build_registry(pm), Hooks(pm)


# vocab_size comes from the tokenizer at build time
TINY_MODEL = {**load_preset("micro"), "num_layers": 1, "moe_intermediate_size": 32, "max_position_embeddings": 512}


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untrained tiny MoE checkpoint with a tokenizer trained on the synthetic suite."""
    import torch
    from codemoe.core.models import build_model, save_pretrained
    from codemoe.core.tokenizer import train_tokenizer
    from codemoe.evals.synthetic import SyntheticSuite

    torch.set_num_threads(1)
    torch.manual_seed(0)
    tasks = SyntheticSuite().tasks("train")
    tokenizer = train_tokenizer([t.prompt + t.reference_solution for t in tasks], vocab_size=384)
    model = build_model(TINY_MODEL, vocab_size=len(tokenizer))
    return save_pretrained(model, tokenizer, tmp_path_factory.mktemp("tiny") / "checkpoint")
