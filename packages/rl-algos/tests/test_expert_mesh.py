"""Expert parallelism on a ``(dp, ep)`` device mesh: the ``parallel`` option is checked at start-up;
one SFT step and one GRPO step on ``dp=2 x ep=2`` (4 ranks) and on ``ep=2`` (2 ranks) equal the
one-process run; the Hugging Face export of an ``ep=2`` run gathers every expert into a checkpoint
plain ``transformers`` loads with the same logits; and a checkpoint saved on 4 ranks resumes on 2
ranks and on 1 rank, step for step."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from codemoe.core.errors import ConfigError
from codemoe.core.models import build_model
from codemoe.core.models.presets import load_preset
from codemoe.core.moe import set_trainable
from codemoe.rl.distributed import Dist, ParallelConfig, device_mesh
from codemoe.rl.sft import Example, SFTConfig, SFTTrainer
from ep_toy_run import PROBE
from rl_toy import tiny_policy

HERE = Path(__file__).parent
ENV = {**os.environ, "PYTHONPATH": str(HERE), "OMP_NUM_THREADS": "1"}


def _launch(world: int, script: str, *args: str, env: dict | None = None) -> None:
    launch = [sys.executable] if world == 1 else [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(world)]
    subprocess.run([*launch, str(HERE / script), *args], env=env or ENV, check=True, timeout=300)


# ------------------------------------------------------------------------------------------------
# the option
# ------------------------------------------------------------------------------------------------


def test_the_parallel_option_is_checked_against_the_job_and_the_model():
    with pytest.raises(ConfigError, match=r"'parallel\.ep': 0 must be an integer of at least 1"):
        ParallelConfig(ep=0)
    with pytest.raises(ConfigError, match=r"'parallel\.dp': -1"):
        ParallelConfig(dp=-1)
    policy = tiny_policy()  # 4 experts per MoE layer
    with pytest.raises(ConfigError, match=r"'parallel': dp=3 x ep=2 = 6 ranks, but the job has 4"):
        device_mesh(ParallelConfig(dp=3, ep=2), Dist(rank=0, world=4), policy)
    with pytest.raises(ConfigError, match=r"'parallel\.ep': 3 expert-parallel ranks do not divide the job's 4"):
        device_mesh(ParallelConfig(ep=3), Dist(rank=0, world=4), policy)
    with pytest.raises(ConfigError, match=r"'parallel\.ep': 4 experts per MoE layer cannot be split evenly over ep=3"):
        device_mesh(ParallelConfig(ep=3), Dist(rank=0, world=6), policy)
    loop = build_model({**load_preset("micro"), "experts": {"name": "loop"}})
    with pytest.raises(ConfigError, match=r"'parallel\.ep': the model's LoopExperts compute without a dispatcher"):
        device_mesh(ParallelConfig(ep=2), Dist(rank=0, world=2), loop)
    from transformers import Qwen3Config, Qwen3ForCausalLM

    dense = Qwen3ForCausalLM(Qwen3Config(vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1, head_dim=8))
    with pytest.raises(ConfigError, match=r"'parallel\.ep': ep=2 splits MoE experts over ranks, but Qwen3ForCausalLM"):
        device_mesh(ParallelConfig(ep=2), Dist(rank=0, world=2), dense)
    assert device_mesh(ParallelConfig(), Dist(rank=0, world=4), policy) is None  # ep=1: FSDP2 over every rank


def test_a_trainer_in_one_process_refuses_expert_parallelism():
    config = SFTConfig(batch_size=2, parallel=ParallelConfig(ep=2))
    with pytest.raises(ConfigError, match=r"'parallel\.ep': 2 expert-parallel ranks do not divide the job's 1"):
        SFTTrainer(config, tiny_policy(), [Example([1], [2])], pad_id=0, set_trainable=set_trainable)


# ------------------------------------------------------------------------------------------------
# one step on the mesh equals one process
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ep_runs(tmp_path_factory):
    """``run(world, dp, ep)``: the output folder of ``ep_toy_run.py`` (one SFT step, one GRPO step
    checkpointed, the export) on that layout, launched once per module; ``run(1)`` is the single
    process."""
    done: dict[tuple[int, ...], Path] = {}

    def run(world: int, dp: int = 0, ep: int = 0) -> Path:
        if (world, dp, ep) not in done:
            out = tmp_path_factory.mktemp(f"ep-run-{world}")
            _launch(world, "ep_toy_run.py", str(out), "1", *([str(dp), str(ep)] if ep else []))
            done[world, dp, ep] = out
        return done[world, dp, ep]

    return run


def _result(folder: Path) -> dict:
    return torch.load(folder / "result.pt", weights_only=False)


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize(("world", "dp", "ep"), [(4, 2, 2), (2, 1, 2)], ids=["dp2xep2", "ep2"])
def test_one_sft_and_one_grpo_step_on_the_mesh_equal_one_process(ep_runs, world, dp, ep):
    """Every rank trains on its share of the batch with its ``ep`` rank's experts; losses, every
    gradient, the updated parameters (every expert in the whole state dict) and the expert loads
    are the one process's. Both run in float64 (see test_trainer's rank comparison); the tolerances
    are those of float64 sums beside the fp32 parts the code computes on purpose (router logits,
    log-softmax, per-token loss terms)."""
    one_process, mesh = _result(ep_runs(1)), _result(ep_runs(world, dp, ep))
    assert mesh["rl"]["steps"] == [1]
    _assert_same_training(one_process, mesh)


def _assert_same_training(one_process: dict, mesh: dict) -> None:
    """The last step of both runs (``ep_toy_run.py`` results) trained alike; tolerances measured and
    explained inline."""
    for trainer, metric_keys in (("sft", ("loss", "grad_norm", "token_acc")),
                                 ("rl", ("loss", "reward_mean", "kl", "entropy", "grad_norm", "adv_abs_mean"))):
        a, b = one_process[trainer], mesh[trainer]
        for key in metric_keys:
            # fp32 per-token terms summed over a few dozen tokens: 1e-6 relative
            assert abs(a["metrics"][key] - b["metrics"][key]) <= 1e-6 * max(1.0, abs(a["metrics"][key])), (trainer, key)
        assert sorted(a["grads"]) == sorted(b["grads"]) and len(a["grads"]) > 20, trainer
        for name, grad in a["grads"].items():
            # measured 7e-11; a wrong divide factor on the experts is off by a factor of ep
            assert (grad - b["grads"][name]).abs().max() <= 1e-7 * grad.abs().max() + 1e-10, (trainer, name)
        assert sorted(a["state"]) == sorted(b["state"]), trainer
        for name, value in a["state"].items():
            assert b["state"][name].shape == value.shape, (trainer, name)  # [E, ...]: every expert, gathered
            # measured 6e-9: Adam's first step divides a gradient by its own size (|g| + eps), which
            # amplifies rounding where a gradient is near zero (lr=1e-2 bounds how far one moves)
            assert (value.double() - b["state"][name].double()).abs().max() <= 1e-6, (trainer, name)
        # the trained (sharded, expert-parallel) policy's fp32 logits; one fp32 rounding of |x| < 1
        assert (a["logits"] - b["logits"]).abs().max() <= 1e-6, trainer
    one, split = one_process["rl"]["metrics"], mesh["rl"]["metrics"]
    loads = [k for k in one if k.startswith("expert_load/")]
    assert len(loads) == 2 * 4  # 2 MoE layers x 4 experts, over every data rank's tokens
    # routing is discrete and the float64 hidden states agree far below one fp32 rounding of the
    # router's logits, so every token takes the same experts
    assert one["moe/tokens"] == split["moe/tokens"]
    for key in [*loads, "moe/max_over_mean", "moe/entropy"]:
        assert abs(one[key] - split[key]) <= 1e-7, key


@pytest.mark.slow
@pytest.mark.distributed
def test_the_export_of_an_ep2_run_is_a_standard_checkpoint_with_the_same_logits(ep_runs):
    """The rl stage's export (``save_policy``) of a policy whose experts are split over 2 ranks:
    plain ``transformers`` loads every expert and computes the logits the sharded policy did."""
    from transformers import AutoModelForCausalLM

    out = ep_runs(2, 1, 2)
    trained = _result(out)["rl"]
    # eager experts: transformers' default grouped_mm kernel takes no float64
    model = AutoModelForCausalLM.from_pretrained(out / "hf", experts_implementation="eager")
    assert type(model).__name__ == "Qwen3MoeForCausalLM"
    assert model.model.layers[0].mlp.experts.gate_up_proj.shape[0] == 4
    with torch.no_grad():
        logits = model(input_ids=PROBE).logits.float()
    # the same float64 weights; transformers sums the experts in another order: fp32 rounding of |x| < 1
    assert (logits - trained["logits"]).abs().max() <= 1e-6


# ------------------------------------------------------------------------------------------------
# checkpoints reshard across world sizes
# ------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.distributed
def test_a_dp2_x_ep2_checkpoint_resumes_on_two_ranks_and_on_one_and_continues_step_for_step(ep_runs, tmp_path):
    """GRPO step 1 on 4 ranks (dp=2 x ep=2) leaves a DCP checkpoint with the experts as slices of
    global tensors; step 2 taken from it on 2 ranks (ep=2) and on 1 rank is step 2 of an
    uninterrupted one-process run: losses, gradients, parameters, expert loads (DCP reshards model
    and optimizer; data cursor and sampling seeds are global)."""
    saved = ep_runs(4, 2, 2)
    assert json.loads((saved / "ckpt" / "step-000001" / "trainer.json").read_text())["world"] == 4
    straight = tmp_path / "straight"
    _launch(1, "ep_toy_run.py", str(straight), "2")
    assert _result(straight)["rl"]["steps"] == [1, 2]
    for name, world, layout in (("two", 2, ["1", "2"]), ("one", 1, [])):
        moved = tmp_path / name
        shutil.copytree(saved / "ckpt", moved / "ckpt")
        _launch(world, "ep_toy_run.py", str(moved), "2", *layout)
        resumed = _result(moved)
        assert resumed["rl"]["steps"] == [2], name  # it resumed: step 1 came from the 4-rank checkpoint
        _assert_same_training(_result(straight), resumed)
