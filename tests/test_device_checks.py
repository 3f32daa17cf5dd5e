"""The prepared device checks run here on CPU with the tiny preset, so a GPU session finds them
working: the training side's (codemoe.rl.device_check) through the rl trainer and the embedded engine."""

from __future__ import annotations

import pytest


@pytest.mark.slow
def test_the_training_device_check_passes_on_cpu(tmp_path):
    from codemoe.rl.device_check import main

    out = tmp_path / "checks.json"
    assert main(["--device", "cpu", "--preset", "tiny", "--steps", "20", "--batch", "8", "--block-tokens", "512",
                 "--json", str(out)]) == 0
    import json

    checks = json.loads(out.read_text())["checks"]
    assert set(checks) == {"bf16_sft_learns", "engine_logprobs_match_trainer", "rl_step_on_device",
                           "activation_checkpointing", "moe_block_throughput"}
    assert checks["rl_step_on_device"]["tensors_on"] == ["cpu"]
    assert checks["bf16_sft_learns"]["loss_last"] < checks["bf16_sft_learns"]["loss_first"]
