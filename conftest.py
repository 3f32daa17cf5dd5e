"""Fixtures shared by every package's tests and the cross-package tests in tests/.

Kept free of torch at import time: the sandbox's tests run in an environment without torch.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

# the conformance kit's fixtures (codemoe_registry, codemoe_executor), where codemoe-core is installed
# (the sandbox's own tests also run in an environment with nothing of codemoe's but the sandbox)
pytest_plugins = ["pytester"] + (["codemoe.core.testing.plugin"] if importlib.util.find_spec("codemoe.core") else [])

REPO_ROOT = Path(__file__).resolve().parent


@pytest.fixture
def repo_root() -> Path:
    """The checkout's root folder."""
    return REPO_ROOT


@pytest.fixture
def registry_dir() -> Path:
    """The checkout's registry/ folder (pipelines and presets)."""
    return REPO_ROOT / "registry"


@pytest.fixture
def run_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary working directory so runs land under ``tmp_path/runs``."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CODEMOE_REGISTRY", str(REPO_ROOT / "registry"))
    return tmp_path


@pytest.fixture
def write_pipeline(tmp_path: Path):
    """Writes a pipeline YAML under ``tmp_path`` and returns its path."""

    def write(text: str, name: str = "p") -> Path:
        path = tmp_path / f"{name}.yaml"
        path.write_text(text)
        return path

    return write


@pytest.fixture(autouse=True)
def _no_disabled_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests see every installed plugin unless they block some themselves."""
    if "CODEMOE_DISABLE_PLUGINS" in os.environ:
        monkeypatch.delenv("CODEMOE_DISABLE_PLUGINS")
