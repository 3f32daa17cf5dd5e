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

``--paths`` asks a narrower question, the one an agent meets first: can the policy name the files
of a repository it never saw from what it has been shown by then? For every file an episode's
actions name (``"path": ...``), the episode is cut after its first observation (the task, the file
list, the first test run) and an action that reads that file is appended, in the episode's own
call format; the probe reports whether greedy decoding writes the path's tokens after its first
one (which file to read is a choice, the rest is copying) and their log-probability.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["CopyStats", "PathStats", "add_sft_command", "copy_probe", "path_probe", "split_copies"]

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


@dataclass
class PathStats:
    """The paths probed: how many, how many greedy decoding completes, the summed log-prob of their
    tokens after the first (nats), and those it could not place in the tokens (skipped)."""

    paths: int = 0
    complete: int = 0
    logp_sum: float = 0.0
    skipped: int = 0

    @property
    def complete_share(self) -> float:
        return self.complete / self.paths if self.paths else float("nan")

    @property
    def logp(self) -> float:
        return self.logp_sum / self.paths if self.paths else float("nan")

    def as_dict(self) -> dict[str, float]:
        return {"paths": self.paths, "complete": self.complete, "complete_share": self.complete_share,
                "logp": self.logp, "skipped": self.skipped}


_PATH_ARG = re.compile(r'("path":\s*")([^"]+)(")')


def path_probe(model: Any, tokenizer: Any, records: Sequence[dict[str, Any]], observations: int = 1) -> PathStats:
    """The ``--paths`` probe (see the module docstring) over recorded episodes: each is cut after its
    first ``observations`` tool turns, and for each file its actions name, the action that reads it
    is appended (the episode's first ``read_file`` action, else its first with a ``"path"``, that path
    swapped in)."""
    import torch
    from codemoe.rl.sft import episode_examples

    stats = PathStats()
    was_training = model.training
    model.eval()
    try:
        for record in records:
            messages = record["messages"]
            with_path = [m["content"] for m in messages if m["role"] == "assistant" and _PATH_ARG.search(m["content"])]
            template = next((a for a in with_path if "read_file" in a), with_path[0] if with_path else None)
            tools = [i for i, m in enumerate(messages) if m["role"] == "tool"]
            if template is None or len(tools) < observations:
                continue
            context = messages[: tools[observations - 1] + 1]
            paths = dict.fromkeys(match.group(2) for m in messages if m["role"] == "assistant"
                                  for match in _PATH_ARG.finditer(m["content"]))
            for path in paths:
                action = _PATH_ARG.sub(lambda match, p=path: match.group(1) + p + match.group(3), template, count=1)
                (example,) = episode_examples(tokenizer, [{"messages": [*context, {"role": "assistant", "content": action}]}],
                                              max_tokens=1 << 30, resolved_only=False)
                ids = list(example.prompt_ids) + list(example.completion_ids)
                target = list(tokenizer.encode(path))
                start = next((i for i in range(len(ids) - len(target), -1, -1) if ids[i:i + len(target)] == target), None)
                if start is None or len(target) < 2:  # the path's tokens merged with its neighbours, or one token
                    stats.skipped += 1
                    continue
                with torch.no_grad():
                    logits = model(torch.tensor([ids[: start + len(target)]])).logits[0].float()
                logp = torch.log_softmax(logits, dim=-1)
                rest = range(start + 1, start + len(target))
                stats.paths += 1
                stats.logp_sum += sum(float(logp[t - 1, ids[t]]) for t in rest)
                stats.complete += all(int(logp[t - 1].argmax()) == ids[t] for t in rest)
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
    if args.paths:
        chosen = records[: args.max_episodes or None]
        paths = path_probe(model, tokenizer, chosen, args.after_observations)
        if not paths.paths:
            raise SystemExit(f"copy-probe: no path of {path} could be probed ({paths.skipped} skipped)")
        print(f"{len(chosen)} episodes of {path.name}, every file their actions name, read after observation "
              f"{args.after_observations}:")
        print("| paths | greedy writes the rest | log-prob of the rest (nats) | skipped |\n|---|---|---|---|")
        print(f"| {paths.paths} | {paths.complete} ({paths.complete_share:.1%}) | {paths.logp:.2f} | {paths.skipped} |")
        if args.json:
            Path(args.json).write_text(json.dumps({"episodes": len(chosen), "paths": paths.as_dict()}, indent=2) + "\n")
        return 0
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
    p.add_argument("--paths", action="store_true",
                   help="instead: whether the policy writes each file the episodes' actions name, read right after "
                        "their first observation (see above)")
    p.add_argument("--after-observations", type=int, default=1,
                   help="--paths: observations of each episode kept before the read (default 1)")
    p.add_argument("--json", default="", help="also write the table as JSON here")
    p.set_defaults(handler=_cmd_copy_probe)
