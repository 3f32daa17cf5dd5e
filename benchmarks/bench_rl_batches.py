"""RL updates on agent episodes: length-sorted micro-batches against one forward of the whole batch.

An `agentic-repos` RL step trains on 32 episodes (4 tasks x 8 samples) that end at very different
turns: one that submits after a test run is a hundred tokens, one that runs out its eight turns
well over a thousand. In one forward every row is padded to the longest; ``micro_batch_size: N``
sorts the rows by length and runs forwards of N whose gradients make the same optimizer step (the
same loss: ``test_micro_batches_sorted_by_length_train_like_one_forward``). This times
``RLTrainer.learn`` (the reference policy's log-probs, advantages, the update) on the same rollouts
with both, alternating, in one run; the anchor is one forward (the trainer's default).

    python benchmarks/bench_rl_batches.py --json bench_rl_batches.json

The policy is the ``tiny_agent`` preset (the pipeline's), fp32, the pipeline's algorithm (``grpo``:
a KL term, so a reference forward too), the machine's torch threads unless ``--threads``. Episode
shapes: a prompt of 540-750 tokens shared by a task's 8 rows, then 1-8 turns, each an action of
30-192 tokens (the loss mask's ones) and, but after the last, an observation of 20-300 tokens: mean
completion about 1,000 tokens, the range `agentic-repos`' RL rows span. Random tokens: a step's cost
does not depend on which tokens they are.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import torch


def _rollouts(groups: int, group_size: int, vocab: int, seed: int):
    from codemoe.rl.rollout import Rollouts

    rng = random.Random(seed)
    prompts, rows = [], []
    for _ in range(groups):
        prompt = [rng.randrange(3, vocab) for _ in range(rng.randint(540, 750))]
        for _ in range(group_size):
            tokens, mask = [], []
            turns = rng.randint(1, 8)
            for turn in range(turns):
                action = rng.randint(30, 192)
                tokens += [rng.randrange(3, vocab) for _ in range(action)]
                mask += [1.0] * action
                if turn < turns - 1:
                    seen = rng.randint(20, 300)
                    tokens += [rng.randrange(3, vocab) for _ in range(seen)]
                    mask += [0.0] * seen
            prompts.append(prompt)
            rows.append((tokens, mask))
    width = max(len(t) for t, _ in rows)
    completions = torch.full((len(rows), width), 2, dtype=torch.long)
    masks = torch.zeros(len(rows), width)
    for i, (tokens, mask) in enumerate(rows):
        completions[i, : len(tokens)] = torch.tensor(tokens)
        masks[i, : len(mask)] = torch.tensor(mask)
    rewards = torch.tensor([rng.gauss(0.0, 1.0) for _ in rows])
    return Rollouts(
        prompt_ids=prompts,
        completions=completions,
        mask=masks,
        engine_logp=torch.full(completions.shape, float("nan")),  # the trainer's own (the IS weight 1)
        rewards=rewards,
        passed=rewards > 0,
        group_size=group_size,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write per-case results to this file")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per side (median)")
    parser.add_argument("--micro", type=int, nargs="+", default=[4, 2], help="micro_batch_size values to measure")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    import codemoe.rl
    import yaml
    from codemoe.core import build_plugin_manager, build_registry
    from codemoe.core.models import build_model
    from codemoe.rl.trainer import RLConfig, RLTrainer
    from micro_batch_table import report

    vocab, groups, group_size = 1024, 4, 8
    registry = build_registry(build_plugin_manager())
    grpo = yaml.safe_load((Path(codemoe.rl.__file__).parent / "presets" / "algos" / "grpo.yaml").read_text())
    sides = [0, *args.micro]
    trainers = {}
    scratch = tempfile.TemporaryDirectory()
    for size in sides:
        torch.manual_seed(0)
        policy = build_model("tiny_agent", vocab_size=vocab)
        algorithm = registry.build("algorithm", grpo, registry=registry)
        config = RLConfig(prompts_per_step=groups, lr=1e-4, micro_batch_size=size)
        # no engine, scorer or tasks: learn() takes the rollouts given (the tasks only name the stream)
        trainers[size] = RLTrainer(config, algorithm, policy, None, None, ["unused"], pad_id=2,
                                   checkpoint_dir=f"{scratch.name}/{size}")
    batches = [_rollouts(groups, group_size, vocab, seed) for seed in range(args.steps + 1)]
    seconds: dict[int, list[float]] = {size: [] for size in sides}
    for i, rollouts in enumerate(batches):  # the first batch warms every side up, untimed
        for size in sides:  # alternating: load from other processes spreads over every side
            start = time.perf_counter()
            trainers[size].learn(rollouts)
            if i:
                seconds[size].append(time.perf_counter() - start)
    rows = sum(  # every row's prompt and completion up to its last action: what a forward must cover

        len(p) + int(r.mask[j].nonzero().max()) + 1 for r in batches[1:] for j, p in enumerate(r.prompt_ids)
    )
    padded = sum(len(r.prompt_ids) * (max(len(p) for p in r.prompt_ids) + int(r.mask.ne(0).any(0).nonzero().max()) + 1)
                 for r in batches[1:])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, tiny_agent fp32, grpo, "
          f"{groups} x {group_size} episodes a step (a row {rows / args.steps / (groups * group_size):.0f} tokens on average), "
          f"{args.steps} steps a side; one forward pads {1 - rows / padded:.1%} of its tokens")
    report(seconds, "s per RL update (median; anchor: the whole batch in one forward)", args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
