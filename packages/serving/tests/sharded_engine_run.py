"""One rank of the sharded-engine test (started by ``torchrun`` from test_sharded_engine.py).

``python sharded_engine_run.py OUT MODE``: a micro MoE sharded with FSDP2 (every block, then the
root, as the trainer shards its policy); the engine built on it (``sharded_generation: MODE``)
samples inside ``lockstep()`` with rank 0 making two generate calls and rank 1 one, of other
lengths; an engine over an unsharded copy of the same weights, on the same forward path, samples
the same calls. Each rank writes ``OUT/rank<R>.json``.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from codemoe.core.contracts import EngineError, SamplingParams
from codemoe.core.models import build_model
from codemoe.core.models.presets import load_preset
from codemoe.serving.embedded import EmbeddedEngine, EmbeddedEngineConfig
from torch.distributed.fsdp import fully_shard


def main() -> None:
    out, mode = Path(sys.argv[1]), sys.argv[2]
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = build_model({**load_preset("micro"), "max_position_embeddings": 128}).eval()
    whole = copy.deepcopy(model)
    engine = EmbeddedEngine(model, None, EmbeddedEngineConfig(sharded_generation=mode))  # built before the sharding, as the rl stage builds it
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    g = torch.Generator().manual_seed(rank)
    prompt = lambda n: torch.randint(3, 64, (n,), generator=g).tolist()  # noqa: E731
    calls = [[prompt(5), prompt(9)], [prompt(3)]] if rank == 0 else [[prompt(12)]]
    params = SamplingParams(n=3, max_new_tokens=6 + 5 * rank, seed=11, ignore_eos=rank == 1)
    refused = ""
    try:
        engine.generate(calls[0], params)  # each rank on its own: its forwards would not meet the others'
    except EngineError as exc:
        refused = str(exc)
    with engine.lockstep():
        sharded = [engine.generate(call, params) for call in calls]
    # per block: the model's own forward (no lean decode, no shared-prefix attention); whole: the fast paths
    fast = mode == "whole"
    plain = EmbeddedEngine(whole, None, EmbeddedEngineConfig(lean_decode=fast, shared_prefix_attention=fast))
    expected = [plain.generate(call, params) for call in calls]
    rows = [(a, b) for got, want in zip(sharded, expected) for o, e in zip(got, want) for a, b in zip(o.samples, e.samples)]
    (out / f"rank{rank}.json").write_text(json.dumps({
        "samples": len(rows),
        "same_tokens": all(a.token_ids == b.token_ids for a, b in rows),
        "lengths": sorted({len(a.token_ids) for a, _ in rows}),
        "max_logprob_diff": max(abs(x - y) for a, b in rows for x, y in zip(a.logprobs, b.logprobs)),
        "same_routing": all(torch.equal(a.routing, b.routing) for a, b in rows),
        "refused_outside_lockstep": refused,
        # the blocks hold their shards again after every forward (the root keeps its gathered embeddings)
        "sharded_parameters": all(type(p).__name__ == "DTensor" for p in model.model.layers.parameters()),
    }))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
