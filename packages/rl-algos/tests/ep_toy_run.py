"""One SFT step and ``RL_STEPS`` GRPO steps of the toy policy, with ``parallel: {dp, ep}``; rank 0
saves what the tests compare with one process: ``python ep_toy_run.py OUT RL_STEPS [DP EP]`` (one
process without them, under ``torchrun`` with them). The GRPO trainer checkpoints every step in
``OUT/ckpt`` and resumes from there, so a run may continue one saved on another layout.

``OUT/result.pt`` holds, per trainer (``sft``, ``rl``), the last step's metrics, every parameter's
whole gradient and the whole state dict after it, the logits of a fixed batch computed by the
trained (sharded) policy, and the steps this process ran; ``OUT/hf`` is the RL policy exported as a
Hugging Face checkpoint. float64 parameters, so the ranks' other summation order stays a rounding
difference.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from codemoe.core import build_plugin_manager, build_registry
from codemoe.core.moe import set_trainable
from codemoe.rl.distributed import ParallelConfig, init_distributed
from codemoe.rl.sft import Example, PhaseConfig, SFTConfig, SFTTrainer
from codemoe.rl.stages import save_policy
from codemoe.rl.trainer import RLConfig, RLTrainer
from rl_toy import ToyEngine, tiny_policy, toy_scorer, toy_tasks
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.tensor import DTensor

PROBE = torch.tensor([[1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12]])  # toy vocabulary: 16 tokens  # the batch whose logits are compared


def _whole_grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    grads = {}
    for name, param in model.named_parameters():
        if param.grad is not None:
            grad = param.grad
            grads[name] = (grad.full_tensor() if isinstance(grad, DTensor) else grad).detach().clone()
    return grads


def _result(model: torch.nn.Module, metrics: dict, env, steps: list[int]) -> dict:
    grads = _whole_grads(model)
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=PROBE).logits.float()  # a collective forward: every rank runs it
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=env.enabled))
    return {"metrics": metrics, "grads": grads, "state": state, "logits": logits, "steps": steps}


def main() -> None:
    out, rl_steps = Path(sys.argv[1]), int(sys.argv[2])
    parallel = ParallelConfig(dp=int(sys.argv[3]), ep=int(sys.argv[4])) if len(sys.argv) > 4 else ParallelConfig()
    torch.set_num_threads(1)
    env = init_distributed()
    out.mkdir(parents=True, exist_ok=True)

    model = tiny_policy().to(torch.float64)
    examples = [Example([p], [p + 1, p + 2, p + 3][: 1 + p % 3]) for p in range(3, 13)]  # uneven lengths
    sft_metrics: dict = {}
    sft_steps: list[int] = []
    sft = SFTTrainer(
        # no balance term: it is a per-rank (micro-batch) statistic, so ranks would differ from one process
        SFTConfig(phases=[PhaseConfig("all", 1, 1e-2)], batch_size=8, balance_coef=0.0, parallel=parallel),
        model,
        examples,
        pad_id=0,
        set_trainable=set_trainable,
        env=env,
        on_step=lambda step, metrics: (sft_steps.append(step), sft_metrics.update(metrics)),
    )
    sft.fit()
    results = {"sft": _result(model, sft_metrics, env, sft_steps)}

    registry = build_registry(build_plugin_manager())
    algorithm = registry.build(
        "algorithm", {"name": "policy_gradient", "group_size": 8, "kl_coef": 0.05, "balance_coef": 0.0}, registry=registry
    )
    policy = tiny_policy().to(torch.float64)
    rl_metrics: dict = {}
    rl_steps_run: list[int] = []
    trainer = RLTrainer(
        RLConfig(steps=rl_steps, prompts_per_step=4, lr=1e-2, max_new_tokens=4, checkpoint_every=1, parallel=parallel),
        algorithm,
        policy,
        ToyEngine(policy),
        toy_scorer,
        toy_tasks(),
        pad_id=0,
        checkpoint_dir=out / "ckpt",
        env=env,
        on_step=lambda step, metrics: (rl_steps_run.append(step), rl_metrics.update(metrics)),
    )
    trainer.fit()
    results["rl"] = _result(trainer.policy, rl_metrics, env, rl_steps_run)
    save_policy(trainer.policy, None, out / "hf", env)  # the rl stage's Hugging Face export
    if env.is_main:
        torch.save(results, out / "result.pt")
    env.close()


if __name__ == "__main__":
    main()
