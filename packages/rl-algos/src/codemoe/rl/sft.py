"""Supervised warm-up before RL: imitate reference solutions, with the router cold-start phases.

The seeds warm the router and the experts up on supervised data before joint and RL training: a
router that starts with no knowledge sends tokens at random and training oscillates. Each phase
names which parameter groups train (:func:`codemoe.core.moe.set_trainable`: ``router``,
``experts``, ``moe``, ``all``, ...) and for how many optimizer steps.

The loss is the token mean of the cross-entropy over the completion tokens only (the prompt is
context, not a target), plus ``balance_coef`` times the MoE balance loss.

Agent trajectories (the sandbox's JSONL episodes) are rendered with the tokenizer's chat template
(:class:`codemoe.core.chat.ChatFormat`), as the RL trainer and agent evaluation render an episode.
With ``trajectory_examples: episode`` (the default) an episode is one example: the prompt is the
system and task turns, the completion everything after, and the loss covers every action's tokens
and its end-of-turn token, never an observation's (the mask RL trains on); one forward learns every
turn of the episode. ``turn`` makes one example per action with the conversation before it as the
prompt (each action's context re-encoded: several times the compute for the same targets).

Each step reports ``loss``, ``token_acc``, ``grad_norm``, ``balance_loss``, the phase's ``lr``,
``tokens`` (completion tokens of the global batch), ``tokens_per_s`` and ``step_seconds``, and the
routing metrics the RL trainer reports (``moe/...`` and ``expert_load/<layer>/<expert>``). Reading
the routing closes each step's routing statistics, so a ``sigmoid_bias`` router's bias follows the
loads step by step during SFT as it does in RL.

Under ``torchrun`` (``env`` from :func:`codemoe.rl.distributed.init_distributed`) the model is
sharded with FSDP2 per transformer block, every rank draws the same global batch and trains on its
share of it (``batch[rank::world]``), and the token mean is taken over the whole global batch
(numerators and token counts summed over ranks), so 2 ranks take the steps 1 rank takes. With
``parallel.ep > 1`` each MoE layer's experts are split over the mesh's ``ep`` groups as well
(:func:`codemoe.rl.distributed.shard_model`); the ranks split each batch the same way.
"""

from __future__ import annotations

import itertools
import json
import logging
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from codemoe.core.devices import check_device, resolve_device
from codemoe.rl.distributed import (
    Dist,
    ParallelConfig,
    check_precision,
    clip_grad_norm,
    compute_precision,
    device_mesh,
    shard_model,
)
from codemoe.rl.logprobs import token_stats
from codemoe.rl.moe_terms import balance_loss, enable_router_outputs, expert_load

__all__ = [
    "Example",
    "PhaseConfig",
    "SFTConfig",
    "SFTTrainer",
    "copy_drill",
    "encode_examples",
    "episode_examples",
    "read_episodes",
    "trajectory_pairs",
]

log = logging.getLogger("codemoe.rl")


@dataclass
class PhaseConfig:
    """One warm-up phase."""

    phase: str = "all"  # parameter groups that train: router, experts, moe, frozen_router, dense, all
    steps: int = 10  # optimizer steps in this phase
    lr: float = 1e-3  # learning rate of the phase (a fresh AdamW per phase: frozen groups keep no state)
    # what the phase trains on: 'examples' (the SFT data) or 'copy' (copy drills cut from it, see copy_drill)
    data: str = "examples"
    batch_size: int = 0  # examples per step in this phase; 0: the config's batch_size
    copy_context: int = 160  # copy drills: tokens of an example shown before the span to continue
    # copy drills: spans asked for after one window (each after its own separator and cue); more
    # spans train the search for a cue more times per window of tokens the model reads
    copy_spans: int = 1
    micro_batch_size: int = 0  # rows per forward in this phase (see SFTConfig.micro_batch_size); 0: the config's

    def __post_init__(self) -> None:
        if self.data not in ("examples", "copy"):
            raise ValueError(f"SFT phase {self.phase!r}: data must be 'examples' or 'copy', got {self.data!r}")
        if self.batch_size < 0 or self.copy_context < 16:
            raise ValueError(f"SFT phase {self.phase!r}: batch_size must be >= 0 and copy_context >= 16, "
                             f"got {self.batch_size} and {self.copy_context}")
        if self.micro_batch_size < 0:
            raise ValueError(f"SFT phase {self.phase!r}: micro_batch_size must be >= 0 (0: the config's), "
                             f"got {self.micro_batch_size}")
        if self.copy_spans < 1:
            raise ValueError(f"SFT phase {self.phase!r}: copy_spans must be >= 1, got {self.copy_spans}")


