"""The memory and communication plan: known answers on the meta device, then the plan against
what real runs measure (a two-rank all-to-all, the peak memory of training steps)."""

import json
import os
import subprocess
import sys

import pytest
import torch
from codemoe.core.cli import main
from codemoe.core.errors import ConfigError
from codemoe.core.memory import FOLLOW_TENSORS_ENV
from codemoe.core.models import build_model, count_parameters
from codemoe.core.models.plan import plan_memory
from codemoe.core.models.presets import load_preset

# --------------------------------------------------------------------------------------------
# known answers
# --------------------------------------------------------------------------------------------


def test_every_rank_stores_its_share_of_the_states(moe_registry):
    total = count_parameters("micro", registry=moe_registry).total
    plan = plan_memory("micro", dp=2, ep=2, registry=moe_registry)
    n = -(-total // 4)  # experts over ep then dp, the rest over dp x ep: a quarter either way
    assert (plan.parameters_total, plan.parameters_per_rank) == (total, n)
    assert (plan.parameters, plan.gradients, plan.optimizer) == (4 * n, 4 * n, 8 * n)
    bf16 = plan_memory("micro", dp=2, ep=2, precision="bf16", registry=moe_registry)
    # fp32 master weights, fp32 gradients and moments: bf16 changes what is computed, not what is stored
    assert (bf16.parameters, bf16.gradients, bf16.optimizer) == (plan.parameters, plan.gradients, plan.optimizer)
    assert bf16.activations_full < plan.activations_full


def test_all_to_all_bytes_known_answer(moe_registry):
    # micro: H = 32, k = 2, two MoE layers; 2 x 64 tokens -> 128 x 2 rows a layer, dispatch and combine
    plan = plan_memory("micro", ep=2, seq=64, micro_batch=2, registry=moe_registry)
    rows = 2 * 128 * 2 * 2 // 2  # half the rows leave the rank under uniform routing over 2 ranks
    assert plan.all_to_all_forward == rows * 32 * 4 == 65536
    assert plan.all_to_all_backward == plan.all_to_all_forward  # the gradients travel back the same way
    four = plan_memory("micro", ep=4, seq=64, micro_batch=2, checkpointing=True, registry=moe_registry)
    assert four.all_to_all_forward == 65536 * 2 * 3 // 4  # (ep - 1) / ep = 3/4 leave instead of 1/2
    assert four.all_to_all_backward == 2 * four.all_to_all_forward  # the recomputed forward exchanges again
    assert plan_memory("micro", dp=4, registry=moe_registry).all_to_all == 0  # no expert parallelism


def test_engine_sync_and_reference_known_answers(moe_registry):
    embedded = plan_memory("micro", dp=2, ep=2, seq=64, micro_batch=3, registry=moe_registry)
    # the embedded engine runs the policy: its share is the KV cache, and nothing is synced
    assert embedded.engine_kv_cache == 3 * 64 * (2 * 2 * 1 * 16 * 4)  # K and V, 2 layers, 1 KV head of 16, fp32
    assert (embedded.weight_sync, embedded.sync_buffer) == (0, 0)
    assert embedded.total == embedded.training_peak + embedded.engine_kv_cache
    external = plan_memory("micro", dp=2, ep=2, seq=64, micro_batch=3, engine="external", registry=moe_registry)
    total = external.parameters_total
    assert external.weight_sync == 4 * total * 3 // 4  # what the rank does not hold, fp32
    # the weights are streamed: one decoder layer gathered whole and converted (split experts are new
    # tensors), and one bucket, while the rank still holds its states
    from codemoe.core.models.plan import SYNC_BUCKET

    with torch.device("meta"):
        layers = build_model("micro", registry=moe_registry).model.layers
    largest = max(sum(p.numel() for p in layer.parameters()) for layer in layers)
    assert external.sync_buffer == 2 * 4 * largest + SYNC_BUCKET and external.engine_kv_cache == 0
    assert external.sync_peak == external.parameters + external.gradients + external.optimizer + external.sync_buffer
    assert external.total == max(external.training_peak, external.sync_peak)
    alone = plan_memory("micro", engine="external", registry=moe_registry)
    assert alone.sync_buffer == 4 * largest + SYNC_BUCKET  # one process: the layer is the weights, its copy is not
    kl = plan_memory("micro", dp=2, ep=2, seq=64, micro_batch=3, reference=True, registry=moe_registry)
    assert kl.reference_weights == 4 * kl.parameters_per_rank  # fp32 shards, no gradients or moments
    assert kl.training_peak == embedded.training_peak + kl.reference_weights


def test_activation_formula_is_what_autograd_saves(moe_registry):
    """The layer and head terms against the bytes a real fp32 forward of tiny saves for backward."""
    import torch
    from codemoe.core.models import build_model

    B, L = 2, 128
    torch.manual_seed(0)
    model = build_model("tiny", registry=moe_registry)
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in weights:
            saved[storage.data_ptr()] = storage.nbytes()  # views of one storage count once
        return t

    ids = torch.randint(0, model.config.vocab_size, (B, L))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(ids, labels=ids)
    plan = plan_memory("tiny", seq=L, micro_batch=B, registry=moe_registry)
    V = model.config.vocab_size
    # the plan adds what is alive but not saved: the logits the output holds and backward's first
    # two fp32 [T, V] gradients
    formula = plan.activations_full - B * L * V * (4 + 2 * 4)
    # not in the formula: the rotary cos/sin tables and the loss's scalars (under 0.5% of tiny's)
    assert abs(formula - sum(saved.values())) <= 0.01 * formula, (formula, sum(saved.values()))


def test_the_1t_preset_is_planned_without_allocating_it(moe_registry):
    mesh = {"dp": 16, "ep": 64, "seq": 8192, "precision": "bf16", "checkpointing": True, "gpu_memory_gb": 80}
    plan = plan_memory("moe_1t", **mesh, registry=moe_registry)
    assert 1.02e12 < plan.parameters_total < 1.04e12 and plan.moe_layers == 61
    assert plan.parameters_per_rank == -(-plan.parameters_total // 1024)
    assert plan.fits  # 1024 GPUs of 80 GB, the embedded engine on the policy with one sample's cache
    external = plan_memory("moe_1t", **mesh, engine="external", registry=moe_registry)
    # the training step is the same, but the whole state dict an external engine is sent is 4 TB
    assert external.training_peak == plan.training_peak and not external.fits
    alone = plan_memory("moe_1t", seq=8192, registry=moe_registry, gpu_memory_gb=141)
    assert alone.fits is False and alone.parameters > 4e12
    assert plan_memory("micro", registry=moe_registry).fits is None  # no GPU size given, no verdict


@pytest.mark.parametrize(
    ("options", "key"),
    [({"ep": 3}, "'ep'"), ({"dp": 0}, "'dp'"), ({"precision": "fp16"}, "'precision'"), ({"seq": 10**6}, "'seq'"),
     ({"engine_batch": -1}, "'engine_batch'"), ({"engine": "sglang"}, "'engine'"),
     ({"gpu_memory_gb": 0}, "'gpu_memory'")],
)  # fmt: skip
def test_bad_options_name_their_key(moe_registry, options, key):
    with pytest.raises(ConfigError, match=key):
        plan_memory("micro", **options, registry=moe_registry)


def test_models_the_plan_cannot_count_are_refused_by_name(moe_registry):
    with pytest.raises(ConfigError, match="GptOssMLP is neither"):  # gpt_oss's experts are its own block
        plan_memory("tiny_gpt_oss", seq=64, registry=moe_registry)
    with pytest.raises(ConfigError, match="'ep': 2 expert-parallel ranks, but the model has no MoE layer"):
        plan_memory("tiny_llama", ep=2, seq=64, registry=moe_registry)


def test_a_model_yaml_path_is_planned_like_a_preset(tmp_path, moe_registry):
    path = tmp_path / "one_layer.yaml"
    path.write_text("_base_: micro\nnum_layers: 1\n")
    plan = plan_memory(str(path), registry=moe_registry)
    spec = {**load_preset("micro"), "num_layers": 1}
    assert plan.parameters_total == count_parameters(spec, registry=moe_registry).total
    with pytest.raises(ConfigError, match="does not exist"):
        plan_memory(str(tmp_path / "missing.yaml"), registry=moe_registry)


def test_cli_prints_the_table_and_writes_the_json(tmp_path, capsys, moe_registry):
    out = tmp_path / "plan.json"
    args = ["model", "plan", "micro", "--ep", "2", "--seq", "64", "--micro-batch", "2", "--gpu-memory", "80"]
    assert main([*args, "--json", str(out)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "all-to-all forward" in text and "fits in 80 GB per GPU" in text
    written = json.loads(out.read_text())
    expected = plan_memory("micro", ep=2, seq=64, micro_batch=2, gpu_memory_gb=80, registry=moe_registry)
    assert written == json.loads(json.dumps(expected.as_dict()))
    assert main(["model", "plan", "micro", "--ep", "3"]) == 2
    assert "'ep': 3 does not divide the 4 experts" in " ".join(capsys.readouterr().err.split())


# --------------------------------------------------------------------------------------------
# the plan against measurements
# --------------------------------------------------------------------------------------------

# Both ranks of an ep=2, dp=1 mesh build the model with the all_to_all dispatcher (each holds half
# of every layer's experts) and run a forward and backward of B x L tokens. Forward bytes: the
# dispatchers' own counts. Backward bytes: every all_to_all_single that backward issues, counted
# as the rows its input sends to the other rank (the wrapper only counts, then calls torch's).
EXCHANGE = """
import json, sys, torch, torch.distributed as dist
from codemoe.core.models import build_model, default_registry
from codemoe.core.models.presets import load_preset
from codemoe.core.moe import checkpoint_layers, moe_blocks
torch.set_num_threads(1)  # two ranks on two cores: spinning intra-op threads only cost CPU
registry = default_registry()
dist.init_process_group("gloo")
rank = dist.get_rank()
sent = {"bytes": 0, "on": False}
torch_all_to_all = dist.all_to_all_single
def counting(output, input, output_split_sizes=None, input_split_sizes=None, group=None, async_op=False):
    if sent["on"]:
        splits = input_split_sizes or [input.shape[0] // 2] * 2
        row = input[0].numel() * input.element_size() if input.shape[0] else 0
        sent["bytes"] += (sum(splits) - splits[rank]) * row
    return torch_all_to_all(output, input, output_split_sizes, input_split_sizes, group=group, async_op=async_op)
dist.all_to_all_single = counting
results = []
for preset, B, L, ckpt in json.loads(sys.argv[1]):
    spec = {**load_preset(preset), "experts": {"name": "grouped", "dispatcher": {"name": "all_to_all"}}}
    torch.manual_seed(0)  # the same weights on both ranks, each keeping its half of the experts
    model = build_model(spec, registry=registry)
    if ckpt:
        checkpoint_layers(model.model.layers)
    ids = torch.randint(0, model.config.vocab_size, (B, L), generator=torch.Generator().manual_seed(rank))
    loss = model(ids, labels=ids).loss
    forward = sum(block.experts.dispatcher.communication()["bytes"] for block in moe_blocks(model))
    sent.update(bytes=0, on=True)
    loss.backward()
    sent["on"] = False
    results.append({"forward": forward, "backward": sent["bytes"]})
print(json.dumps(results))
dist.destroy_process_group()
"""

EXCHANGES = [("micro", 4, 32, False), ("micro", 4, 32, True), ("tiny", 2, 64, False)]


@pytest.mark.slow
def test_all_to_all_bytes_match_a_two_rank_run(run_ranks, moe_registry):
    source = EXCHANGE.replace("sys.argv[1]", repr(json.dumps(EXCHANGES)))
    for measured in run_ranks(source, timeout=240):
        for (preset, B, L, ckpt), got in zip(EXCHANGES, measured, strict=True):
            plan = plan_memory(preset, ep=2, seq=L, micro_batch=B, checkpointing=ckpt, registry=moe_registry)
            # 25%: the plan assumes uniform routing, a fresh router's is close to it. Backward also
            # sends each row's routing-weight gradient (1 value against H) and, recomputing under
            # checkpointing, the routing weights and per-expert counts: a few percent at H = 32.
            assert abs(got["forward"] - plan.all_to_all_forward) <= 0.25 * plan.all_to_all_forward, (preset, got)
            assert abs(got["backward"] - plan.all_to_all_backward) <= 0.25 * plan.all_to_all_backward, (preset, got)


# A fresh process, so nothing the test process holds counts; it measures each case in turn. Short
# warm-up steps first load what is loaded once (kernels, autograd's threads, the checkpointing
# machinery); then the peak above that baseline covers building the model, its AdamW and two steps
# (the second runs beside the moments and gradients the first left, as every step of a run does). With
# FOLLOW_TENSORS_ENV glibc maps and unmaps each large allocation, so memory freed earlier (the
# warm-up's, the previous case's) is given back rather than silently reused below the baseline.
TRAIN = """
import gc, json, sys, torch
from codemoe.core.memory import PeakMemory
from codemoe.core.models import build_model, default_registry
from codemoe.core.models.presets import load_preset
from codemoe.core.moe import checkpoint_layers
registry = default_registry()
def train(preset, B, L, ckpt, steps):
    torch.manual_seed(0)
    model = build_model(load_preset(preset), registry=registry)
    if ckpt:
        checkpoint_layers(model.model.layers)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, model.config.vocab_size, (B, L), generator=torch.Generator().manual_seed(1))
    for _ in range(steps):  # as the trainers step: the forward runs beside the last step's gradients
        out = model(ids, labels=ids)  # the trainers hold the output (its logits) through backward
        optimizer.zero_grad(set_to_none=True)
        out.loss.backward()
        del out
        optimizer.step()
peaks = []
cases = json.loads(sys.argv[1])
for preset, *_ in cases:
    train(preset, 1, 16, False, steps=1)
    train(preset, 1, 16, True, steps=1)
for case in cases:
    gc.collect()
    with PeakMemory() as peak:
        train(*case, steps=2)
    peaks.append({"peak": peak.bytes, "source": peak.source})
print(json.dumps(peaks))
"""

TRAINING = [(p, B, L, ckpt) for p, B, L in [("micro", 4, 512), ("tiny", 2, 256)] for ckpt in (False, True)]


@pytest.mark.slow
def test_training_peak_matches_the_measured_peak(moe_registry):
    # one intra-op thread: memory does not depend on it, and idle threads spinning on a shared
    # two-core machine cost several times the step's CPU
    env = {**os.environ, **FOLLOW_TENSORS_ENV, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-c", TRAIN, json.dumps(TRAINING)]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr
    for (preset, B, L, ckpt), measured in zip(TRAINING, json.loads(run.stdout.strip().splitlines()[-1]), strict=True):
        assert measured["source"] == "vmhwm"
        plan = plan_memory(preset, seq=L, micro_batch=B, checkpointing=ckpt, registry=moe_registry)
        # parameters + optimizer + the largest of the forward beside the last step's gradients,
        # backward's start and the AdamW step, in one fp32 process. 25% covers what the formulas
        # leave out (allocator rounding, the interpreter's own pages, a layer's backward temporaries
        # under checkpointing): measured within 1% for tiny and 10% for micro, whose 8-13 MB those
        # pages move by a few percent from run to run
        assert abs(plan.training_peak - measured["peak"]) <= 0.25 * measured["peak"], (preset, ckpt, plan, measured)
        assert plan.activations > plan.gradients  # activations, not states, set these peaks: the check reads them


# Per rank on a mesh: each of two gloo ranks measures its own peak, as above, with the model laid
# out as the trainers lay it (codemoe.rl.distributed.shard_model, which core's tests cannot import):
# experts split over ep by core's split_experts and FSDP2-sharded over dp, every layer and the root
# FSDP2-sharded over both ranks. The model is built whole inside the measured block and then
# sharded; its whole fp32 copy (8 MB for tiny) stays below the step's peak.
MESH = """
import gc, json, sys, torch, torch.distributed as dist
from codemoe.core.memory import PeakMemory
from codemoe.core.models import build_model, default_registry
from codemoe.core.models.presets import load_preset
from codemoe.core.moe import moe_blocks
from codemoe.core.moe.expert_parallel import split_experts
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
torch.set_num_threads(1)
registry = default_registry()
dist.init_process_group("gloo")
def train(preset, B, L, dp, ep, steps):
    torch.manual_seed(0)
    model = build_model(load_preset(preset), registry=registry)
    if ep > 1:
        mesh = init_device_mesh("cpu", (dp, ep), mesh_dim_names=("dp", "ep"))
        split_experts(model, mesh["ep"])
        for block in moe_blocks(model):
            fully_shard(block.experts, mesh=mesh["dp"])
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(1 + dist.get_rank())
    ids = torch.randint(0, model.config.vocab_size, (B, L), generator=generator)
    for _ in range(steps):
        out = model(ids, labels=ids)
        optimizer.zero_grad(set_to_none=True)
        out.loss.backward()
        del out
        optimizer.step()
peaks = []
for preset, B, L, dp, ep in json.loads(sys.argv[1]):
    train(preset, 1, 16, dp, ep, steps=1)
    gc.collect()
    with PeakMemory() as peak:
        train(preset, B, L, dp, ep, steps=2)
    peaks.append(peak.bytes)
print(json.dumps(peaks))
dist.destroy_process_group()
"""

MESHES = [("tiny", 1, 128, 2, 1), ("tiny", 1, 128, 1, 2)]


@pytest.mark.slow
def test_per_rank_peak_on_a_mesh_matches_the_plan(run_ranks, moe_registry, monkeypatch):
    for name, value in FOLLOW_TENSORS_ENV.items():
        monkeypatch.setenv(name, value)  # run_ranks passes this process's environment to the ranks
    source = MESH.replace("sys.argv[1]", repr(json.dumps(MESHES)))
    for peaks in run_ranks(source, timeout=240):
        for (preset, B, L, dp, ep), measured in zip(MESHES, peaks, strict=True):
            plan = plan_memory(preset, dp=dp, ep=ep, seq=L, micro_batch=B, registry=moe_registry)
            # half the states on each rank, FSDP's gathered root and layers, and under ep the rows
            # the all-to-all brought: measured within 6% on each rank; 25% as above
            assert abs(plan.training_peak - measured) <= 0.25 * measured, (dp, ep, B, L, plan.training_peak, measured)
            whole = plan_memory(preset, seq=L, micro_batch=B, registry=moe_registry)
            assert whole.training_peak > 1.25 * measured  # the check tells a sharded layout from a whole one
