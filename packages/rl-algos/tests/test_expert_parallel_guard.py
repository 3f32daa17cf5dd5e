"""Training refuses a model whose experts are already split over every rank (built with the
all_to_all dispatcher), with or without the ``parallel.ep`` mesh, instead of sharding them a second
time and losing experts silently; the ``local`` dispatcher shards (the mesh splits the experts
itself, see test_expert_mesh.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# each rank writes its results to a file of its own: two ranks printing at once under torchrun's
# --tee can land on one line of the launcher's stdout
SCRIPT = """
import json, pathlib, sys
from codemoe.core.errors import ConfigError
from codemoe.core.models import build_model
from codemoe.rl.distributed import ParallelConfig, device_mesh, init_distributed, shard_model
env = init_distributed()
spec = {"name": "qwen3_moe", "hidden_size": 16, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1, "head_dim": 8,
        "num_experts": 4, "moe_intermediate_size": 8, "max_position_embeddings": 32,
        "experts": {"name": "grouped", "dispatcher": {"name": sys.argv[1]}}}
out = pathlib.Path(sys.argv[3])
for ep in map(int, sys.argv[2].split(",")):  # without the mesh (ep=1), then with it
    model = build_model(spec, vocab_size=32)
    try:
        shard_model(model, env, mesh=device_mesh(ParallelConfig(ep=ep), env, model))
        error = ""
    except ConfigError as exc:
        error = str(exc)
    (out / f"{sys.argv[1]}-ep{ep}-rank{env.rank}.json").write_text(json.dumps({"rank": env.rank, "ep": ep, "error": error}))
env.close()
"""


def _ranks(tmp_path, dispatcher: str, eps: str = "1") -> list[dict]:
    script = tmp_path / "guard.py"
    script.write_text(SCRIPT)
    out = tmp_path / f"results-{dispatcher}"
    out.mkdir()
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               str(script), dispatcher, eps, str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, check=True)
    return sorted((json.loads(path.read_text()) for path in out.glob("*.json")), key=lambda r: (r["ep"], r["rank"]))


@pytest.mark.slow
@pytest.mark.distributed
def test_fsdp_over_expert_parallel_experts_is_refused_on_every_rank(tmp_path):
    split = _ranks(tmp_path, "all_to_all", eps="1,2")
    assert [(r["ep"], r["rank"]) for r in split] == [(1, 0), (1, 1), (2, 0), (2, 1)]
    for result in split:
        assert "expert-parallel dispatcher (all_to_all) over every rank" in result["error"], result
        assert "model.layers.0.mlp.experts" in result["error"]
        assert "set 'parallel.ep'" in result["error"]  # the way to split experts that works
    local = _ranks(tmp_path, "local")
    assert [r["error"] for r in local] == ["", ""]
