"""The global-batch scope over a real two-process gloo group: 1.0 at balance at any world size."""

import json
import os
import socket
import subprocess
import sys

import pytest

WORKER = """
import json, os, torch, torch.distributed as dist
from codemoe.core.moe import balance_loss
dist.init_process_group("gloo")
rank = dist.get_rank()
experts = 4
# Rank 0 routes to experts 0 and 1, rank 1 to experts 2 and 3: each rank alone is imbalanced,
# the global batch is balanced. Router probabilities follow the local choices.
local = torch.tensor([[0], [1], [0], [1]]) + 2 * rank
probs = torch.nn.functional.one_hot(local[:, 0], experts).float()
skewed = torch.full((3, 1), 2)
print(json.dumps({
    "global": balance_loss(probs, local, scope="global").item(),
    "micro_batch": balance_loss(probs, local, scope="micro_batch").item(),
    "global_collapsed": balance_loss(torch.nn.functional.one_hot(skewed[:, 0], experts).float(), skewed, scope="global").item(),
}))
dist.destroy_process_group()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_global_scope_reduces_loads_over_data_parallel_ranks():
    port, world = _free_port(), 2
    procs = []
    for rank in range(world):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
        procs.append(subprocess.Popen([sys.executable, "-c", WORKER], env=env, stdout=subprocess.PIPE, text=True))
    results = [json.loads(p.communicate(timeout=120)[0].strip().splitlines()[-1]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    for result in results:
        assert result["global"] == pytest.approx(1.0)  # balanced over the global batch
        assert result["micro_batch"] == pytest.approx(2.0)  # each rank's own half is imbalanced
        assert result["global_collapsed"] == pytest.approx(4.0)  # all on one expert everywhere: E
