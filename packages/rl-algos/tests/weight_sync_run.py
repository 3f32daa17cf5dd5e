"""Two FSDP2 ranks push a sharded policy's weights to one ``codemoe serve`` (in rank 0's process)
through the ``sglang`` engine, the way the trainer does (:func:`codemoe.rl.weight_sync.sync_engine`).

Started by test_weight_sync.py under ``torchrun``; writes ``rank{N}.json`` in the folder it is given:
the version each rank adopted and, on rank 0, the largest difference between the served weights and
the policy's, and the error each rank raised for a server that refuses the weights.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from codemoe.core.contracts import EngineError
from codemoe.core.models import build_model
from codemoe.rl.distributed import init_distributed, shard_model
from codemoe.rl.weight_sync import sync_engine
from codemoe.serving.embedded import EmbeddedEngine
from codemoe.serving.handlers import ServingApp
from codemoe.serving.remote import SGLangEngine, SGLangEngineConfig
from codemoe.serving.server import ApiServer

out = Path(sys.argv[1])
torch.set_num_threads(1)
env = init_distributed()
torch.manual_seed(0)
served = build_model("tiny")  # what the server starts with
torch.manual_seed(5)
policy = build_model("tiny")  # the trainer's new weights
want = {k: v.clone() for k, v in policy.state_dict().items()}
policy = shard_model(policy, env)

server = None
if env.is_main:
    server = ApiServer(ServingApp(EmbeddedEngine(served, None), "p", ""), "127.0.0.1", 0).start()
url = env.all_gather(server.url if server else None)[0]
engine = SGLangEngine(SGLangEngineConfig(base_url=url, bucket_mb=0.05), model=policy)
sync_engine(engine, policy, env)
result = {"version": engine.weight_version}
if env.is_main:
    got = served.state_dict()
    result["max_diff"] = max((got[k] - want[k]).abs().max().item() for k in want)

# A server that refuses (another architecture: none of the names fit): every rank raises, none hangs.
other = None
if env.is_main:
    torch.manual_seed(0)
    other = ApiServer(ServingApp(EmbeddedEngine(build_model("tiny_mixtral"), None), "q", ""), "127.0.0.1", 0).start()
url = env.all_gather(other.url if other else None)[0]
engine = SGLangEngine(SGLangEngineConfig(base_url=url, bucket_mb=0.05), model=policy)
try:
    sync_engine(engine, policy, env)
    result["refused"] = None
except EngineError as exc:
    result["refused"] = str(exc)
dist.barrier()
for running in (server, other):
    if running is not None:
        running.httpd.shutdown()
        running.httpd.server_close()
(out / f"rank{env.rank}.json").write_text(json.dumps(result))
