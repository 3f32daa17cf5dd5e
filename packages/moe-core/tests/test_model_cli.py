import json

import pytest
from codemoe.core.cli import main
from transformers import AutoModelForCausalLM, AutoTokenizer


def test_summary_prints_the_counts_as_json(capsys):
    assert main(["model", "summary", "tiny", "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)
    assert counts["total"] == counts["embedding"] + counts["expert"] + counts["router"] + counts["dense"]
    assert counts["active"] < counts["total"]


@pytest.mark.slow
def test_summary_table_of_the_1t_preset(capsys):
    assert main(["model", "summary", "moe_1t"]) == 0
    out = capsys.readouterr().out
    assert "total" in out and "1.03T" in out and "103.97B" in out


def test_init_writes_a_checkpoint_plain_transformers_loads(tmp_path, capsys):
    corpus = tmp_path / "corpus.py"
    corpus.write_text("def f(x):\n    return x * 2\n" * 20)
    assert main(["model", "init", "tiny", "--out", str(tmp_path / "ckpt"), "--texts", str(corpus)]) == 0
    assert "wrote" in capsys.readouterr().out
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "ckpt")
    assert model.config.vocab_size == len(tokenizer) and tokenizer.eos_token == "<|eos|>"


@pytest.mark.slow
def test_init_refuses_a_preset_larger_than_memory(tmp_path, capsys):
    assert main(["model", "init", "moe_1t", "--out", str(tmp_path / "big")]) == 2
    err = " ".join(capsys.readouterr().err.split())  # rich wraps long lines
    assert "1.03T parameters" in err and "more than half of this machine's" in err
    assert not (tmp_path / "big").exists()


def test_unknown_preset_is_a_clean_error(capsys):
    assert main(["model", "summary", "tinyy"]) == 2
    # the message holds the clone's path and rich wraps it to the terminal's width: compare words
    assert "did you mean 'tiny'" in " ".join(capsys.readouterr().err.split()).lower()
