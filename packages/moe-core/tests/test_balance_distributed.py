"""The global-batch scope over a real two-process gloo group: 1.0 at balance at any world size."""


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



@pytest.mark.slow
def test_global_scope_reduces_loads_over_data_parallel_ranks(run_ranks):
    for result in run_ranks(WORKER, timeout=120):
        assert result["global"] == pytest.approx(1.0)  # balanced over the global batch
        assert result["micro_batch"] == pytest.approx(2.0)  # each rank's own half is imbalanced
        assert result["global_collapsed"] == pytest.approx(4.0)  # all on one expert everywhere: E
