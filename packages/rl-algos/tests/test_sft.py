"""The supervised warm-up: each router phase trains only its parameter group, and the loss falls."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from codemoe.core.models import build_model
from codemoe.core.models.presets import load_preset
from codemoe.core.moe import parameter_groups, set_trainable
from codemoe.rl.sft import Example, PhaseConfig, SFTConfig, SFTTrainer, copy_drill

SPEC = {**load_preset("micro"), "vocab_size": 32, "moe_intermediate_size": 32, "max_position_embeddings": 64}


def _examples() -> list[Example]:
    # Prompt [p]: answer p+1, p+2, p+3 (a pattern a tiny model picks up in a few dozen steps).
    return [Example([p], [p + 1, p + 2, p + 3]) for p in range(3, 20)]


def _snapshot(model):
    return {name: [p.detach().clone() for p in params] for name, params in parameter_groups(model).items()}


def _changed(before, model) -> set[str]:
    after = parameter_groups(model)
    return {g for g in before if any(not torch.equal(a, b) for a, b in zip(before[g], after[g], strict=True))}


def test_each_phase_trains_only_its_group():
    model = build_model(SPEC)
    for phase, expected in (("router", {"router"}), ("experts", {"experts"}), ("dense", {"dense"})):
        before = _snapshot(model)
        config = SFTConfig(phases=[PhaseConfig(phase, 2, 1e-2)], batch_size=4)
        SFTTrainer(config, model, _examples(), pad_id=0, set_trainable=set_trainable).fit()
        assert _changed(before, model) == expected, phase
    assert all(p.requires_grad for p in model.parameters())  # every group is trainable again afterwards


def test_warm_up_lowers_the_loss_and_reports_every_step():
    model = build_model(SPEC)
    steps: list[tuple[int, dict]] = []
    config = SFTConfig(phases=[PhaseConfig("router", 5, 1e-2), PhaseConfig("all", 40, 1e-2)], batch_size=8)
    trainer = SFTTrainer(
        config, model, _examples(), pad_id=0, set_trainable=set_trainable, on_step=lambda s, m: steps.append((s, m))
    )
    result = trainer.fit()
    assert result["steps"] == 45 and [s for s, _ in steps] == list(range(1, 46))
    assert result["loss_last"] < 0.5 * result["loss_first"]
    assert steps[0][1]["phase"] == "router" and steps[-1][1]["phase"] == "all"
    assert steps[-1][1]["balance_loss"] > 0



def test_each_step_reports_its_learning_rate_throughput_and_routing():
    model = build_model(SPEC)
    steps: list[dict] = []
    examples = [Example([p], [p + 1, p + 2, p + 3][: 1 + p % 3]) for p in range(3, 20)]  # 1-3 tokens each
    config = SFTConfig(phases=[PhaseConfig("router", 2, 3e-3), PhaseConfig("all", 2, 1e-3)], batch_size=4)
    SFTTrainer(config, model, examples, pad_id=0, set_trainable=set_trainable,
               on_step=lambda s, m: steps.append(m)).fit()
    assert [m["lr"] for m in steps] == [3e-3, 3e-3, 1e-3, 1e-3]
    for m in steps:
        assert 4 <= m["tokens"] <= 12  # 4 completions of 1-3 tokens
        assert m["tokens_per_s"] == pytest.approx(m["tokens"] / m["step_seconds"])
        for layer in range(SPEC["num_layers"]):
            shares = [m[f"expert_load/{layer}/{e}"] for e in range(SPEC["num_experts"])]
            # each layer's shares of its routed (token, expert) pairs: a sum of E float divisions
            assert sum(shares) == pytest.approx(1.0, abs=1e-9)
        assert m["moe/max_over_mean"] >= 1.0


def test_the_default_phases_train_a_dense_policy_skipping_the_router_phases(caplog):
    """A policy without MoE layers has nothing for the router and experts phases: they are skipped
    with a warning, and the phases that have parameters train as configured."""
    from codemoe.core.models.presets import load_preset as preset

    torch.manual_seed(0)
    model = build_model({**preset("tiny_qwen3"), "vocab_size": 32, "max_position_embeddings": 64})
    before = [p.detach().clone() for p in model.parameters()]
    steps: list[str] = []
    trainer = SFTTrainer(SFTConfig(batch_size=4), model, _examples(), pad_id=0, set_trainable=set_trainable,
                         on_step=lambda s, m: steps.append(m["phase"]))
    with caplog.at_level("WARNING", logger="codemoe.rl"):
        result = trainer.fit()
    trained = {phase.phase for phase in SFTConfig().phases} - {"router", "experts", "moe", "frozen_router"}
    assert set(steps) == trained and result["steps"] == len(steps) > 0
    assert "trains nothing" in caplog.text
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


RECORDS = [
    {
        "resolved": True,
        "messages": [
            {"role": "system", "content": "tools: read_file, submit"},
            {"role": "user", "content": "fix add()"},
            {"role": "assistant", "content": '{"tool": "read_file", "path": "m.py"}'},
            {"role": "tool", "content": "def add(a, b): return a - b"},
            {"role": "assistant", "content": '{"tool": "submit"}'},
        ],
    },
    {"resolved": False, "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]},
]


def test_trajectories_give_one_example_per_assistant_turn_of_solved_episodes():
    from codemoe.core.tokenizer import train_tokenizer
    from codemoe.rl.sft import trajectory_pairs

    tokenizer = train_tokenizer([m["content"] for r in RECORDS for m in r["messages"]], vocab_size=300)
    pairs = trajectory_pairs(tokenizer, RECORDS)
    assert [c for _, c in pairs] == ['{"tool": "read_file", "path": "m.py"}', '{"tool": "submit"}']
    assert pairs[0][0].endswith("<|bos|>assistant\n") and "fix add()" in pairs[0][0]
    assert "def add(a, b)" in pairs[1][0]  # the tool's answer is context for the next turn
    assert len(trajectory_pairs(tokenizer, RECORDS, resolved_only=False)) == 3


@pytest.mark.slow
@pytest.mark.distributed
def test_the_loss_covers_only_the_tokens_an_examples_loss_mask_keeps():
    from codemoe.rl.logprobs import token_stats

    torch.manual_seed(0)
    model = build_model(SPEC)
    kept = Example([3, 4], [5, 6, 7, 8], [1, 0, 1, 0])  # an episode: action, observation, action, observation
    other = Example([3, 4], [5, 6, 7, 9], [1, 0, 1, 0])  # differs only in a token the mask leaves out
    losses = []
    for example in (kept, other):
        config = SFTConfig(phases=[PhaseConfig("all", 1, 0.0)], batch_size=1, balance_coef=0.0)
        losses.append(SFTTrainer(config, model, [example], pad_id=0, set_trainable=set_trainable).fit()["loss_first"])
    with torch.no_grad():
        logp = token_stats(model, [[3, 4]], torch.tensor([[5, 6, 7, 8]]), pad_id=0).logp[0]
    # the same forward over the same tokens: equal up to float32 summation order (~1e-7 relative)
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)
    assert losses[0] == pytest.approx(-(logp[0] + logp[2]).item() / 2, rel=1e-5)


@pytest.mark.parametrize("micro_batch", [0, 2])
def test_two_fsdp2_ranks_take_the_steps_of_one_rank(tmp_path, micro_batch):
    """Each rank trains on half of every global batch; losses, gradient norms and token accuracy
    over the router phase and the joint phase match one process (which runs the whole batch in one
    forward); with micro_batch 2 each rank runs its half in two forwards, their gradients accumulated
    before FSDP2's step."""
    here = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": str(here), "OMP_NUM_THREADS": "1"}
    script = str(here / "sft_toy_run.py")
    subprocess.run([sys.executable, script, str(tmp_path / "one")], env=env, check=True)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    subprocess.run([*torchrun, script, str(tmp_path / "two")], env={**env, "CODEMOE_TEST_MICRO_BATCH": str(micro_batch)},
                   check=True)
    read = lambda path: [json.loads(line) for line in path.read_text().splitlines()][:-1]  # noqa: E731
    one, two = read(tmp_path / "one" / "sft-rank0.jsonl"), read(tmp_path / "two" / "sft-rank0.jsonl")
    assert [m["step"] for m in two] == [1, 2, 3, 4, 5] and [m["phase"] for m in two] == ["router"] * 2 + ["all"] * 3
    for a, b in zip(one, two, strict=True):
        for key in ("loss", "grad_norm", "token_acc"):
            assert abs(a[key] - b[key]) <= 1e-4 + 1e-3 * abs(a[key]), (a["step"], key, a[key], b[key])
        assert a["tokens"] == b["tokens"] and a["lr"] == b["lr"]  # the global batch's, summed over ranks


