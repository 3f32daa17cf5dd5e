"""The copy probe: which action tokens continue a bigram of their context, and the policy's NLL of each group."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch
from codemoe.core.models import build_model, save_pretrained
from codemoe.core.models.presets import load_preset
from codemoe.core.tokenizer import train_tokenizer
from codemoe.rl.copy_probe import copy_probe, split_copies
from codemoe.rl.sft import episode_examples

MODEL = {**load_preset("micro"), "num_layers": 1, "moe_intermediate_size": 32, "max_position_embeddings": 512}
EPISODE = {"resolved": True, "messages": [
    {"role": "system", "content": "Tools: read_file(path), submit()."},
    {"role": "user", "content": "Fix pomku/brarfil.py so that the tests pass."},
    {"role": "assistant", "content": '{"tool": "read_file", "args": {"path": "pomku/brarfil.py"}}'},
    {"role": "tool", "content": "1| def last(items):\n2|     return items[1:]"},
    {"role": "assistant", "content": '{"tool": "submit", "args": {}}'},
]}


def test_a_token_is_a_copy_when_its_bigram_occurred_before_and_only_action_tokens_count():
    ids = [5, 6, 7, 5, 6, 8, 6, 7]
    assert split_copies(ids, [1] * 8) == ["other", "other", "other", "other", "copy", "other", "other", "copy"]
    # observation tokens (mask 0) are no group, but their bigrams count as context
    assert split_copies(ids, [0, 0, 0, 0, 0, 1, 1, 1]) == [None] * 5 + ["other", "other", "copy"]


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    tokenizer = train_tokenizer([m["content"] for m in EPISODE["messages"]] * 4, vocab_size=300)
    return build_model(MODEL, vocab_size=len(tokenizer)), tokenizer


def test_a_policy_with_uniform_logits_scores_every_action_token_log_vocab(policy):
    model, tokenizer = policy
    examples = episode_examples(tokenizer, [EPISODE], 512)
    with torch.no_grad():
        model.lm_head.weight.zero_()  # logits 0 everywhere: p = 1/V for every token
    try:
        stats = copy_probe(model, examples)
    finally:
        torch.manual_seed(0)
        model.lm_head.reset_parameters()
    actions = sum(examples[0].loss_mask)
    assert stats["copy"].tokens + stats["other"].tokens == actions
    assert stats["copy"].tokens > 0 and stats["other"].tokens > 0  # the path in the call is copied from the task
    for s in stats.values():
        assert s.nll == pytest.approx(math.log(model.config.vocab_size), rel=1e-6) and s.likely_share == 0.0


def test_the_probe_gives_the_policys_own_cross_entropy_over_the_actions(policy):
    model, tokenizer = policy
    example = episode_examples(tokenizer, [EPISODE], 512)[0]
    stats = copy_probe(model, [example])
    ids = torch.tensor([example.prompt_ids + example.completion_ids])
    mask = torch.tensor([0] * len(example.prompt_ids) + example.loss_mask, dtype=torch.bool)[1:]
    with torch.no_grad():
        logits = model(ids).logits[0, :-1].float()
    expected = torch.nn.functional.cross_entropy(logits[mask], ids[0, 1:][mask], reduction="sum").item()
    # the same float32 log-softmax summed in another order: rounding of a few hundred terms
    assert stats["copy"].nll_sum + stats["other"].nll_sum == pytest.approx(expected, rel=1e-5)
    assert model.training  # left as it was found


def test_codemoe_sft_copy_probe_prints_and_writes_the_table(policy, tmp_path):
    model, tokenizer = policy
    folder = save_pretrained(model, tokenizer, tmp_path / "checkpoint")
    episodes = tmp_path / "episodes.jsonl"
    episodes.write_text(json.dumps(EPISODE) + "\n")
    cli = [sys.executable, "-m", "codemoe.core", "sft", "copy-probe", str(folder)]
    done = subprocess.run([*cli, str(episodes), "--json", str(tmp_path / "probe.json")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "| copy |" in done.stdout and "| other |" in done.stdout
    table = json.loads((tmp_path / "probe.json").read_text())
    assert table["episodes"] == 1 and table["copy"]["tokens"] + table["other"]["tokens"] == sum(
        episode_examples(tokenizer, [EPISODE], 2048)[0].loss_mask)
    paths = subprocess.run([*cli, str(episodes), "--paths", "--json", str(tmp_path / "paths.json")],
                           capture_output=True, text=True, timeout=300)
    assert paths.returncode == 0, paths.stderr
    assert "greedy writes the rest" in paths.stdout
    assert json.loads((tmp_path / "paths.json").read_text())["paths"]["paths"] == 1  # pomku/brarfil.py
    # bad input names the file and the line
    episodes.write_text(json.dumps(EPISODE) + "\n{not json\n")
    bad = subprocess.run([*cli, str(episodes)], capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "episodes.jsonl:2: not a JSON line" in bad.stderr



def test_the_path_probe_scores_every_named_file_read_after_the_first_observation(policy):
    from codemoe.rl.copy_probe import path_probe

    model, tokenizer = policy
    episode = {**EPISODE, "messages": [*EPISODE["messages"][:4],
                                       {"role": "assistant", "content": '{"tool": "read_file", "args": {"path": "tests/t.py"}}'},
                                       {"role": "tool", "content": "1| from pomku.brarfil import last"}]}
    stats = path_probe(model, tokenizer, [episode])
    assert stats.paths + stats.skipped == 2  # pomku/brarfil.py and tests/t.py
    with torch.no_grad():
        model.lm_head.weight.zero_()  # uniform logits: every token after the first costs log V, argmax is token 0
    try:
        uniform = path_probe(model, tokenizer, [episode])
    finally:
        torch.manual_seed(0)
        model.lm_head.reset_parameters()
    rest = sum(len(tokenizer.encode(p)) - 1 for p in ("pomku/brarfil.py", "tests/t.py"))
    assert uniform.paths == 2 and uniform.complete == 0
    assert uniform.logp_sum == pytest.approx(-rest * math.log(model.config.vocab_size), rel=1e-5)
    assert path_probe(model, tokenizer, [episode], observations=3).paths == 0  # no third observation: nothing probed
