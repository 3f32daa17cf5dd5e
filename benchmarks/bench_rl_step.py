"""Wall time of one GRPO step (generation + update) with codemoe's RL trainer against TRL's
``GRPOTrainer``, in the same run, on the same tiny MoE model, prompts, group size and lengths.

Both sides start from identical weights (one model, deep-copied), sample ``--group`` completions of
``--new-tokens`` tokens for each of ``--prompts`` prompts (synthetic-suite prompts, tokenizer trained
locally), score them with the same in-process reward (the share of spaces in the text) and
take one optimizer step with no KL term and no reference model. codemoe samples with its embedded
engine (prefix sharing, KV cache slots, continuous batching) and updates with one forward/backward;
TRL samples with ``transformers``' ``generate``. The first ``--warmup`` steps of each side are not
timed; the sides alternate for ``--rounds`` rounds so both see the same (possibly shared) machine,
and the table reports the median over every timed step.

    .venv/bin/python benchmarks/bench_rl_step.py --json runs/bench_rl_step.json
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import statistics
import tempfile
import time
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Prompt:
    """A task prompt as both trainers see it."""

    prompt: str


def setup(prompts: int, context: int, seed: int):
    """Tasks, tokenizer and model; ``context`` > 0 puts about that many tokens of other functions
    (repository context, as an agent's prompt carries) before every task prompt."""
    import torch
    from codemoe.core.models import build_model
    from codemoe.core.tokenizer import train_tokenizer
    from codemoe.evals.synthetic import SyntheticSuite

    torch.manual_seed(seed)
    train = SyntheticSuite().tasks("train")
    tokenizer = train_tokenizer([t.prompt + t.reference_solution for t in train], 512)
    header = ""
    for task in train[prompts:]:
        if len(tokenizer.encode(header)) >= context:
            break
        header += task.prompt + task.reference_solution + "\n\n"
    tasks = [Prompt(header + t.prompt) for t in train[:prompts]]
    model = build_model(MODEL, vocab_size=len(tokenizer))
    return tasks, tokenizer, model


def run_codemoe(tasks, tokenizer, model, args) -> tuple[list[float], list[float], float]:
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
    cpu: list[float] = [time.process_time()]
    tokens: list[float] = []

    def record(step: int, metrics: dict[str, float]) -> None:
        times.append(metrics["step_seconds"])
        cpu.append(time.process_time())
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
    cpu_times = [b - a for a, b in itertools.pairwise(cpu)]
    return times[args.warmup :], cpu_times[args.warmup :], statistics.mean(tokens)


def run_trl(tasks, tokenizer, model, args) -> tuple[list[float], list[float], float]:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    stamps: list[tuple[float, float]] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *a, **k):
            stamps.append((time.perf_counter(), time.process_time()))

        def on_step_end(self, *a, **k):
            stamps.append((time.perf_counter(), time.process_time()))

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
    wall = [end[0] - start[0] for start, end in zip(stamps[::2], stamps[1::2])]
    cpu = [end[1] - start[1] for start, end in zip(stamps[::2], stamps[1::2])]
    return wall[args.warmup :], cpu[args.warmup :], statistics.mean(lengths) * len(tasks) * args.group


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--context", type=int, default=0, help="tokens of repository context before each prompt")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per side and round")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per side and round before them")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of codemoe then TRL")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: no spin-waiting on a shared machine)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    tasks, tokenizer, model = setup(args.prompts, args.context, args.seed)
    prompt_tokens = statistics.mean(len(tokenizer.encode(t.prompt)) for t in tasks)
    sides = {"codemoe": run_codemoe, "TRL": run_trl}
    wall: dict[str, list[float]] = {name: [] for name in sides}
    cpu: dict[str, list[float]] = {name: [] for name in sides}
    tokens: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(args.rounds):  # alternating rounds: both sides see the same (shared) machine
        for name, run in sides.items():
            w, c, t = run(tasks, tokenizer, copy.deepcopy(model), args)
            wall[name] += w
            cpu[name] += c
            tokens[name].append(t)
    med = {name: (statistics.median(wall[name]), statistics.median(cpu[name])) for name in sides}
    ratio, cpu_ratio = med["TRL"][0] / med["codemoe"][0], med["TRL"][1] / med["codemoe"][1]
    shape = (
        f"{args.prompts} prompts of ~{prompt_tokens:.0f} tokens x {args.group} samples x {args.new_tokens} new tokens"
    )
    timed = args.rounds * args.steps
    print(f"GRPO step ({shape}), median of {timed} steps in {args.rounds} alternating rounds, {args.threads} threads")
    print(f"{'':10}{'s/step':>10}{'CPU s/step':>12}{'tokens/step':>14}")
    for name in sides:
        print(f"{name:10}{med[name][0]:10.3f}{med[name][1]:12.3f}{statistics.mean(tokens[name]):14.0f}")
    print(f"ratio (TRL / codemoe): {ratio:.2f}x wall, {cpu_ratio:.2f}x CPU")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        result = {
            "grpo_step_wall": {
                "codemoe": med["codemoe"][0],
                "anchor": med["TRL"][0],
                "ratio": ratio,
                "units": "s/step",
                "shape": shape,
            },
            "grpo_step_cpu": {
                "codemoe": med["codemoe"][1],
                "anchor": med["TRL"][1],
                "ratio": cpu_ratio,
                "units": "CPU s/step",
                "shape": shape,
            },
        }
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