def copy_drill(example: Example, rng: random.Random, context: int, sep_id: int, spans: int = 1) -> Example | None:
    """A copy drill cut from ``example``'s tokens: a window of ``context`` of them, ``sep_id``, the first
    two tokens of a span of the window (the cue, a bigram that occurs once in the window) and the rest
    of that span (4 to 16 tokens in all) as the completion.

    Nothing but the window tells what follows the cue: the drill is won by finding the cue earlier
    and copying what came after it, the skill an agent needs to write a path, a name or a line it
    has only seen in its context (a policy that lacks it invents them). A short, dense task: a small
    policy learns it in a few hundred steps where whole episodes teach it slowly
    (``docs/performance.md``, "Agents on generated repositories"). None when the example is too
    short or its window has no bigram that occurs once.

    ``spans`` > 1 asks for more spans of the same window, each after its own ``sep_id`` and cue (the
    loss on the copied tokens only: ``loss_mask`` is 0 on the separators and cues, which nothing
    predicts). The window is read once for all of them, so a step of them trains the search for a
    cue ``spans`` times per window (measured: held-out copy accuracy per second of training 1.5-2x
    higher with 8 spans). ``spans=1`` draws the same drill as before the option existed.
    """
    ids = list(example.prompt_ids) + list(example.completion_ids)
    if len(ids) < 24:
        return None
    width = min(context, len(ids))
    start = rng.randrange(len(ids) - width + 1)
    window = ids[start:start + width]
    counts: dict[tuple[int, int], int] = {}
    for a, b in itertools.pairwise(window):
        counts[(a, b)] = counts.get((a, b), 0) + 1
    asked: list[list[int]] = []
    for _ in range(spans):
        length = rng.randint(4, min(16, width - 1))
        starts = [i for i in range(width - length + 1) if counts[(window[i], window[i + 1])] == 1]
        if not starts:
            return None
        at = rng.choice(starts)
        asked.append(window[at:at + length])
    completion, mask = list(asked[0][2:]), [1] * (len(asked[0]) - 2)
    for span in asked[1:]:
        completion += [sep_id, *span]
        mask += [0, 0, 0] + [1] * (len(span) - 2)
    return Example([*window, sep_id, *asked[0][:2]], completion, mask if spans > 1 else None)


@dataclass
class SFTConfig:
    """Hyper-parameters of the supervised warm-up."""

    phases: list[PhaseConfig] = field(
        default_factory=lambda: [
            PhaseConfig("router", 10, 3e-3),
            PhaseConfig("experts", 10, 1e-3),
            PhaseConfig("all", 40, 1e-3),
        ]
    )
    batch_size: int = 16  # examples per optimizer step
    max_tokens: int = 256  # longest completion kept (tokens past it are cut)
    balance_coef: float = 0.01  # weight of the MoE balance loss during SFT (the pre-training default)
    grad_clip: float = 1.0  # max grad norm; 0 turns clipping off
    seed: int = 0  # example order
    precision: str = "fp32"  # fp32 | bf16 (bf16 compute; fp32 master weights, optimizer state, reductions)
    activation_checkpointing: bool = False  # recompute each block's activations in backward (less memory)
    # rows of a rank's batch per forward and backward, the batch sorted by length first so that rows
    # of like length share their padding (gradients accumulate: one optimizer step a batch, the same
    # token-mean loss); 0: the whole batch in one forward
    micro_batch_size: int = 0
    parallel: ParallelConfig = field(default_factory=ParallelConfig)  # dp x ep mesh under torchrun (expert parallelism)
    # where the model and every batch tensor live: auto | cpu | cuda | cuda:N (auto: the local
    # rank's GPU when CUDA is available, else the CPU)
    device: str = "auto"

    def __post_init__(self) -> None:
        check_precision(self.precision)
        check_device(self.device)
        if self.micro_batch_size < 0:
            raise ValueError(f"SFT micro_batch_size must be >= 0 (0: the whole batch in one forward), got {self.micro_batch_size}")


