"""Does a policy copy from its context? The log-probabilities it gives recorded agent actions, split
into copied tokens and the rest.

An agent on a repository it has never seen must write paths, names and lines to edit that only its
context holds (the file list, a failing test's output, a file it read). A policy that memorised its
training repositories' names writes the call format right and invents the names. This probe
measures which it does: for every action token of recorded episodes (the oracle's, say, on held-out
tasks), its negative log-likelihood under the policy, grouped as

- **copy**: the token continues a bigram (previous token, token) that occurred earlier in the
  sequence, prompt and observations included: what an induction head can predict;
- **other**: the rest (the tool-call format, tool names, text the action writes anew).

On train episodes both groups fall as SFT goes on; on held-out ones a policy that copies keeps the
copy group low too, one that memorises does not (``docs/performance.md``, "Agents on generated
repositories").

``codemoe sft copy-probe CHECKPOINT EPISODES.jsonl`` prints the table; ``--json PATH`` writes it.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["CopyStats", "add_sft_command", "copy_probe", "split_copies"]

GROUPS = ("copy", "other")


@dataclass
class CopyStats:
    """One group's action tokens: how many, their mean NLL (nats), the share the policy gives p > 1/2."""

    tokens: int = 0
    nll_sum: float = 0.0
    likely: int = 0

    @property
    def nll(self) -> float:
        return self.nll_sum / self.tokens if self.tokens else float("nan")

    @property
    def likely_share(self) -> float:
        return self.likely / self.tokens if self.tokens else float("nan")

    def as_dict(self) -> dict[str, float]:
        return {"tokens": self.tokens, "nll": self.nll, "p_over_half": self.likely_share}


def split_copies(ids: Sequence[int], loss_mask: Sequence[int]) -> list[str | None]:
    """For each position: 'copy' or 'other' where ``loss_mask`` is 1 (an action token), else None.

    Position 0 has no previous token, so it is 'other' when masked in.
    """
    seen: set[tuple[int, int]] = set()
    out: list[str | None] = []
    for t, token in enumerate(ids):
        bigram = (ids[t - 1], token) if t else None
        out.append(("copy" if bigram in seen else "other") if loss_mask[t] else None)
        if bigram is not None:
            seen.add(bigram)
    return out


def copy_probe(model: Any, examples: Sequence[Any]) -> dict[str, CopyStats]:
    """The probe over ``examples`` (:class:`~codemoe.rl.sft.Example`, as :func:`episode_examples` makes)."""
    import torch

    stats = {group: CopyStats() for group in GROUPS}
    was_training = model.training
    model.eval()
    try:
        for example in examples:
            ids = list(example.prompt_ids) + list(example.completion_ids)
            mask = [0] * len(example.prompt_ids) + list(example.loss_mask or [1] * len(example.completion_ids))
            groups = split_copies(ids, mask)
            with torch.no_grad():
                logits = model(torch.tensor([ids])).logits[0].float()
            logp = torch.log_softmax(logits[:-1], dim=-1).gather(1, torch.tensor(ids[1:]).unsqueeze(1)).squeeze(1)
            for t in range(1, len(ids)):
                group = groups[t]
                if group is None:
                    continue
                value = float(logp[t - 1])
                s = stats[group]
                s.tokens += 1
                s.nll_sum -= value
                s.likely += value > math.log(0.5)
    finally:
        model.train(was_training)
    return stats


def _cmd_copy_probe(args: argparse.Namespace) -> int:
    from codemoe.core import build_plugin_manager, build_registry
    from codemoe.core.models import load_pretrained
    from codemoe.rl.sft import episode_examples, read_episodes

    path = Path(args.episodes)
    try:
        records = read_episodes(path)
    except ValueError as exc:
        raise SystemExit(f"copy-probe: {exc}") from None
    model, tokenizer = load_pretrained(args.checkpoint, registry=build_registry(build_plugin_manager()))
    if tokenizer is None:
        raise SystemExit(f"copy-probe: checkpoint {args.checkpoint} has no tokenizer")
    examples = episode_examples(tokenizer, records[: args.max_episodes or None], args.max_tokens, resolved_only=False)
    if not examples:
        raise SystemExit(f"copy-probe: {path} holds no episode with an action")
    stats = copy_probe(model, examples)
    print(f"{len(examples)} episodes of {path.name}, action tokens:")
    print("| group | tokens | NLL (nats) | p > 1/2 |\n|---|---|---|---|")
    for group, s in stats.items():
        print(f"| {group} | {s.tokens} | {s.nll:.3f} | {s.likely_share:.1%} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"episodes": len(examples), **{g: s.as_dict() for g, s in stats.items()}},
                                              indent=2) + "\n")
    return 0


def add_sft_command(subparsers: Any) -> None:
    """``codemoe sft copy-probe``."""
    parser = subparsers.add_parser("sft", help="inspect what an SFT checkpoint learned (copy-probe)")
    sub = parser.add_subparsers(dest="sft_command", metavar="SUBCOMMAND", required=True)
    p = sub.add_parser("copy-probe", help="a policy's NLL of recorded actions: tokens copied from the context vs the rest",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", help="a checkpoint folder (an sft or rl stage's 'checkpoint')")
    p.add_argument("episodes", help="JSONL of recorded episodes (a trajectories stage's trajectories.jsonl)")
    p.add_argument("--max-episodes", type=int, default=18, help="episodes read from the top (0: all; default 18)")
    p.add_argument("--max-tokens", type=int, default=2048, help="tokens kept of each episode after its prompt")
    p.add_argument("--json", default="", help="also write the table as JSON here")
    p.set_defaults(handler=_cmd_copy_probe)
