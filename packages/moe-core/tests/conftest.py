"""Fixtures of the MoE layer and model tests: the plugin registry and tiny model specs.

``float_close.py`` next to this file holds the float32 equality the block and expert tests share.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from codemoe.core.models.presets import load_preset

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def moe_registry():
    """The registry of every installed plugin (built once: loading plugins takes seconds)."""
    from codemoe.core.models import default_registry

    return default_registry()


@pytest.fixture
def tiny_spec() -> dict:
    """A two-layer model small enough for a test (tens of thousands of parameters)."""
    return load_preset("micro")


@pytest.fixture
def run_ranks():
    """``run_ranks(source, world=2, timeout=...)``: run ``source`` as ``world`` gloo ranks on
    127.0.0.1 and return each rank's last stdout line parsed as JSON (fails if a rank fails)."""
    import json
    import os
    import socket
    import subprocess
    import sys

    def run(source: str, world: int = 2, timeout: float = 180) -> list[dict]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        procs = []
        for rank in range(world):
            env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
            procs.append(subprocess.Popen([sys.executable, "-c", source], env=env, stdout=subprocess.PIPE, text=True))
        outputs = [p.communicate(timeout=timeout)[0] for p in procs]
        assert all(p.returncode == 0 for p in procs), outputs
        return [json.loads(text.strip().splitlines()[-1]) for text in outputs]

    return run