@dataclass
class Example:
    """One tokenised example: a prompt and the completion to imitate (end-of-sequence included)."""

    prompt_ids: list[int]
    completion_ids: list[int]
    # 1 on the completion tokens the loss covers; None: all of them (an episode's observations are 0)
    loss_mask: list[int] | None = None


def encode_examples(tokenizer: Any, pairs: Sequence[tuple[str, str]], max_tokens: int) -> list[Example]:
    """``(prompt, completion)`` texts -> examples; prompts are encoded the way the engine encodes them."""
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    return [
        Example(list(tokenizer.encode(prompt)), (list(tokenizer.encode(completion)) + eos)[:max_tokens])
        for prompt, completion in pairs
    ]


def trajectory_pairs(
    tokenizer: Any, records: Iterable[dict[str, Any]], resolved_only: bool = True
) -> list[tuple[str, str]]:
    """Imitation of agent trajectories (the sandbox's JSONL episodes): one ``(prompt, completion)``
    pair per assistant turn, the prompt being the conversation before it in the tokenizer's chat
    template with the assistant turn opened. With ``resolved_only``, episodes that did not solve
    their task are skipped (imitating failures teaches failing)."""
    pairs = []
    for record in records:
        if resolved_only and not record.get("resolved", False):
            continue
        messages = record["messages"]
        for i, message in enumerate(messages):
            if message["role"] == "assistant":
                prompt = tokenizer.apply_chat_template(messages[:i], tokenize=False, add_generation_prompt=True)
                pairs.append((prompt, message["content"]))
    return pairs


def read_episodes(path: str | Path) -> list[dict[str, Any]]:
    """The agent episodes of a JSONL file, one per line (blank lines skipped); a missing file or a line
    that is not JSON is a ValueError naming the file and the line."""
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"no file {file} (a JSONL of agent episodes, one per line)")
    records = []
    for number, line in enumerate(file.read_text(encoding="utf-8").split("\n"), 1):  # "\n" only: U+2028 is text
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{file}:{number}: not a JSON line ({exc})") from None
    return records


def episode_examples(
    tokenizer: Any, records: Iterable[dict[str, Any]], max_tokens: int, resolved_only: bool = True
) -> list[Example]:
    """One example per agent episode (see the module docstring): the system and task turns as the
    prompt, the rest of the conversation as the completion, the loss on the actions only. The
    tokens are those the RL trainer's history holds for the same conversation: each action's text
    and the end-of-sequence token, then the observation turn :class:`~codemoe.core.chat.ChatFormat`
    renders. ``max_tokens`` caps the completion (a long episode's last turns are cut)."""
    from codemoe.core.chat import ChatFormat

    chat = ChatFormat(tokenizer)
    eos = tokenizer.eos_token_id
    examples = []
    for record in records:
        if resolved_only and not record.get("resolved", False):
            continue
        messages = record["messages"]
        first = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), None)
        if first is None:
            continue
        prompt = list(tokenizer.encode(chat.prompt(messages[:first])))
        ids: list[int] = []
        mask: list[int] = []
        last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
        for i in range(first, last + 1):
            message = messages[i]
            if message["role"] == "assistant":
                action = list(tokenizer.encode(message["content"])) + ([eos] if eos is not None else [])
                ids += action
                mask += [1] * len(action)
            else:
                turn = chat.observation(message["content"], action_token_ids=ids)
                text = list(tokenizer.encode(turn.text)) + list(tokenizer.encode(turn.tail))
                ids += text
                mask += [0] * len(text)
        examples.append(Example(prompt, ids[:max_tokens], mask[:max_tokens]))
    return examples


