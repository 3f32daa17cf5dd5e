"""Wall time of one GRPO step (generation + update) with codemoe's RL trainer against TRL's
``GRPOTrainer``, in the same run, on the same tiny MoE model, prompts, group size and lengths.

Both sides start from identical weights (one model, deep-copied), sample ``--group`` completions of
``--new-tokens`` tokens for each of ``--prompts`` prompts (synthetic-suite prompts, tokenizer trained
locally), score them with the same in-process reward (the share of spaces in the text) and
take one optimizer step with no KL term and no reference model. codemoe samples with its embedded
engine (prefix sharing, KV cache slots, continuous batching) and updates with one forward/backward;
TRL samples with ``transformers``' ``generate``. The first ``--warmup`` steps of each side are not
timed; the table reports the median of the timed steps (the machine may be shared: medians, not
means).

    .venv/bin/python benchmarks/bench_rl_step.py --steps 5 --json runs/bench_rl_step.json
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import tempfile
import time
from pathlib import Path

MODEL = {
    "name": "qwen3_moe",
    "hidden_size": 64,
    "num_layers": 2,
    "num_heads": 4,
    "num_kv_heads": 2,
    "head_dim": 16,
    "num_experts": 8,
    "moe_intermediate_size": 64,
    "router": {"name": "softmax_topk", "top_k": 2},
    "experts": {"name": "grouped"},
    "max_position_embeddings": 1024,
}


def reward_of(text: str) -> float:
    """The shared toy reward: the share of spaces in the completion (varies within every group)."""
    return text.count(" ") / max(len(text), 1)


def setup(prompts: int, seed: int):
    import torch
    from codemoe.core.models import build_model
    from codemoe.core.tokenizer import train_tokenizer
    from codemoe.evals.synthetic import SyntheticSuite

    torch.manual_seed(seed)
    tasks = SyntheticSuite().tasks("train")[:prompts]
    tokenizer = train_tokenizer([t.prompt + t.reference_solution for t in SyntheticSuite().tasks("train")], 512)
    model = build_model(MODEL, vocab_size=len(tokenizer))
    return tasks, tokenizer, model


def run_codemoe(tasks, tokenizer, model, args) -> tuple[list[float], float]:
    from codemoe.core import build_plugin_manager, build_registry
    from codemoe.rl.rollout import Score
    from codemoe.rl.trainer import RLConfig, RLTrainer

    registry = build_registry(build_plugin_manager())
    algo = {"name": "policy_gradient", "group_size": args.group, "kl_coef": 0.0, "loss_agg": "token_mean"}
    algorithm = registry.build("algorithm", algo, registry=registry)
    engine = registry.build("engine", {"name": "embedded"}, model=copy.deepcopy(model), tokenizer=tokenizer)

    def scorer(batch_tasks, outputs):
        return [Score(reward=reward_of(s.text)) for out in outputs for s in out.samples]

    config = RLConfig(
        steps=args.warmup + args.steps,
        prompts_per_step=len(tasks),
        lr=1e-5,
        max_new_tokens=args.new_tokens,
        checkpoint_every=10**9,
        temperature=1.0,
    )
    times: list[float] = []
    tokens: list[float] = []

    def record(step: int, metrics: dict[str, float]) -> None:
        times.append(metrics["step_seconds"])
        tokens.append(metrics["tokens"])

    with tempfile.TemporaryDirectory() as tmp:
        trainer = RLTrainer(
            config,
            algorithm,
            model,
            engine,
            scorer,
            tasks,
            pad_id=tokenizer.pad_token_id,
            checkpoint_dir=Path(tmp),
            on_step=record,
        )
        trainer.fit()
    return times[args.warmup :], statistics.mean(tokens)


def run_trl(tasks, tokenizer, model, args) -> tuple[list[float], float]:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    stamps: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *a, **k):
            stamps.append(time.perf_counter())

        def on_step_end(self, *a, **k):
            stamps.append(time.perf_counter())

    def reward(completions, **kwargs):
        return [reward_of(c) for c in completions]

    dataset = Dataset.from_list([{"prompt": t.prompt} for t in tasks] * (args.warmup + args.steps))
    with tempfile.TemporaryDirectory() as tmp:
        config = GRPOConfig(
            output_dir=tmp,
            per_device_train_batch_size=len(tasks) * args.group,
            num_generations=args.group,
            max_completion_length=args.new_tokens,
            max_steps=args.warmup + args.steps,
            learning_rate=1e-5,
            beta=0.0,
            loss_type="bnpo",
            temperature=1.0,
            logging_steps=1,
            report_to="none",
            use_cpu=True,
            bf16=False,
            # codemoe's MoE blocks keep their balance loss in the blocks, not in router logits TRL could
            # read: TRL runs without a balance term (codemoe adds its own, at 1e-3).
            router_aux_loss_coef=0.0,
            save_strategy="no",
            shuffle_dataset=False,
            seed=args.seed,
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=reward,
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[Clock()],
        )
        trainer.train()
        lengths = [
            log["completions/mean_length"] for log in trainer.state.log_history if "completions/mean_length" in log
        ]
    durations = [end - start for start, end in zip(stamps[::2], stamps[1::2])]
    return durations[args.warmup :], statistics.mean(lengths) * len(tasks) * args.group


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per side")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per side before them")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    tasks, tokenizer, model = setup(args.prompts, args.seed)
    our_times, our_tokens = run_codemoe(tasks, tokenizer, copy.deepcopy(model), args)
    their_times, their_tokens = run_trl(tasks, tokenizer, copy.deepcopy(model), args)
    ours, theirs = statistics.median(our_times), statistics.median(their_times)
    ratio = theirs / ours
    shape = f"{args.prompts} prompts x {args.group} samples x {args.new_tokens} tokens"
    print(f"GRPO step ({shape}), median of {args.steps} steps, {args.threads} threads")
    print(f"{'':10}{'s/step':>10}{'tokens/step':>14}")
    print(f"{'codemoe':10}{ours:10.3f}{our_tokens:14.0f}")
    print(f"{'TRL':10}{theirs:10.3f}{their_tokens:14.0f}")
    print(f"ratio (TRL / codemoe): {ratio:.2f}x")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        result = {
            "grpo_step": {"codemoe": ours, "anchor": theirs, "ratio": ratio, "units": "s/step", "shape": shape},
            "tokens_per_step": {"codemoe": our_tokens, "anchor": their_tokens, "units": "tokens"},
        }
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
