"""Generated tokens/s: codemoe's embedded engine vs ``transformers`` ``generate``, same model, same run.

The workload is GRPO's shape: 16 prompts x 8 samples x 128 new tokens (every sample generates all
128: end-of-sequence is ignored by both), sampled at temperature 1. The model is the ``tiny`` MoE
preset with random weights (fp32, CPU, one torch thread). ``transformers`` gets the whole batch at
once (``num_return_sequences=8``), its fastest way to run this workload. Sides alternate and each
keeps its best of ``--repeats`` runs. Throughput is reported per CPU-second of this process (what
the work costs; robust to other jobs on a shared machine) and per wall-clock second.

    python benchmarks/bench_generate.py --prompt-len 32 256 --json bench_generate.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from codemoe.core.models import build_model
from codemoe.serving import SamplingParams
from codemoe.serving.embedded import EmbeddedEngine


def timed(fn, *args) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of ``fn(*args)``."""
    cpu, wall = time.process_time(), time.perf_counter()
    fn(*args)
    return time.process_time() - cpu, time.perf_counter() - wall


def bench_transformers(model, prompts: torch.Tensor, samples: int, new_tokens: int) -> None:
    """``generate`` samples ``samples`` continuations of every prompt."""
    with torch.no_grad():
        out = model.generate(
            prompts,
            attention_mask=torch.ones_like(prompts),
            do_sample=True,
            temperature=1.0,
            top_k=0,
            num_return_sequences=samples,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            pad_token_id=0,
        )
    assert out.shape == (prompts.shape[0] * samples, prompts.shape[1] + new_tokens)


def bench_engine(model, prompts: torch.Tensor, samples: int, new_tokens: int) -> None:
    """The embedded engine does the same."""
    engine = EmbeddedEngine(model, None)
    params = SamplingParams(n=samples, temperature=1.0, max_new_tokens=new_tokens, seed=0, ignore_eos=True)
    outputs = engine.generate(prompts.tolist(), params)
    assert all(len(s.token_ids) == new_tokens for o in outputs for s in o.samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", help="model preset in registry/models (default tiny)")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--prompt-len", type=int, nargs="+", default=[32, 256], help="prompt lengths to measure")
    parser.add_argument("--repeats", type=int, default=2, help="best of this many runs per side")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = build_model(args.model).eval()
    vocab = model.config.vocab_size
    tokens = args.prompts * args.samples * args.new_tokens
    bench_engine(model, torch.randint(3, vocab, (2, 8)), 2, 4)  # warm-up of both code paths
    bench_transformers(model, torch.randint(3, vocab, (2, 8)), 2, 4)
    results = {}
    print(f"{args.prompts} prompts x {args.samples} samples x {args.new_tokens} new tokens, model '{args.model}'")
    print(f"{'prompt':>6} {'codemoe tok/cpu-s':>18} {'transformers':>13} {'ratio':>6} {'wall ratio':>11}")
    for length in args.prompt_len:
        prompts = torch.randint(3, vocab, (args.prompts, length))
        ours, anchor = [], []
        for _ in range(args.repeats):  # alternate, so load on the machine hits both sides alike
            ours.append(timed(bench_engine, model, prompts, args.samples, args.new_tokens))
            anchor.append(timed(bench_transformers, model, prompts, args.samples, args.new_tokens))
        (cpu, _), (anchor_cpu, _) = min(ours), min(anchor)
        results[f"generate_p{length}"] = {
            "codemoe": tokens / cpu,
            "anchor": tokens / anchor_cpu,
            "ratio": anchor_cpu / cpu,
            "units": "generated tokens per CPU-second",
            "codemoe_wall": tokens / min(w for _, w in ours),
            "anchor_wall": tokens / min(w for _, w in anchor),
            "wall_ratio": min(w for _, w in anchor) / min(w for _, w in ours),
        }
        case = results[f"generate_p{length}"]
        print(
            f"{length:>6} {case['codemoe']:>18.0f} {case['anchor']:>13.0f} {case['ratio']:>5.2f}x "
            f"{case['wall_ratio']:>10.2f}x"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