class SFTTrainer:
    """Runs the configured phases over ``examples``; ``on_step(step, metrics)`` sees every step."""

    def __init__(
        self,
        config: SFTConfig,
        model: torch.nn.Module,
        examples: Sequence[Example],
        *,
        pad_id: int,
        set_trainable: Callable[[torch.nn.Module, str], Any],
        on_step: Callable[[int, dict[str, float]], None] | None = None,
        env: Dist | None = None,
        copy_sep_id: int | None = None,
    ) -> None:
        if not examples:
            raise ValueError("SFT got no examples: check the suite, its split and max_tasks")
        if any(phase.data == "copy" for phase in config.phases):
            if copy_sep_id is None:
                raise ValueError("SFT: a phase with data: copy needs copy_sep_id (the tokenizer's end-of-sequence id)")
            if not any(len(e.prompt_ids) + len(e.completion_ids) >= 24 for e in examples):
                raise ValueError("SFT: a phase with data: copy needs examples of 24 tokens or more to cut drills from")
        self.copy_sep_id = copy_sep_id
        self.env = env or Dist()
        for size in (config.batch_size, *(phase.batch_size for phase in config.phases if phase.batch_size)):
            if size % self.env.world:
                raise ValueError(f"SFT batch_size={size} must split evenly over {self.env.world} ranks")
        self.config, self.model, self.examples = config, model, list(examples)
        self.pad_id, self.set_trainable, self.on_step = pad_id, set_trainable, on_step
        self.rng = random.Random(config.seed)
        self.order: list[int] = []
        self.device = resolve_device(config.device)
        model.to(self.device)  # before sharding, which keeps to the parameters' device
        if config.balance_coef > 0:
            enable_router_outputs(model)
        # in place; in one process only the checkpointing applies
        mesh = device_mesh(config.parallel, self.env, model)
        shard_model(
            model, self.env, precision=config.precision, checkpointing=config.activation_checkpointing, mesh=mesh
        )

    def fit(self) -> dict[str, Any]:
        """Train every phase in order; returns the first and last loss and the steps per phase."""
        self.model.train()
        step, losses = 0, []
        for phase in self.config.phases:
            counts = self.set_trainable(self.model, phase.phase)
            params = [p for p in self.model.parameters() if p.requires_grad]
            if not params:  # e.g. the router phases of a dense policy, or of one without codemoe blocks
                log.warning("SFT phase %s trains nothing in this model (no parameters of its groups); skipped",
                            phase.phase)
                continue
            frozen = []
            if self.env.enabled and self.config.precision != "fp32":
                # FSDP2's mixed-precision gradients fail for a parameter whose requires_grad changed
                # after the first backward ("a gradient with dtype BFloat16 to a tensor with
                # grad_dtype Float"): every parameter keeps requiring gradients, and those of the
                # groups this phase freezes are dropped before each update
                frozen = [p for p in self.model.parameters() if not p.requires_grad]
                for p in frozen:
                    p.requires_grad_(True)
            optimizer = torch.optim.AdamW(params, lr=phase.lr, weight_decay=0.0)
            log.info("SFT phase %s: %d trainable parameters, %d steps", phase.phase, counts["trainable"], phase.steps)
            micro = phase.micro_batch_size or self.config.micro_batch_size
            for _ in range(phase.steps):
                step += 1
                started = time.perf_counter()
                metrics = self._step(optimizer, params, frozen, self._batch(phase), micro)
                elapsed = time.perf_counter() - started
                metrics.update(
                    lr=optimizer.param_groups[0]["lr"],
                    step_seconds=elapsed,
                    tokens_per_s=metrics["tokens"] / max(elapsed, 1e-9),  # completion tokens of the global batch
                    phase_trainable=float(counts["trainable"]),
                )
                losses.append(metrics["loss"])
                if self.on_step is not None:
                    self.on_step(step, {**metrics, "phase": phase.phase})
        self.set_trainable(self.model, "all")
        self.model.eval()
        return {"steps": step, "loss_first": losses[0] if losses else None, "loss_last": losses[-1] if losses else None}

    def _batch(self, phase: PhaseConfig) -> list[Example]:
        """The phase's global batch (the same on every rank: one seeded generator)."""
        size = phase.batch_size or self.config.batch_size
        out: list[Example] = []
        misses = 0
        while len(out) < size:
            if not self.order:
                self.order = list(range(len(self.examples)))
                self.rng.shuffle(self.order)
            example = self.examples[self.order.pop()]
            if phase.data == "copy":
                drill = copy_drill(example, self.rng, phase.copy_context, self.copy_sep_id, phase.copy_spans)
                if drill is None:
                    misses += 1
                    if misses > 100 * size:  # examples too short or too repetitive to cut a drill from
                        raise ValueError(f"SFT phase {phase.phase!r} (data: copy): {misses} examples in a row gave "
                                         "no copy drill (none of 24 tokens or more with a bigram that occurs once)")
                    continue
                example = drill
            out.append(example)
        return out

    def _step(
        self, optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter], frozen: list[torch.nn.Parameter],
        global_batch: list[Example], size: int = 0,
    ) -> dict[str, float]:
        """One optimizer step on the global batch, in forwards of ``size`` rows of a rank's share (0: one)."""
        env = self.env
        batch = global_batch[env.rank :: env.world]  # every rank draws the global batch, trains on its share
        groups = [batch]
        if 0 < size < len(batch):  # every rank has as many rows, so as many forwards (FSDP2's collectives pair)
            batch = sorted(batch, key=lambda e: len(e.prompt_ids) + len(e.completion_ids))
            groups = [batch[i:i + size] for i in range(0, len(batch), size)]
        parts = [(rows, *self._tensors(rows)) for rows in groups]
        tokens = env.all_sum(sum(mask.sum() for _, _, mask in parts))
        optimizer.zero_grad(set_to_none=True)
        nll_total, hits, balance_total = torch.zeros((), device=self.device), torch.zeros((), device=self.device), None
        for rows, completions, mask in parts:
            with compute_precision(self.config.precision, env, self.model):
                stats = token_stats(self.model, [e.prompt_ids for e in rows], completions, pad_id=self.pad_id)
                balance = balance_loss(self.model, stats.outputs)
            # token mean over the global batch; FSDP averages gradients over ranks, hence the world size
            nll_sum = -(stats.logp * mask).sum()
            loss = nll_sum / tokens * env.world
            if balance is not None:  # each forward's balance loss, weighted by its share of the rows
                balance = balance * (len(rows) / len(batch))
                balance_total = balance.detach() if balance_total is None else balance_total + balance.detach()
                if self.config.balance_coef > 0:
                    loss = loss + self.config.balance_coef * balance
            loss.backward()
            nll_total = nll_total + nll_sum.detach()
            hits = hits + ((stats.logp.detach() > -0.6931) * mask).sum()  # p(token) > 1/2
        for p in frozen:
            p.grad = None
        max_norm = self.config.grad_clip if self.config.grad_clip > 0 else float("inf")
        grad_norm = clip_grad_norm(params, max_norm)
        optimizer.step()
        hits = env.all_sum(hits)
        balance_mean = env.all_sum(balance_total) / env.world if balance_total is not None else None
        return {
            "loss": float(env.all_sum(nll_total) / tokens),
            "balance_loss": float(balance_mean) if balance_mean is not None else 0.0,
            "grad_norm": grad_norm,
            "token_acc": float(hits / tokens),
            "tokens": float(tokens),
            # routing of the step's forward over every rank's tokens, as the RL trainer logs it
            **expert_load(self.model, self._all_sum_on_device if env.enabled else None),
        }

    def _tensors(self, rows: list[Example]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(completions [B, T] right-padded, loss mask [B, T])`` of ``rows``, on the device."""
        width = max(len(e.completion_ids) for e in rows)
        completions = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        for i, example in enumerate(rows):
            completions[i, : len(example.completion_ids)] = torch.tensor(example.completion_ids)
        lengths = torch.tensor([len(e.completion_ids) for e in rows])
        completions = completions.to(self.device)  # one copy of the batch, built on the host
        mask = (torch.arange(width, device=self.device) < lengths.to(self.device).unsqueeze(-1)).float()  # [B, T]
        if any(e.loss_mask is not None for e in rows):
            chosen = torch.zeros(len(rows), width)
            for i, example in enumerate(rows):
                chosen[i, : len(example.completion_ids)] = torch.tensor(
                    example.loss_mask if example.loss_mask is not None else [1] * len(example.completion_ids),
                    dtype=torch.float)
            mask = mask * chosen.to(self.device)
        return completions, mask

    def _all_sum_on_device(self, value: torch.Tensor) -> torch.Tensor:
        """``env.all_sum`` of a host tensor through the model's device (NCCL reduces GPU tensors only)."""
        return self.env.all_sum(value.to(self.device)).to(value.device)
