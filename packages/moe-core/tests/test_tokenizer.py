from codemoe.core.tokenizer import train_tokenizer

TEXTS = ["def add(a, b):\n    return a + b\n", "print('héllo, 世界')\n", "for i in range(10):\n    pass\n"] * 5


def test_special_tokens_are_bos_eos_pad_with_fixed_ids():
    tok = train_tokenizer(TEXTS, vocab_size=300)
    assert (tok.bos_token, tok.eos_token, tok.pad_token) == ("<|bos|>", "<|eos|>", "<|pad|>")
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (0, 1, 2)


def test_round_trips_code_and_unicode_exactly():
    tok = train_tokenizer(TEXTS, vocab_size=300)
    text = "def f(x):\n\treturn x  # 注释 ünïcode\n"
    assert tok.decode(tok(text)["input_ids"]) == text


def test_training_is_deterministic():
    a = train_tokenizer(TEXTS, vocab_size=280)
    b = train_tokenizer(TEXTS, vocab_size=280)
    assert a.get_vocab() == b.get_vocab()
    assert a("return a + b")["input_ids"] == b("return a + b")["input_ids"]


def test_chat_template_renders_turns_and_generation_prompt():
    tok = train_tokenizer(TEXTS, vocab_size=300)
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == "<|bos|>system\nbe brief<|eos|>\n<|bos|>user\nhi<|eos|>\n<|bos|>assistant\n"
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert ids[0] == tok.bos_token_id and tok.decode(ids) == text
