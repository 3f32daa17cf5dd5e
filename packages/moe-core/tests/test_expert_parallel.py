"""Expert parallelism over a real two-process gloo group, against one process holding every expert; and
``split_experts``, which turns a whole model into each rank's share."""

from pathlib import Path

import pytest

WORKER = """
import json, torch, torch.distributed as dist
from codemoe.core.moe import AllToAllDispatcher, GroupedExperts, LoopExperts
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
E, H, I, T, k = 4, 8, 4, 6, 2
local = E // world
torch.manual_seed(0)
reference = LoopExperts(E, H, I)
with torch.no_grad():
    reference.gate_up_proj.normal_(0, 0.3)
    reference.down_proj.normal_(0, 0.3)
xs = torch.randn(world, T, H)
idx = torch.rand(world, T, E).argsort(-1)[..., :k]
idx[0, 0] = torch.tensor([3, -1])  # an unrouted slot
ws = torch.rand(world, T, k)
probes = torch.randn(world, T, H)

# the reference: every rank's tokens through all experts in one process
ref_x, ref_w = xs.clone().requires_grad_(), ws.clone().requires_grad_()
ref_out = torch.stack([reference(ref_x[q], idx[q], ref_w[q]) for q in range(world)])
(ref_out * probes).sum().backward()

dispatcher = AllToAllDispatcher()
experts = GroupedExperts(local, H, I, dispatcher=dispatcher)
with torch.no_grad():
    experts.gate_up_proj.copy_(reference.gate_up_proj[rank * local:(rank + 1) * local])
    experts.down_proj.copy_(reference.down_proj[rank * local:(rank + 1) * local])
x, w = xs[rank].clone().requires_grad_(), ws[rank].clone().requires_grad_()
from host_reads import count_host_reads
with count_host_reads() as reads:
    out = experts(x, idx[rank], w)
(out * probes[rank]).sum().backward()
own = idx[rank]
sent = int(((own >= 0) & (own // local != rank)).sum())  # my rows to the other rank's experts
returned = sum(int(((idx[q] >= 0) & (idx[q] // local == rank)).sum()) for q in range(world) if q != rank)
err = lambda a, b: float((a - b).detach().abs().max())
# a whole model whose experts are sharded: each rank holds half of every layer's experts
from codemoe.core.models import build_model
from codemoe.core.models.presets import load_preset
spec = {**load_preset("micro"), "experts": {"name": "grouped", "dispatcher": {"name": "all_to_all"}}}
torch.manual_seed(1)
model = build_model(spec)
ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(rank))
loss = model(ids, labels=ids).loss
loss.backward()
torch.manual_seed(1)
single = build_model({**spec, "experts": {"name": "grouped"}})  # the same weights, every expert here
model_vs_single = abs(float(loss) - float(single(ids, labels=ids).loss))
model_experts = model.model.layers[0].mlp.experts.gate_up_proj.shape[0]
model_grad = float(model.model.layers[1].mlp.experts.down_proj.grad.abs().sum())
# the trainers' way (parallel.ep): the whole model on every rank, then each rank keeps its slice
from codemoe.core.moe.expert_parallel import split_experts
from torch.distributed.device_mesh import init_device_mesh
torch.manual_seed(1)
whole = build_model({**spec, "experts": {"name": "grouped"}})
before = whole.model.layers[0].mlp.experts.gate_up_proj.detach().clone()
split_layers = split_experts(whole, init_device_mesh("cpu", (world,), mesh_dim_names=("ep",)))
weight = whole.model.layers[0].mlp.experts.gate_up_proj
split_vs_single = abs(float(whole(ids, labels=ids).loss) - float(single(ids, labels=ids).loss))

print(json.dumps({
    "model_experts": model_experts,
    "model_loss": float(loss),
    "model_vs_single": model_vs_single,
    "model_grad": model_grad,
    "split_layers": split_layers,
    "split_local": weight.to_local().shape[0],
    "split_global_is_whole": bool(torch.equal(weight.full_tensor(), before)),
    "split_vs_single": split_vs_single,
    "out": err(out, ref_out[rank]),
    "grad_x": err(x.grad, ref_x.grad[rank]),
    "grad_w": err(w.grad, ref_w.grad[rank]),
    "grad_gate_up": err(experts.gate_up_proj.grad, reference.gate_up_proj.grad[rank * local:(rank + 1) * local]),
    "grad_down": err(experts.down_proj.grad, reference.down_proj.grad[rank * local:(rank + 1) * local]),
    "communication": dispatcher.communication(),
    "sent": sent,
    "returned": returned,
    "host_reads": reads,
}))
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_two_ranks_match_one_process_holding_every_expert(run_ranks):
    for result in run_ranks(f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n" + WORKER, timeout=180):
        for name in ("out", "grad_x", "grad_w", "grad_gate_up", "grad_down"):
            assert result[name] < 1e-5, (name, result)
        # a rank sends its rows for the other rank's experts, then the outputs for the rows it received
        rows = result["sent"] + result["returned"]
        assert result["communication"] == {"rows": rows, "bytes": rows * 8 * 4}  # H = 8 fp32 values a row
        assert result["sent"] > 0
        assert result["host_reads"] == ["tolist"]  # the split sizes, once, for both exchanges
        assert result["model_experts"] == 2 and result["model_grad"] > 0
        assert result["model_vs_single"] < 1e-5, result
        # split_experts: 2 of 4 experts here, the global [E, ...] DTensor is the whole model's weight
        assert result["split_layers"] == 2 and result["split_local"] == 2, result
        assert result["split_global_is_whole"] and result["split_vs_single"] < 1e-5, result
