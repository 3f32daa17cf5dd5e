"""Which engine an asynchronous rl stage samples from: on CPU the embedded engine runs in a child
process of its own unless the spec says otherwise; the synchronous stage keeps the in-process
engine on the trainer's own policy module."""

from __future__ import annotations

import pytest
import torch
from codemoe.rl.stages import RLStageConfig, _engine_spec


@pytest.mark.parametrize(
    ("engine", "max_staleness", "expected"),
    [
        ({"name": "embedded"}, 1, {"name": "embedded", "process": True}),
        ("embedded", 0, {"name": "embedded", "process": True}),
        ({"name": "embedded", "prefix_cache_tokens": 64}, 2, {"name": "embedded", "prefix_cache_tokens": 64, "process": True}),
        ({"name": "embedded", "process": False}, 1, {"name": "embedded", "process": False}),  # said: kept
        ({"name": "embedded", "process": None}, 1, {"name": "embedded", "process": True}),  # a resolved default
        ({"name": "embedded"}, None, {"name": "embedded"}),  # synchronous: the trainer's own module
        ({"name": "sglang", "base_url": "http://127.0.0.1:1"}, 1, {"name": "sglang", "base_url": "http://127.0.0.1:1"}),
    ],
)
def test_an_asynchronous_stage_on_cpu_serves_the_embedded_engine_from_a_child_process(engine, max_staleness, expected):
    cfg = RLStageConfig(engine=engine, max_staleness=max_staleness)
    spec = _engine_spec(cfg, torch.nn.Linear(2, 2))
    assert ({"name": spec} if isinstance(spec, str) else dict(spec)) == expected


def test_a_model_off_the_cpu_keeps_the_in_process_engine():
    cfg = RLStageConfig(engine={"name": "embedded"}, max_staleness=1)
    assert _engine_spec(cfg, torch.nn.Linear(2, 2, device="meta")) == {"name": "embedded"}
