"""SFT steps on agent episodes: length-sorted micro-batches against one forward of the whole batch.

The `agentic-repos` SFT imitates whole agent episodes, 8 a step, of very different lengths (a
prompt of 540-750 tokens, a completion of 640-2040). In one forward every row is padded to the
longest prompt plus the longest completion; ``micro_batch_size: N`` sorts the batch by length and
runs forwards of N rows whose gradients accumulate into the same optimizer step (the same loss, see
``test_micro_batches_sorted_by_length_give_the_whole_batch_gradient``). This measures the step time
of both on the same batches, alternating, in one run; the anchor is one forward (the trainer
before the option, and its default).

    python benchmarks/bench_sft_batches.py --json bench_sft_batches.json

The policy is the ``tiny_agent`` preset (the pipeline's), fp32, the machine's torch threads unless
``--threads``. Episode lengths are drawn from the ranges above (uniform prompt, a completion of
640-1580 tokens, mean 1110: the shape of `agentic-repos`' 1,080 oracle episodes, whose mean is
1,108), random tokens: the step's cost does not depend on which tokens they are.
"""

from __future__ import annotations

import argparse
import random
import time

import torch


def _examples(count: int, vocab: int, seed: int):
    from codemoe.rl.sft import Example

    rng = random.Random(seed)
    out = []
    for _ in range(count):
        prompt = [rng.randrange(3, vocab) for _ in range(rng.randint(540, 750))]
        completion = [rng.randrange(3, vocab) for _ in range(rng.randint(640, 1580))]
        mask = [1 if (i // 60) % 2 == 0 else 0 for i in range(len(completion))]  # actions and observations
        out.append(Example(prompt, completion, mask))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write per-case results to this file")
    parser.add_argument("--steps", type=int, default=8, help="timed steps per side (median)")
    parser.add_argument("--batch", type=int, default=8, help="episodes per step")
    parser.add_argument("--micro", type=int, nargs="+", default=[4, 2], help="micro_batch_size values to measure")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from codemoe.core.models import build_model
    from codemoe.core.moe import set_trainable
    from codemoe.rl.sft import PhaseConfig, SFTConfig, SFTTrainer
    from micro_batch_table import report

    vocab = 1024
    examples = _examples(256, vocab, seed=0)
    sides = [0, *args.micro]
    trainers = {}
    for size in sides:
        torch.manual_seed(0)
        model = build_model("tiny_agent", vocab_size=vocab)
        config = SFTConfig(phases=[PhaseConfig("all", 1, 1e-4)], batch_size=args.batch, max_tokens=2048)
        trainer = SFTTrainer(config, model, examples, pad_id=2, set_trainable=set_trainable)
        set_trainable(model, "all")
        model.train()
        params = [p for p in model.parameters() if p.requires_grad]
        trainers[size] = (trainer, torch.optim.AdamW(params, lr=1e-4), params)
    rng = random.Random(1)
    batches = [rng.sample(examples, args.batch) for _ in range(args.steps + 1)]
    seconds: dict[int, list[float]] = {size: [] for size in sides}
    tokens = 0.0
    for i, batch in enumerate(batches):  # the first batch warms every side up, untimed
        for size in sides:  # alternating: load from other processes spreads over every side
            trainer, optimizer, params = trainers[size]
            start = time.perf_counter()
            metrics = trainer._step(optimizer, params, [], batch, size)
            if i:
                seconds[size].append(time.perf_counter() - start)
        if i:
            tokens += metrics["tokens"]
    real = sum(len(e.prompt_ids) + len(e.completion_ids) for b in batches[1:] for e in b)
    padded = sum(args.batch * (max(len(e.prompt_ids) for e in b) + max(len(e.completion_ids) for e in b))
                 for b in batches[1:])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, tiny_agent fp32, {args.batch} episodes a step, "
          f"{args.steps} steps a side; one forward pads {1 - real / padded:.1%} of its tokens")
    report(seconds, "s per SFT step (median; anchor: the whole batch in one forward)", args.json,
           ("scored tokens/s", lambda median: f"{tokens / args.steps / median:.0f}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
