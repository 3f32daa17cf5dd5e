"""A byte-level BPE tokenizer trained locally, so nothing is downloaded at run time.

Byte-level BPE covers every input (any byte is a token), which matters for code: unusual
identifiers, unicode and whitespace all round-trip exactly. Training is deterministic for the same
texts and vocabulary size.
"""

from __future__ import annotations

from collections.abc import Iterable

from transformers import PreTrainedTokenizerFast

__all__ = ["BOS", "CHAT_TEMPLATE", "EOS", "PAD", "train_tokenizer"]

BOS = "<|bos|>"
EOS = "<|eos|>"
PAD = "<|pad|>"

# One turn per message: "<|bos|>role\ncontent<|eos|>\n"; the generation prompt opens an assistant turn,
# so a model trained on these turns ends its answer with <|eos|>.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|bos|>' + message['role'] + '\n' + message['content'] + '<|eos|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|bos|>assistant\n' }}{% endif %}"
)


def train_tokenizer(texts: Iterable[str], vocab_size: int = 1024) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on ``texts``.

    The special tokens ``<|bos|>``, ``<|eos|>`` and ``<|pad|>`` take ids 0, 1 and 2 and are the
    tokenizer's bos, eos and pad tokens; the chat template renders ``apply_chat_template`` messages
    as ``<|bos|>role\\ncontent<|eos|>`` turns.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[BOS, EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=1,
        show_progress=False,
    )
    tokenizer.train_from_iterator(list(texts), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast
