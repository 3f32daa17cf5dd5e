"""The agent's conversation as the policy sees it: one rendering for SFT, RL episodes and evaluation.

An episode's transcript is chat messages (the environment's system turn with the tools, the task
as the user turn, then the agent's actions and the tools' observations). Imitation (SFT on
reference trajectories), multi-turn RL and agent evaluation must show the policy the same text, or
what SFT taught is asked for in a context it never saw. :class:`ChatFormat` renders through the
tokenizer's own chat template (``apply_chat_template``):

- :meth:`ChatFormat.prompt`: the messages so far with the assistant turn opened (the first prompt);
- :meth:`ChatFormat.observation`: what follows an action the engine produced, so that the history
  stays the engine's own tokens (token-in/token-out) and equals the template's rendering of the
  whole conversation: the close of the assistant turn (unless the action's tokens already end with
  it), the observation as a ``tool`` turn, and the next assistant turn opened. It comes in two
  parts, ``head + content`` and ``tail``, so that a trainer capping an observation's tokens cuts the
  content and never the tail.

The parts are found once by rendering probe conversations, so any template whose rendering of a
conversation extends the rendering of its beginning works (codemoe's own template, ChatML, ...);
one that does not (a template that rewrites earlier turns) is refused with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ChatFormat", "ObservationText"]

_ACTION, _OBSERVATION, _TASK = "\x01ACTION\x01", "\x01OBSERVATION\x01", "\x01TASK\x01"


@dataclass(frozen=True)
class ObservationText:
    """The text appended to the history after an action: ``text`` (may be cut) then ``tail`` (never cut)."""

    text: str
    tail: str


class ChatFormat:
    """Renders agent conversations with ``tokenizer``'s chat template (see the module docstring)."""

    def __init__(self, tokenizer: Any, *, observation_role: str = "tool") -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(f"{type(tokenizer).__name__} has no chat template: agent episodes render as chat turns")
        self.tokenizer, self.role = tokenizer, observation_role
        user = [{"role": "user", "content": _TASK}]
        opened = self._render(user, generation=True)
        acted = self._render([*user, {"role": "assistant", "content": _ACTION}], generation=False)
        answered = self._render(
            [*user, {"role": "assistant", "content": _ACTION}, {"role": observation_role, "content": _OBSERVATION}],
            generation=True,
        )
        if not (acted.startswith(opened) and answered.startswith(acted) and acted[len(opened):].startswith(_ACTION)):
            raise ValueError(
                f"the chat template of {type(tokenizer).__name__} does not render a conversation as the rendering "
                "of its beginning followed by the new turns: an episode's history could not stay the engine's tokens"
            )
        self.close = acted[len(opened) + len(_ACTION):]  # ends the assistant turn (e.g. "<|eos|>\n")
        turn = answered[len(acted):]
        if turn.count(_OBSERVATION) != 1:
            raise ValueError(f"the chat template of {type(tokenizer).__name__} does not render a '{observation_role}' turn")
        self.head, self.tail = turn.split(_OBSERVATION)  # "<|bos|>tool\n", "<|eos|>\n<|bos|>assistant\n"
        eos = getattr(tokenizer, "eos_token", None)
        self.eos_id = getattr(tokenizer, "eos_token_id", None)
        self._close_after_eos = self.close[len(eos):] if eos and self.close.startswith(eos) else None

    def _render(self, messages: list[dict[str, str]], *, generation: bool) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation)

    def prompt(self, messages: list[dict[str, str]]) -> str:
        """``messages`` rendered with the assistant's turn opened: the policy's next prompt."""
        return self._render(list(messages), generation=True)

    def observation(self, observation: str, *, action_token_ids: list[int] | None = None) -> ObservationText:
        """What follows an action in the history: the assistant turn's close, ``observation`` as a tool
        turn, the next assistant turn opened.

        With ``action_token_ids`` (the engine's tokens of the action) the close leaves out the
        end-of-sequence token when the action already ends with it; without them (an action known
        only as text, special tokens stripped) the whole close is written.
        """
        close = self.close
        if (action_token_ids and self._close_after_eos is not None and self.eos_id is not None
                and action_token_ids[-1] == self.eos_id):
            close = self._close_after_eos
        return ObservationText(text=f"{close}{self.head}{observation}", tail=self.tail)
