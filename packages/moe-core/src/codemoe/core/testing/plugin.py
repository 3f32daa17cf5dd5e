"""The conformance kit's pytest plugin: the fixtures its contracts use.

Turn it on in the root ``conftest.py`` of the tests that use the kit::

    pytest_plugins = ["codemoe.core.testing.plugin"]

or with ``pytest -p codemoe.core.testing.plugin``. It is not loaded automatically (no ``pytest11``
entry point), so installing codemoe-core changes no other project's test session. Nothing here
imports torch at import time.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

try:
    import pytest
except ImportError as exc:  # the kit is a pytest plugin: its users test with pytest
    raise ImportError("the codemoe conformance kit needs pytest: pip install 'codemoe-core[testing]'") from exc

__all__ = ["codemoe_executor", "codemoe_registry"]


@pytest.fixture(scope="session")
def codemoe_registry() -> Any:
    """The registry of every installed codemoe plugin (entry points), built once per session.

    A contract whose class sets ``plugins = [(name, module_or_object), ...]`` registers those too
    (a plugin under test that is not installed).
    """
    from codemoe.core.plugins import build_plugin_manager, build_registry

    return build_registry(build_plugin_manager())


@pytest.fixture(scope="session")
def codemoe_executor(codemoe_registry: Any) -> Iterator[Any]:
    """The ``local`` executor (the sandbox's isolated worker pool), for contracts that run code.

    Every program a contract runs goes through it: the kit never runs a program on the host.
    """
    executor = codemoe_registry.build("executor", {"name": "local", "workers": 1}, where="codemoe_executor")
    try:
        yield executor
    finally:
        executor.close()
