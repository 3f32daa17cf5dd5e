"""When a sample ends: end-of-sequence token, stop string, or its token budget."""

from __future__ import annotations

from typing import Any

__all__ = ["StopChecker", "eos_token_ids"]

# Tokens decoded per stop-string check beyond the longest stop string: every ordinary token
# decodes to at least one character, so this window always contains a stop string that just ended.
_STOP_WINDOW_SLACK = 8


def eos_token_ids(model: Any, tokenizer: Any) -> set[int]:
    """End-of-sequence ids from the tokenizer and the model's generation config."""
    ids: set[int] = set()
    for source in (getattr(tokenizer, "eos_token_id", None), _generation_eos(model)):
        if isinstance(source, int):
            ids.add(source)
        elif isinstance(source, (list, tuple)):
            ids.update(int(i) for i in source)
    return ids


def _generation_eos(model: Any) -> Any:
    config = getattr(model, "generation_config", None)
    return getattr(config, "eos_token_id", None)


class StopChecker:
    """Decides the finish reason of a sample after each token (None while it goes on)."""

    def __init__(self, tokenizer: Any, eos_ids: set[int], stop: list[str], max_new_tokens: int, ignore_eos: bool):
        self.tokenizer = tokenizer
        self.eos_ids = set() if ignore_eos else eos_ids
        self.stop = stop
        self.max_new_tokens = max_new_tokens
        self.window = max((len(s) for s in stop), default=0) + _STOP_WINDOW_SLACK

    def check(self, tokens: list[int]) -> str | None:
        if tokens[-1] in self.eos_ids:
            return "stop"
        if self.stop and self.tokenizer is not None:
            tail = self.tokenizer.decode(tokens[-self.window :], skip_special_tokens=True)
            if any(s in tail for s in self.stop):
                return "stop"
        if len(tokens) >= self.max_new_tokens:
            return "length"
        return None

    def final_text(self, tokens: list[int]) -> str:
        """The sample's text: special tokens skipped, cut before the first stop string."""
        if self.tokenizer is None:
            return ""
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        cuts = [text.find(s) for s in self.stop if s in text]
        return text[: min(cuts)] if cuts else text