def _random_examples(count: int, length: int, vocab: int, seed: int = 0) -> list[Example]:
    rng = random.Random(seed)
    return [Example([rng.randrange(3, vocab) for _ in range(8)], [rng.randrange(3, vocab) for _ in range(length)])
            for _ in range(count)]


def test_a_copy_drill_asks_for_what_followed_its_cue_in_the_window():
    rng = random.Random(0)
    for example in _random_examples(200, 60, 40):
        drill = copy_drill(example, rng, context=48, sep_id=1)
        assert drill is not None
        window, cue = drill.prompt_ids[:-3], drill.prompt_ids[-2:]
        assert drill.prompt_ids[-3] == 1 and len(window) == 48
        assert " ".join(map(str, window)) in " ".join(map(str, example.prompt_ids + example.completion_ids))
        at = [i for i in range(len(window) - 1) if window[i:i + 2] == cue]
        assert len(at) == 1  # the cue occurs once: what follows it is determined
        assert drill.completion_ids == window[at[0] + 2:at[0] + 2 + len(drill.completion_ids)]
        assert 2 <= len(drill.completion_ids) <= 14 and drill.loss_mask is None
    assert copy_drill(Example([5, 6], [7, 8, 9]), rng, context=48, sep_id=1) is None  # too short to cut from
    assert copy_drill(Example([5, 6] * 12, [5, 6] * 4), rng, context=48, sep_id=1) is None  # no bigram occurs once


def test_a_drill_of_several_spans_asks_for_each_after_its_own_separator_and_cue():
    for seed, example in enumerate(_random_examples(200, 60, 40)):
        one = copy_drill(example, random.Random(seed), context=48, sep_id=1)  # a one-span drill from the same state
        drill = copy_drill(example, random.Random(seed), context=48, sep_id=1, spans=5)
        assert drill is not None and one is not None
        window = drill.prompt_ids[:-3]
        # the first span is the one-span drill's: the same window, cue and copy
        assert drill.prompt_ids == one.prompt_ids and drill.completion_ids[:len(one.completion_ids)] == one.completion_ids
        rows = [drill.prompt_ids[-2:] + drill.completion_ids[:len(one.completion_ids)]]
        mask = drill.loss_mask
        assert mask is not None and len(mask) == len(drill.completion_ids)
        assert mask[:len(one.completion_ids)] == [1] * len(one.completion_ids)
        rest, rest_mask = drill.completion_ids[len(one.completion_ids):], mask[len(one.completion_ids):]
        while rest:  # separator, cue (not scored), the rest of the span (scored), up to the next separator
            assert rest[0] == 1 and rest_mask[:3] == [0, 0, 0]
            end = next((i for i in range(3, len(rest)) if rest_mask[i] == 0), len(rest))
            assert rest_mask[3:end] == [1] * (end - 3)
            rows.append(rest[1:end])
            rest, rest_mask = rest[end:], rest_mask[end:]
        assert len(rows) == 5
        for span in rows:
            at = [i for i in range(len(window) - 1) if window[i:i + 2] == span[:2]]
            assert len(at) == 1 and window[at[0]:at[0] + len(span)] == span and 4 <= len(span) <= 16
    with pytest.raises(ValueError, match="copy_spans must be >= 1, got 0"):
        PhaseConfig("all", 1, 1e-3, data="copy", copy_spans=0)


def test_a_copy_phase_trains_on_drills_at_its_own_batch_size_and_teaches_copying():
    torch.manual_seed(0)
    spec = {**SPEC, "vocab_size": 48, "max_position_embeddings": 96, "hidden_size": 64, "num_heads": 4, "head_dim": 16}
    model = build_model(spec)
    seen: list[dict] = []
    config = SFTConfig(phases=[PhaseConfig("all", 400, 3e-3, data="copy", batch_size=32, copy_context=40)], batch_size=4)
    SFTTrainer(config, model, _random_examples(64, 40, 48), pad_id=0, set_trainable=set_trainable,
               on_step=lambda s, m: seen.append(m), copy_sep_id=1).fit()
    assert all(m["tokens"] <= 32 * 14 for m in seen) and max(m["tokens"] for m in seen) > 4 * 14  # 32 drills a step
    # random tokens: only copying from the window predicts them (chance: 1 in 45); 0.0 for the first
    # 100 steps, 0.46 after 300 when this was written
    early, late = [m["token_acc"] for m in seen[:50]], [m["token_acc"] for m in seen[-25:]]
    assert sum(early) / 50 < 0.05 and sum(late) / 25 > 0.3, late


