"""Mixed precision the way the field trains: bf16 compute with fp32 master weights, optimizer state
and gradient reduction (FSDP2's MixedPrecisionPolicy under torchrun, autocast in one process), and
activation checkpointing that changes nothing but memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from codemoe.core.errors import ConfigError
from codemoe.core.moe import set_trainable
from codemoe.rl.sft import Example, PhaseConfig, SFTConfig, SFTTrainer
from rl_toy import tiny_policy
from test_trainer import _fit, _same, _trainer

EXAMPLES = [Example([p], [p + 1, p + 2, p + 3][: 1 + p % 3]) for p in range(1, 13)]  # within the 16-token vocabulary


def _sft(precision: str, steps: int = 4) -> tuple[torch.nn.Module, list[dict], list[torch.dtype]]:
    torch.manual_seed(0)
    model = tiny_policy()
    seen: list[torch.dtype] = []
    model.model.layers[0].self_attn.q_proj.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    history: list[dict] = []
    config = SFTConfig(phases=[PhaseConfig("all", steps, 1e-2)], batch_size=8, balance_coef=0.01, precision=precision)
    SFTTrainer(config, model, EXAMPLES, pad_id=0, set_trainable=set_trainable,
               on_step=lambda step, m: history.append(m)).fit()
    return model, history, seen


def test_bf16_sft_computes_in_bf16_and_keeps_fp32_master_weights():
    model, bf16, seen = _sft("bf16")
    _, fp32, seen32 = _sft("fp32")
    assert set(seen) == {torch.bfloat16} and set(seen32) == {torch.float32}
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    # bf16 keeps 8 bits of mantissa (relative rounding 2^-9 per operation): the first step's loss,
    # before updates compound, is within 2% of the fp32 one; then both learn
    assert abs(bf16[0]["loss"] - fp32[0]["loss"]) <= 0.02 * fp32[0]["loss"], (bf16[0], fp32[0])
    assert bf16[-1]["loss"] < bf16[0]["loss"] and fp32[-1]["loss"] < fp32[0]["loss"]


def test_an_unknown_precision_is_a_config_error_naming_the_option():
    with pytest.raises(ConfigError, match="'precision': 'fp8' is not one of fp32, bf16"):
        SFTConfig(precision="fp8")


def test_bf16_ppo_trains_policy_and_critic_with_fp32_master_weights(registry, tmp_path):
    algo = {"advantage": {"name": "gae", "lam": 0.95}, "critic": {"lr": 1e-2}, "minibatches": 2}
    bf16 = _trainer(registry, tmp_path / "bf16", algo=algo, steps=2, precision="bf16")
    history = _fit(bf16)
    fp32 = _fit(_trainer(registry, tmp_path / "fp32", algo=algo, steps=2))
    assert {p.dtype for p in bf16.policy.parameters()} == {torch.float32}
    assert {p.dtype for p in bf16.critic.parameters()} == {torch.float32}
    assert {s["exp_avg"].dtype for s in bf16.optimizer.state.values()} == {torch.float32}
    # the first step samples with the same fp32 engine; only the trainer's forwards round to bf16
    assert history[0]["reward_mean"] == fp32[0]["reward_mean"]
    assert abs(history[0]["entropy"] - fp32[0]["entropy"]) <= 0.02 * abs(fp32[0]["entropy"])
    assert all(torch.isfinite(torch.tensor([m["loss"], m["vf_loss"], m["grad_norm"]])).all() for m in history)


def test_activation_checkpointing_changes_no_metric_of_rl_steps(registry, tmp_path):
    algo = {"advantage": {"name": "gae", "lam": 0.95}, "critic": {"lr": 1e-2}, "balance_coef": 0.01}
    plain = _fit(_trainer(registry, tmp_path / "plain", algo=algo, steps=2))
    checkpointed = _fit(_trainer(registry, tmp_path / "ckpt", algo=algo, steps=2, activation_checkpointing=True))
    for a, b in zip(plain, checkpointed, strict=True):
        assert _same(a, b), {k: (a[k], b[k]) for k in a if a[k] != b.get(k)}


@pytest.mark.slow
@pytest.mark.distributed
def test_two_bf16_fsdp2_ranks_keep_fp32_shards_and_train_like_one_bf16_process(tmp_path):
    here = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": str(here), "OMP_NUM_THREADS": "1", "CODEMOE_TEST_PRECISION": "bf16"}
    script = str(here / "sft_toy_run.py")
    subprocess.run([sys.executable, script, str(tmp_path / "one")], env=env, check=True)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    subprocess.run([*torchrun, script, str(tmp_path / "two")], env=env, check=True)
    read = lambda path: [json.loads(line) for line in path.read_text().splitlines()]  # noqa: E731
    one, two = read(tmp_path / "one" / "sft-rank0.jsonl"), read(tmp_path / "two" / "sft-rank0.jsonl")
    assert two[-1] == {"master_dtypes": ["torch.float32"]} == one[-1]
    # FSDP2 computes every op in bf16, autocast only the matmuls: the two roundings differ by a few
    # bf16 ulps (2^-8 relative) per layer; the losses agree within 3%
    for a, b in zip(one[:-1], two[:-1], strict=True):
        assert abs(a["loss"] - b["loss"]) <= 0.03 * a["loss"], (a, b)
