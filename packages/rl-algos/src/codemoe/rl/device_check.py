"""The training side's checks on a given device (a GPU when one is lent), in a few minutes.

The test suite runs on CPU with the ``tiny`` preset; this repeats the checks that matter on an
accelerator with the ``moe_100m`` preset (137M parameters, 81M active), random weights and a
learnable copy task, so it needs no tokenizer or data:

- bf16 SFT (autocast, fp32 master weights) on the device: the loss falls, the weights stay fp32;
- the embedded engine's log-probs of its samples equal the trainer's teacher-forced log-probs;
- one RL step (GRPO with a KL to the reference) with ``device`` set: the engine samples the
  trainer's own parameters, the policy, the reference and every rollout tensor are on the device,
  and engine and trainer log-probs agree;
- activation checkpointing: the same gradients, the MoE routing counted once;
- the MoE block's forward + backward throughput: tokens/s, achieved TFLOP/s and MFU against
  ``--peak-tflops`` (the device's dense bf16 peak).

    python -m codemoe.rl.device_check --device cuda [--json PATH]

Exit status 0 when every check passes; each check prints one line.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path
from typing import Any

import torch
from codemoe.core.device_checks import device_name, report

__all__ = ["run_checks"]

# dense bf16 peaks (TFLOP/s) of devices this check knows; --peak-tflops for others
_PEAKS = {"H200": 989.0, "H100": 989.0, "A100": 312.0}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _copy_examples(vocab: int, count: int, length: int, seed: int) -> list[Any]:
    from codemoe.rl.sft import Example

    g = torch.Generator().manual_seed(seed)
    top = min(vocab, 259)  # 256 token ids: the loss falls within a few steps, well before copying is learnt
    out = []
    for _ in range(count):
        tokens = torch.randint(3, top, (length,), generator=g).tolist()
        out.append(Example([*tokens, 1], tokens))  # "repeat what you saw after the separator"
    return out


def _sft(model: torch.nn.Module, steps: int, batch: int, length: int) -> list[float]:
    from codemoe.core.moe import set_trainable
    from codemoe.rl.sft import PhaseConfig, SFTConfig, SFTTrainer

    losses: list[float] = []
    config = SFTConfig(phases=[PhaseConfig("all", steps, 1e-3)], batch_size=batch, precision="bf16")
    examples = _copy_examples(model.config.vocab_size, 4 * batch, length, seed=0)
    SFTTrainer(config, model, examples, pad_id=0, set_trainable=set_trainable,
               on_step=lambda step, m: losses.append(m["loss"])).fit()
    return losses


def _block_throughput(model: torch.nn.Module, device: torch.device, tokens: int, repeats: int) -> dict[str, float]:
    """Forward + backward of the first MoE block on ``tokens`` rows in bf16 autocast."""
    from codemoe.core.moe import moe_blocks

    block = next(iter(moe_blocks(model)))
    hidden, inter = model.config.hidden_size, model.config.moe_intermediate_size
    k, experts = model.config.num_experts_per_tok, model.config.num_experts
    x = torch.randn(1, tokens, hidden, device=device, requires_grad=True)
    block.train()

    def once() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            out = block(x)
        out.float().square().mean().backward()

    once()  # warm-up
    _sync(device)
    started = time.perf_counter()
    for _ in range(repeats):
        once()
    _sync(device)
    seconds = (time.perf_counter() - started) / repeats
    # per token: k experts x 3 projections of H x I, and the router's H x E; x2 multiply-add, x3 fwd+bwd
    flops = 6 * tokens * (k * 3 * hidden * inter + hidden * experts)
    return {"tokens_per_s": tokens / seconds, "tflops": flops / seconds / 1e12}


def _rl_step(model: torch.nn.Module, registry: Any, device: str, prompts: list[list[int]]) -> dict[str, Any]:
    """One RL step on ``device`` with the embedded engine built on the policy, as the rl stage runs it."""
    import tempfile
    from types import SimpleNamespace

    from codemoe.rl.rollout import Score
    from codemoe.rl.trainer import RLConfig, RLTrainer

    def scorer(tasks: Any, outputs: Any) -> list[Score]:  # the share of even tokens: varies within a group
        return [Score(sum(t % 2 == 0 for t in s.token_ids) / len(s.token_ids)) for o in outputs for s in o.samples]

    engine = registry.build("engine", "embedded", model=model, tokenizer=None)
    # GRPO-like (8 samples per prompt), with a KL to a reference policy, which is on the device too
    algorithm = registry.build("algorithm", {"name": "policy_gradient", "kl_coef": 0.04}, registry=registry)
    places: set[str] = set()

    def on_rollouts(step: int, batch: Any) -> None:
        places.update(str(t.device) for t in (batch.completions, batch.mask, batch.engine_logp, batch.rewards))

    config = RLConfig(steps=1, prompts_per_step=len(prompts), max_new_tokens=16, device=device, checkpoint_every=1000)
    tasks = [SimpleNamespace(prompt=p) for p in prompts]
    with tempfile.TemporaryDirectory() as tmp:
        trainer = RLTrainer(config, algorithm, model, engine, scorer, tasks, pad_id=0, checkpoint_dir=Path(tmp),
                            on_rollouts=on_rollouts)
        metrics = trainer.train_step(1)
    want = str(trainer.device)
    places |= {str(p.device) for p in model.parameters()} | {str(p.device) for p in trainer.reference.parameters()}
    return {
        "ok": places == {want} and engine.model is trainer.policy and metrics["logp_mismatch_max"] <= 1e-3,
        "device": want, "tensors_on": sorted(places), "logp_mismatch_max": metrics["logp_mismatch_max"],
        "step_seconds": round(metrics["step_seconds"], 3),
    }


def run_checks(
    device: str, preset: str = "moe_100m", steps: int = 30, batch: int = 16, length: int = 32,
    block_tokens: int = 8192, peak_tflops: float = 0.0,
) -> dict[str, Any]:
    """Run every check on ``device``; returns ``{check: {"ok": bool, ...figures}}``."""
    from codemoe.core.contracts import SamplingParams
    from codemoe.core.models import build_model, default_registry
    from codemoe.core.moe import checkpoint_layers, moe_blocks, read_layer_stats
    from codemoe.rl.logprobs import token_stats

    dev = torch.device(device)
    torch.manual_seed(0)
    registry = default_registry()
    model = build_model(preset, registry=registry).to(dev)
    results: dict[str, Any] = {}

    started = time.perf_counter()
    losses = _sft(model, steps, batch, length)
    seconds = time.perf_counter() - started
    first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
    results["bf16_sft_learns"] = {
        "ok": last < 0.9 * first and {p.dtype for p in model.parameters()} == {torch.float32},
        "loss_first": round(first, 4), "loss_last": round(last, 4),
        "tokens_per_s": round(steps * batch * (2 * length + 1) / seconds, 1),
    }

    model.eval()
    g = torch.Generator().manual_seed(2)
    prompts = [torch.randint(3, model.config.vocab_size, (16,), generator=g).tolist() for _ in range(4)]
    engine = registry.build("engine", "embedded", model=model, tokenizer=None)  # the rl stage's default engine
    outputs = engine.generate(prompts, SamplingParams(n=2, max_new_tokens=16, seed=3, ignore_eos=True))
    rows = [(o.prompt_token_ids, s) for o in outputs for s in o.samples]
    completions = torch.tensor([s.token_ids for _, s in rows])
    with torch.no_grad():
        logp = token_stats(model, [p for p, _ in rows], completions, pad_id=0).logp.cpu()
    worst = (logp - torch.tensor([s.logprobs for _, s in rows])).abs().max().item()
    results["engine_logprobs_match_trainer"] = {"ok": worst <= 1e-4, "max_abs_diff": worst}
    results["rl_step_on_device"] = _rl_step(copy.deepcopy(model), registry, device, prompts[:2])  # later checks: this model

    twin = copy.deepcopy(model).train()
    checkpoint_layers(twin.model.layers)
    ids = torch.tensor(prompts, device=dev)
    grads, counts = [], []
    for m in (model.train(), twin):
        m.zero_grad(set_to_none=True)
        read_layer_stats(m)  # start counting from here
        m(ids).logits.float().square().mean().backward()
        grads.append(torch.cat([p.grad.flatten() for p in m.parameters() if p.grad is not None]))
        counts.append([s.tokens for s in read_layer_stats(m)])
    diff = ((grads[0] - grads[1]).abs().max() / grads[0].abs().max().clamp(min=1e-30)).item()
    results["activation_checkpointing"] = {
        "ok": diff <= 1e-5 and counts[0] == counts[1] == [ids.numel()] * len(list(moe_blocks(model))),
        "max_rel_grad_diff": diff,
    }

    figures = _block_throughput(model, dev, block_tokens, repeats=5)
    if peak_tflops > 0:
        figures["mfu"] = figures["tflops"] / peak_tflops
    results["moe_block_throughput"] = {"ok": figures["tokens_per_s"] > 0, **{k: round(v, 4) for k, v in figures.items()}}
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--preset", default="moe_100m", help="model preset in registry/models (default moe_100m)")
    parser.add_argument("--steps", type=int, default=30, help="bf16 SFT steps")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--block-tokens", type=int, default=8192, help="rows of the MoE block throughput check")
    parser.add_argument("--peak-tflops", type=float, default=0.0, help="the device's dense bf16 peak (MFU)")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    name = device_name(args.device)
    peak = args.peak_tflops or next((v for k, v in _PEAKS.items() if k in name), 0.0)
    print(f"training checks on {name} (torch {torch.__version__}), preset {args.preset}")
    results = run_checks(args.device, args.preset, args.steps, args.batch, block_tokens=args.block_tokens,
                         peak_tflops=peak)
    return report(name, results, args.json)


if __name__ == "__main__":
    sys.exit(main())