def test_a_copy_phase_of_several_spans_a_drill_scores_only_the_copies_and_teaches_copying_in_fewer_steps():
    torch.manual_seed(0)
    spec = {**SPEC, "vocab_size": 48, "max_position_embeddings": 160, "hidden_size": 64, "num_heads": 4, "head_dim": 16}
    seen: list[dict] = []
    phase = PhaseConfig("all", 200, 3e-3, data="copy", batch_size=32, copy_context=40, copy_spans=4)
    SFTTrainer(SFTConfig(phases=[phase], batch_size=4), build_model(spec), _random_examples(64, 40, 48), pad_id=0,
               set_trainable=set_trainable, on_step=lambda s, m: seen.append(m), copy_sep_id=1).fit()
    # the loss counts the copied tokens alone: 4 spans of 2 to 14 of them per drill, no separator or cue
    assert all(m["tokens"] <= 32 * 4 * 14 for m in seen) and min(m["tokens"] for m in seen) >= 32 * 4 * 2
    # 0.59 over the last 25 of 200 steps when this was written; one span a drill was at 0.30 after as many
    early, late = [m["token_acc"] for m in seen[:25]], [m["token_acc"] for m in seen[-25:]]
    assert sum(early) / 25 < 0.05 and sum(late) / 25 > 0.4, late


def test_a_copy_phase_states_what_it_needs():
    with pytest.raises(ValueError, match="data must be 'examples' or 'copy', got 'drills'"):
        PhaseConfig("all", 1, 1e-3, data="drills")
    config = SFTConfig(phases=[PhaseConfig("all", 1, 1e-3, data="copy")], batch_size=4)
    with pytest.raises(ValueError, match="needs copy_sep_id"):
        SFTTrainer(config, build_model(SPEC), _examples(), pad_id=0, set_trainable=set_trainable)
    with pytest.raises(ValueError, match="needs examples of 24 tokens or more"):
        SFTTrainer(config, build_model(SPEC), _examples(), pad_id=0, set_trainable=set_trainable, copy_sep_id=1)
    repetitive = [Example([5, 6] * 12, [5, 6] * 4)]  # long enough, but no bigram occurs once
    with pytest.raises(ValueError, match="examples in a row gave no copy drill"):
        SFTTrainer(config, build_model(SPEC), repetitive, pad_id=0, set_trainable=set_trainable, copy_sep_id=1).fit()


def test_micro_batches_sorted_by_length_give_the_whole_batch_gradient():
    """One optimizer step over 6 examples of mixed lengths: in one forward, or sorted into forwards
    of 2 whose gradients accumulate, the loss and every gradient agree (same token-mean loss; only
    the float summation order differs)."""
    rng = random.Random(3)
    examples = [Example([rng.randrange(3, 32) for _ in range(rng.randint(1, 6))],
                        [rng.randrange(3, 32) for _ in range(rng.randint(2, 12))]) for _ in range(6)]
    for e in examples[::2]:  # some rows score only part of their completion
        e.loss_mask = [int(j % 3 != 0) for j in range(len(e.completion_ids))]
    runs = {}
    for name, config_size, phase_size in (("whole", 0, 0), ("config", 2, 0), ("phase", 0, 2)):
        torch.manual_seed(0)
        model = build_model(SPEC)
        seen: list[dict] = []
        config = SFTConfig(phases=[PhaseConfig("all", 1, 1e-3, micro_batch_size=phase_size)], batch_size=6,
                           balance_coef=0.0, micro_batch_size=config_size)
        SFTTrainer(config, model, examples, pad_id=0, set_trainable=set_trainable,
                   on_step=lambda s, m, seen=seen: seen.append(m)).fit()
        runs[name] = (seen[0], {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    (whole, g0), (micro, g2) = runs["whole"], runs["config"]
    # a phase's own micro_batch_size runs the same forwards as the config's
    assert runs["phase"][0]["loss"] == micro["loss"] and all(torch.equal(g2[n], runs["phase"][1][n]) for n in g2)
    assert whole["tokens"] == micro["tokens"] and whole["token_acc"] == micro["token_acc"]
    assert abs(whole["loss"] - micro["loss"]) <= 1e-6 * abs(whole["loss"])
    assert g0.keys() == g2.keys() and len(g0) > 10
    # float32 sums of a few hundred terms in another order: relative error near 1e-7, bounded well below 1e-5
    diff = sum(float((g0[n] - g2[n]).pow(2).sum()) for n in g0) ** 0.5
    norm = sum(float(g0[n].pow(2).sum()) for n in g0) ** 0.5
    assert norm > 0 and diff <= 1e-5 * norm, (diff, norm)
    with pytest.raises(ValueError, match="micro_batch_size must be >= 0"):
        SFTConfig(micro_batch_size=-1)
    with pytest.raises(ValueError, match="micro_batch_size must be >= 0"):
        PhaseConfig("all", 1, 1e-3, micro_batch_size=-1)
