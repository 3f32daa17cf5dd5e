"""The RL trainer, readable top to bottom.

One step::

    prompts -> engine (G samples each) -> scorer (sandbox + reward recipe) -> dynamic sampling
            -> trainer log-probs (old policy, reference, critic) -> IS weights -> advantages
            -> minibatch updates over epochs (policy loss + KL + MoE balance; critic loss)
            -> weight sync to the engine -> metrics -> health checks -> checkpoint

With an ``environment`` the rollouts are multi-step agent episodes instead of single completions
(:mod:`codemoe.rl.episodes`): the engine acts up to ``max_turns`` times per episode, the
environment's observations join the history (never trained on), and step and outcome rewards are
placed on the actions' tokens for the estimators to spread back.

Asynchronous RL (``max_staleness: K``): a producer thread (:mod:`codemoe.rl.async_rollout`) runs
step 1 for the next batches, up to K versions ahead, while the trainer runs steps 2-7 on the current
one; each batch carries the policy version that sampled it, and the trainer's weight sync reaches
the engine between the producer's batches. ``max_staleness: null`` is the synchronous loop above.

Data parallelism: every rank samples its own share of the step's prompts (whole groups, so group
advantages stay local) and FSDP2 averages gradients. Each loss is ``sum of numerators / sum of
denominators`` over ranks, so one rank and many give the same update. Expert parallelism
(``parallel.ep > 1``) splits each MoE layer's experts over the mesh's ``ep`` groups of the policy,
reference and critic alike (:func:`codemoe.rl.distributed.shard_model`); the data split is the same.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from codemoe.core.contracts import SamplingParams
from codemoe.core.devices import check_device, resolve_device
from codemoe.core.errors import ConfigError
from codemoe.rl.advantages import AdvantageInput, AdvantageOutput
from codemoe.rl.algorithm import Algorithm, value_loss
from codemoe.rl.async_rollout import RolloutProducer, check_async_config, check_async_options, staleness_metrics
from codemoe.rl.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from codemoe.rl.critic import Critic
from codemoe.rl.diagnostics import HealthConfig, HealthMonitor, update_cv
from codemoe.rl.distributed import (
    Dist,
    ParallelConfig,
    check_precision,
    clip_grad_norm,
    compute_precision,
    device_mesh,
    shard_model,
)
from codemoe.rl.episodes import Environment, run_episodes
from codemoe.rl.importance import ISStats, mismatch_stats
from codemoe.rl.logprobs import token_stats, used_width
from codemoe.rl.moe_terms import balance_loss, enable_router_outputs, expert_load
from codemoe.rl.rollout import Rollouts, Score, build_rollouts

__all__ = ["LR_SCHEDULES", "RLConfig", "RLTrainer", "Scorer", "lr_at"]

log = logging.getLogger("codemoe.rl")

# A scorer rewards samples: ``scorer(tasks, outputs) -> scores``, one task and one engine output per
# prompt, one Score per sample in output order.
Scorer = Callable[[Sequence[Any], Sequence[Any]], list[Score]]


LR_SCHEDULES = ("constant", "cosine", "linear")


def lr_at(step: int, steps: int, lr: float, schedule: str = "constant", warmup: int = 0, min_ratio: float = 0.0) -> float:
    """The learning rate of optimizer-step round ``step`` (1-based) of ``steps``: a linear rise over the
    first ``warmup`` steps (lr * step / warmup), then ``schedule`` from ``lr`` at the first step after
    the warm-up to ``lr * min_ratio`` at the last (constant: ``lr`` throughout)."""
    if warmup and step <= warmup:
        return lr * step / warmup
    if schedule == "constant" or steps <= warmup + 1:
        return lr
    done = (step - warmup - 1) / (steps - warmup - 1)  # 0 at the first step after the warm-up, 1 at the last
    shape = 0.5 * (1 + math.cos(math.pi * done)) if schedule == "cosine" else 1 - done
    return lr * (min_ratio + (1 - min_ratio) * shape)


@dataclass
class RLConfig:
    """Hyper-parameters of the RL loop (the algorithm's own live in its preset)."""

    steps: int = 20  # optimizer-step rounds (each: one rollout batch, epochs x minibatches updates)
    prompts_per_step: int = 8  # prompts per step over all ranks; each gets algo.group_size samples
    lr: float = 1e-5  # policy learning rate (AdamW)
    # the policy's learning rate over the steps: constant, or after lr_warmup_steps of a linear rise a
    # cosine or linear fall from lr to lr * lr_min_ratio at the last step (lr_at)
    lr_schedule: str = "constant"  # constant | cosine | linear
    lr_warmup_steps: int = 0
    lr_min_ratio: float = 0.0
    weight_decay: float = 0.0
    grad_clip: float = 1.0  # max global grad norm; 0 turns clipping off
    temperature: float = 1.0  # sampling temperature; log-probs use the same one
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 64  # sampling budget, also the padded horizon T of every batch
    stop: list[str] = field(default_factory=list)  # stop strings: the completion text ends before them
    checkpoint_every: int = 10  # steps between checkpoints (0: none before the last); the last step is always saved
    keep_checkpoints: int = 2  # newest checkpoints kept on disk
    seed: int = 0  # data order and sampling seeds derive from it
    max_turns: int = 1  # actions per episode when the trainer has an environment (multi-step agents)
    max_observation_tokens: int = 128  # an observation's tokens kept in the history (its head)
    max_live_episodes: int = 256  # agent episodes running at once (a finished one frees its slot for the next task)
    share_prompt_forward: bool = True  # training forwards run each group's prompt once (same log-probs and gradients)
    # rows per training forward (0: a minibatch's rows in one forward): the rows are sorted by length
    # and run in forwards of this many, gradients accumulated into the minibatch's one optimizer step
    # with the same loss (agent episodes of very different lengths pad far less)
    micro_batch_size: int = 0
    precision: str = "fp32"  # fp32 | bf16 (bf16 compute; fp32 master weights, optimizer state, reductions)
    activation_checkpointing: bool = False  # recompute each policy block's activations in backward (less memory)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)  # dp x ep mesh under torchrun (expert parallelism)
    health: HealthConfig = field(default_factory=HealthConfig)
    # Asynchronous rollouts (codemoe.rl.async_rollout): null runs the synchronous loop; K >= 0 lets a
    # producer thread generate and score batches while the trainer learns, sampled by weights at
    # most K optimizer-step rounds old (0: the synchronous schedule, step for step)
    max_staleness: int | None = None
    stale_groups: str = "wait"  # wait: the producer never makes data older than K | drop | keep: it runs free
    in_flight: str = "finish"  # a batch in flight at a weight sync: finish (on the old weights) | abort (made again)
    # where the policy, reference, critic and every batch tensor live: auto | cpu | cuda | cuda:N
    # (auto: the local rank's GPU when CUDA is available, else the CPU)
    device: str = "auto"

    def __post_init__(self) -> None:
        finite = math.isfinite
        for key, ok, rule in (
            ("steps", self.steps >= 0, "must be >= 0"),
            ("prompts_per_step", self.prompts_per_step >= 1, "must be at least 1"),
            ("lr", finite(self.lr) and self.lr > 0, "must be a finite number > 0"),
            ("lr_schedule", self.lr_schedule in LR_SCHEDULES, f"must be one of {', '.join(LR_SCHEDULES)}"),
            ("lr_warmup_steps", self.lr_warmup_steps >= 0, "must be >= 0"),
            ("lr_min_ratio", finite(self.lr_min_ratio) and 0 <= self.lr_min_ratio <= 1, "must be a number in [0, 1]"),
            ("weight_decay", finite(self.weight_decay) and self.weight_decay >= 0, "must be a finite number >= 0"),
            ("grad_clip", finite(self.grad_clip) and self.grad_clip >= 0, "must be a finite number >= 0 (0: no clipping)"),
            ("temperature", finite(self.temperature) and self.temperature >= 0, "must be a finite number >= 0 (0: greedy)"),
            ("top_p", 0 < self.top_p <= 1, "must be in (0, 1]"),
            ("top_k", self.top_k >= 0, "must be >= 0 (0 keeps every token)"),
            ("max_new_tokens", self.max_new_tokens >= 1, "must be at least 1"),
            ("keep_checkpoints", self.keep_checkpoints >= 1, "must be at least 1 (a resumed run starts from the newest)"),
            ("max_turns", self.max_turns >= 1, "must be at least 1 (actions per episode)"),
            ("max_observation_tokens", self.max_observation_tokens >= 0, "must be >= 0"),
            ("max_live_episodes", self.max_live_episodes >= 1, "must be at least 1"),
        ):
            if not ok:
                raise ConfigError(f"{key}: {getattr(self, key)!r} {rule}")
        if self.micro_batch_size < 0:
            raise ConfigError(f"micro_batch_size: {self.micro_batch_size} is negative; give 0 (one forward) or more rows")
        if self.checkpoint_every < 0:
            raise ConfigError(f"checkpoint_every: {self.checkpoint_every} is negative; give the steps between "
                              "checkpoints, or 0 to save the last step only")
        check_precision(self.precision)
        check_device(self.device)
        check_async_options(self)


@dataclass
class _TokenData:
    """Trainer-side per-token numbers of one step's rollouts, all ``[B, T]``."""

    old_logp: torch.Tensor | None  # None: taken from the (single) update forward
    ref_logp: torch.Tensor | None
    values: torch.Tensor | None
    keep: torch.Tensor  # [B] bool: the row counts in the loss (dynamic sampling may drop groups)


class RLTrainer:
    """Trains ``policy`` with ``algorithm`` on ``tasks``; see the module docstring for one step."""

    def __init__(
        self,
        config: RLConfig,
        algorithm: Algorithm,
        policy: torch.nn.Module,
        engine: Any,
        scorer: Scorer,
        tasks: Sequence[Any],
        *,
        pad_id: int,
        checkpoint_dir: Path,
        env: Dist | None = None,
        on_step: Callable[[int, dict[str, float]], None] | None = None,
        on_rollouts: Callable[[int, Rollouts], None] | None = None,
        export_policy: Callable[[Path], Any] | None = None,
        environment: Callable[[], Environment] | None = None,
    ) -> None:
        self.config, self.algo, self.engine, self.scorer = config, algorithm, engine, scorer
        self.environment = environment  # makes one episode's environment; None: single completions
        self.tasks, self.pad_id, self.checkpoint_dir = list(tasks), pad_id, Path(checkpoint_dir)
        self.env = env or Dist()
        self.on_step, self.on_rollouts = on_step, on_rollouts
        self.export_policy = export_policy  # writes the policy into a checkpoint (step-N/policy) when set
        self._check_sizes()
        self.device = resolve_device(config.device)
        policy.to(self.device)  # before the copies and the sharding, which keep to the parameters' device
        if algorithm.config.balance_coef > 0:
            enable_router_outputs(policy)
        self.mesh = device_mesh(config.parallel, self.env, policy)  # None without expert parallelism
        # The reference and the critic start from the policy's initial weights, before sharding.
        self.reference = self._frozen_copy(policy) if algorithm.uses_reference else None
        self.critic = None
        if algorithm.config.critic is not None:
            critic = Critic(policy, policy.config.hidden_size).to(self.device)
            self.critic = shard_model(
                critic,
                self.env,
                precision=config.precision,
                checkpointing=config.activation_checkpointing,
                mesh=self.mesh,
            )
            self.critic_optimizer = torch.optim.AdamW(self.critic.parameters(), lr=algorithm.config.critic.lr)
        self.policy = shard_model(
            policy, self.env, precision=config.precision, checkpointing=config.activation_checkpointing, mesh=self.mesh
        )
        self.optimizer = torch.optim.AdamW(policy.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        self.monitor = HealthMonitor(config.health)
        self.step, self.cursor = 0, 0
        self._trained_cursor = 0  # the data stream's position after the last batch trained on (checkpointed)
        self._producer: RolloutProducer | None = None
        self._after_request: Callable[[], None] | None = None  # the producer's abort check, after each engine call
        self._gather_counts: Callable[[Dist, int], list[int]] | None = None  # ... or its refill all-gather (torchrun)
        self._clock = threading.local()  # this thread's rollout seconds (generate, score), see _timed
        check_async_config(config, world=self.env.world, engine=engine, policy=self.policy)

    # ------------------------------------------------------------------------------------------
    # the loop
    # ------------------------------------------------------------------------------------------

    def fit(self) -> dict[str, Any]:
        """Train ``config.steps`` steps, resuming from the newest checkpoint if there is one."""
        self._resume()
        self._sync_engine()
        if self.config.max_staleness is not None:
            self._producer = RolloutProducer(self, first=self.step + 1, last=self.config.steps, version=self.step)
            self._producer.start()
        last: dict[str, float] = {}
        try:
            for step in range(self.step + 1, self.config.steps + 1):
                last = self.train_step(step)
                every = self.config.checkpoint_every
                if (every and step % every == 0) or step == self.config.steps:
                    self._save()
        finally:
            if self._producer is not None:  # what it buffered or had in flight is not trained on
                self._producer.stop()
                self._producer = None
        return {"steps": self.step, "last": last, "warnings": [w.message for w in self.monitor.warnings]}

    def train_step(self, step: int) -> dict[str, float]:
        """One rollout batch and its updates; returns the step's metrics."""
        started, cpu_started = time.perf_counter(), time.process_time()
        self._clock.seconds = {"generate_seconds": 0.0, "score_seconds": 0.0}
        rollouts, rounds, extra = self._next_batch(step)  # 1. prompts -> engine -> scorer (+ dynamic sampling)
        if self._producer is None:  # the producer's batches were timed in its own thread (producer_seconds)
            extra.update(self._clock.seconds)
        if self.on_rollouts is not None:
            self.on_rollouts(step, rollouts)
        generated = time.perf_counter()
        cfg = self.config
        lr = lr_at(step, cfg.steps, cfg.lr, cfg.lr_schedule, cfg.lr_warmup_steps, cfg.lr_min_ratio)
        if cfg.lr_schedule != "constant" or cfg.lr_warmup_steps:  # a function of the step: a resumed run agrees
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        extra["lr"] = lr
        data, adv, update = self._learn(rollouts)  # 2-4. log-probs, advantages, updates
        trained = time.perf_counter()
        if self._producer is None:
            self._sync_engine()  # 5. the engine samples from the new weights next step
        else:  # 5. ... between the producer's batches
            extra["sync_wait_seconds"] = self._producer.publish(step)
        synced = time.perf_counter()
        self.step, elapsed, cpu = step, time.perf_counter() - started, time.process_time() - cpu_started
        metrics = self._metrics(rollouts, data, adv, update, rounds)  # 6. metrics
        metrics.update(extra)
        metrics.update(
            gen_seconds=generated - started,
            train_seconds=trained - generated,  # trainer-side log-probs, advantages and the updates
            sync_seconds=synced - trained,
            step_seconds=elapsed,
            cpu_seconds=cpu,  # this process's CPU time over the step, every thread (a producer's too)
            tokens_per_s=metrics["tokens"] / max(elapsed, 1e-9),
        )
        window = [*self.monitor.history[-(self.monitor.config.window - 1) :], metrics]
        metrics["grad_norm_cv"] = update_cv(window)  # R6: the variance of the updates, over the recent window
        self.monitor.observe(step, metrics)  # 7. health checks with remedies
        if self.on_step is not None:
            self.on_step(step, metrics)
        return metrics

    def learn(self, rollouts: Rollouts) -> dict[str, float]:
        """The updates of one step on given ``rollouts`` (this rank's), and their metrics: what
        :meth:`train_step` does once the rollouts are in, without an engine call or a weight sync
        (offline batches, benchmarks of the update alone)."""
        return self._metrics(rollouts, *self._learn(rollouts), rounds=0)

    def _learn(self, rollouts: Rollouts) -> tuple[_TokenData, AdvantageOutput, dict[str, Any]]:
        data = self._token_data(rollouts)  # 2. old / reference log-probs, critic values
        adv = self._advantages(rollouts, data)  # 3. advantages (and value targets)
        return data, adv, self._update(rollouts, data, adv)  # 4. minibatch updates over epochs

    # ------------------------------------------------------------------------------------------
    # 1. rollouts
    # ------------------------------------------------------------------------------------------

    def _take(self, count: int) -> list[Any]:
        """The next ``count`` tasks of the data stream: a fresh seeded permutation every epoch."""
        out = []
        n = len(self.tasks)
        while len(out) < count:
            epoch, offset = divmod(self.cursor, n)
            order = torch.randperm(n, generator=torch.Generator().manual_seed(self.config.seed * 7919 + epoch))
            out.append(self.tasks[int(order[offset])])
            self.cursor += 1
        return out

    def _next_batch(self, step: int) -> tuple[Rollouts, int, dict[str, float]]:
        """This step's rollouts: collected now (synchronous) or taken from the producer's buffer."""
        if self._producer is None:
            rollouts, rounds = self._collect(step)
            self._trained_cursor = self.cursor
            return rollouts, rounds, {}
        batch, dropped, waited = self._producer.take(step)
        self._trained_cursor = batch.cursor
        staleness = step - 1 - batch.version
        extra = staleness_metrics(staleness, dropped)
        extra.update(rollout_wait_seconds=waited, producer_seconds=batch.seconds)
        return batch.rollouts, batch.rounds, extra

    def _rollout(self, tasks: Sequence[Any], seed: int) -> Rollouts:
        started = time.perf_counter()
        params = SamplingParams(
            n=self.algo.config.group_size,
            temperature=self.config.temperature,
            top_p=self.config.top_p,
            top_k=self.config.top_k,
            max_new_tokens=self.config.max_new_tokens,
            stop=list(self.config.stop),
            seed=seed,
        )
        if self.environment is not None:
            rollouts = run_episodes(
                self.engine,
                self.environment,
                tasks,
                params,
                max_turns=self.config.max_turns,
                max_observation_tokens=self.config.max_observation_tokens,
                pad_id=self.pad_id,
                max_live_episodes=self.config.max_live_episodes,
            )
            self._request_done()
            self._timed("generate_seconds", started)  # episodes interleave engine, environment and grading
            return rollouts
        outputs = self.engine.generate([task.prompt for task in tasks], params)
        self._request_done()
        scoring = self._timed("generate_seconds", started)
        scores = self.scorer(tasks, outputs)
        self._timed("score_seconds", scoring)
        return build_rollouts(outputs, scores, self.config.max_new_tokens, self.pad_id)

    def _timed(self, phase: str, since: float) -> float:
        """Add the seconds since ``since`` to this thread's ``phase`` of the step; returns now.

        Per thread: with asynchronous rollouts the producer thread generates while the trainer
        trains, and only the synchronous step reports the split (the producer's is ``producer_seconds``).
        """
        now = time.perf_counter()
        seconds = getattr(self._clock, "seconds", None)
        if seconds is not None:
            seconds[phase] = seconds.get(phase, 0.0) + now - since
        return now

    def _request_done(self) -> None:
        """After an engine call: the producer's chance to abort the batch (``in_flight: abort``)."""
        if self._after_request is not None:
            self._after_request()

    def _collect(self, step: int, env: Dist | None = None) -> tuple[Rollouts, int]:
        """This rank's groups of the step; zero-signal groups refilled from the stream when configured.

        ``env``: where the refills' collective runs (default: the trainer's); an asynchronous producer
        passes its own process group, so its thread never joins the trainer's collectives."""
        env = env or self.env
        world, rank = env.world, env.rank
        mine = self._take(self.config.prompts_per_step)[rank::world]
        with self._generation():
            rollouts = self._rollout(mine, self._seed(step, 0))
        rounds = 0
        while rounds < self.algo.config.dynamic_sampling.refill_rounds:
            bad = rollouts.zero_signal()
            if self._gather_counts is not None:  # a producer's, agreeing on aborts too (RolloutProducer)
                counts = self._gather_counts(env, int(bad.sum()))
            else:
                counts = [int(c) for c in env.all_gather(int(bad.sum()))]
            if sum(counts) == 0:
                break
            rounds += 1
            extra_tasks = self._take(sum(counts))  # every rank advances the stream alike
            with self._generation():  # every rank, also one with nothing to refill
                if counts[rank]:
                    start = sum(counts[:rank])
                    extra = self._rollout(extra_tasks[start : start + counts[rank]], self._seed(step, rounds))
                    good = rollouts.select((~bad).nonzero().flatten())
                    rollouts = Rollouts.concat([good, extra])
        return rollouts.to(self.device), rounds

    def _generation(self) -> contextlib.AbstractContextManager[Any]:
        """The context every rank generates in: the engine's lockstep when it has one (an engine
        running the sharded policy itself gathers each block from all ranks, see
        :meth:`codemoe.serving.embedded.EmbeddedEngine.lockstep`), else nothing."""
        lockstep = getattr(self.engine, "lockstep", None)
        return lockstep() if lockstep is not None else contextlib.nullcontext()

    def _seed(self, step: int, round_: int) -> int:
        """Sampling seed of a step's round; the same on every rank (engines mix in the prompt)."""
        return (self.config.seed * 1_000_003 + step) * 101 + round_

    # ------------------------------------------------------------------------------------------
    # 2-3. trainer-side numbers and advantages
    # ------------------------------------------------------------------------------------------

    @property
    def _single_pass(self) -> bool:
        """One epoch, one minibatch and no KL in the reward: the update forward doubles as 'old'."""
        cfg = self.algo.config
        return cfg.epochs == 1 and cfg.minibatches == 1 and not (self.algo.uses_reference and cfg.kl_in_reward)

    @torch.no_grad()
    def _token_data(self, rollouts: Rollouts) -> _TokenData:
        keep = torch.ones(len(rollouts.prompt_ids), dtype=torch.bool, device=self.device)
        if self.algo.config.dynamic_sampling.drop:
            keep = ~rollouts.zero_signal().repeat_interleave(rollouts.group_size)
        with self._compute():
            old = None if self._single_pass else self._logp(self.policy, rollouts, self._routes(rollouts))
            ref = self._logp(self.reference, rollouts, None) if self.reference is not None else None
            values = None
            if self.critic is not None:
                values = self.critic(rollouts.prompt_ids, rollouts.completions, self.pad_id).float() * rollouts.mask
        return _TokenData(old_logp=old, ref_logp=ref, values=values, keep=keep)

    def _routes(self, rollouts: Rollouts, rows: torch.Tensor | None = None) -> list[torch.Tensor] | None:
        """The engine's routing for the policy's forwards when routing replay is on (and available)."""
        if not self.algo.config.routing_replay or rollouts.routes is None:
            return None
        return rollouts.routes if rows is None else [rollouts.routes[i] for i in rows.tolist()]

    def _logp(self, model: torch.nn.Module, rollouts: Rollouts, routes: list[torch.Tensor] | None) -> torch.Tensor:
        """Log-probs of every row's completion under ``model`` (no gradient), in the update's forwards."""
        out = torch.zeros(rollouts.completions.shape, device=self.device)
        for part in self._micro_batches(rollouts, torch.arange(len(rollouts.prompt_ids))):  # positions = rows
            rows = part.tolist()
            out[part] = token_stats(
                model,
                [rollouts.prompt_ids[i] for i in rows],
                rollouts.completions[part],
                pad_id=self.pad_id,
                temperature=self.config.temperature,
                routes=None if routes is None else [routes[i] for i in rows],
                share_prompts=self._share_prompts(),
                used=used_width(rollouts.mask[part]),  # agent episodes: most rows end well before the horizon
            ).logp.float()
        return out

    def _compute(self) -> Any:
        """The precision context of a forward (bf16 autocast in one process, see ``precision``)."""
        return compute_precision(self.config.precision, self.env, self.policy)

    def _share_prompts(self) -> bool:
        """Whether this forward may share each group's prompt forward.

        Not for a backward under FSDP: a block's post-backward hook (reshard, reduce-scatter) fires
        once the rows' part of its graph is done, before the gradients reaching the shared prompt
        forward through its keys and values, which then finds the block's weights resharded.
        """
        return self.config.share_prompt_forward and not (self.env.enabled and torch.is_grad_enabled())

    def _advantages(self, rollouts: Rollouts, data: _TokenData) -> AdvantageOutput:
        kl = None
        if data.ref_logp is not None and data.old_logp is not None and self.algo.config.kl_in_reward:
            kl = self.algo.kl(data.old_logp, data.ref_logp)
        token_rewards = self.algo.token_rewards(rollouts.rewards, rollouts.mask, kl, rollouts.step_rewards)
        inputs = AdvantageInput(
            token_rewards, rollouts.mask, rollouts.group_size, values=data.values, all_sum=self.env.all_sum
        )
        return self.algo.advantage(inputs)

    # ------------------------------------------------------------------------------------------
    # 4. updates
    # ------------------------------------------------------------------------------------------

    def _update(self, rollouts: Rollouts, data: _TokenData, adv: AdvantageOutput) -> dict[str, float]:
        cfg = self.algo.config
        chunks = torch.arange(rollouts.groups).chunk(cfg.minibatches)
        sums = dict.fromkeys(("loss", "kl", "clipped", "tokens", "entropy", "grad_norm", "balance", "vf_loss"), 0.0)
        sums["updates"] = 0.0
        is_stats = []
        agreement = torch.zeros(2, dtype=torch.long, device=self.device)  # (agreeing, compared) pairs
        for epoch in range(cfg.epochs):
            for groups in chunks:
                rows = rollouts.rows(groups)
                out = self._update_chunk(rollouts, data, adv, rows, agreement=epoch == 0)
                is_stats.append(out.pop("is_stats"))
                agreed = out.pop("agreement")
                if agreed is not None:  # measured in the first pass over every row: the sampling weights
                    agreement += torch.stack(agreed).to(agreement)
                for key, value in out.items():
                    sums[key] += value
                sums["updates"] += 1
        sums["is_stats"] = is_stats[0]  # the first pass sees the weights that sampled: the true mismatch
        sums["agreement"] = agreement if rollouts.routes is not None else None
        return sums

    def _update_chunk(
        self,
        rollouts: Rollouts,
        data: _TokenData,
        adv: AdvantageOutput,
        rows: torch.Tensor,
        *,
        agreement: bool = False,
    ) -> dict[str, Any]:
        cfg = self.algo.config
        full_mask = rollouts.mask[rows] * data.keep[rows].unsqueeze(-1)
        # a loss aggregation's denominator depends on the mask alone (its contract, LossAggregator): the
        # whole chunk's, however many forwards its rows run in, so the forwards' gradients add up to
        # the one-forward gradient
        denominator = self.env.all_sum(self.algo.loss_agg.denominator(full_mask))
        train = float(denominator) > 0  # zero on every rank when dynamic sampling dropped the whole chunk
        if train:
            self.optimizer.zero_grad(set_to_none=True)
        # the chunk's old and engine log-probs and IS weights, filled forward by forward: the mismatch statistics
        old_all, engine_all, weights_all = (torch.zeros(full_mask.shape, device=full_mask.device) for _ in range(3))
        sums = dict.fromkeys(("loss", "kl", "clipped", "tokens", "entropy", "balance"), 0.0)
        agreed = None
        for at in self._micro_batches(rollouts, rows):
            part = rows[at]
            mask = full_mask[at]
            prompts = [rollouts.prompt_ids[i] for i in part.tolist()]
            with self._compute():
                stats = token_stats(
                    self.policy,
                    prompts,
                    rollouts.completions[part],
                    pad_id=self.pad_id,
                    temperature=self.config.temperature,
                    routes=None if rollouts.routes is None else [rollouts.routes[i] for i in part.tolist()],
                    replay=cfg.routing_replay,
                    agreement=agreement and rollouts.routes is not None,  # the first pass only: it is what counts
                    share_prompts=self._share_prompts(),
                    used=used_width(rollouts.mask[part]),
                )
                balance = balance_loss(self.policy, stats.outputs)
            old = stats.logp.detach() if data.old_logp is None else data.old_logp[part]
            engine_logp = rollouts.engine_logp[part]
            engine_logp = torch.where(torch.isnan(engine_logp), old, engine_logp)  # engines without log-probs
            is_weights = self.algo.is_correction(old, engine_logp, rollouts.mask[part])
            ref = data.ref_logp[part] if data.ref_logp is not None else None
            terms = self.algo.loss_terms(stats.logp, old, adv.advantages[part], mask, is_weights, ref)
            # FSDP averages gradients over ranks, so each rank's share is scaled by the world size.
            policy_loss = terms.numerator / denominator.clamp(min=1e-8) * self.env.world
            loss = policy_loss
            if balance is not None:  # each forward's balance loss, weighted by its share of the rows
                balance = balance * (len(part) / len(rows))
                sums["balance"] += float(balance.detach())
                if cfg.balance_coef > 0:
                    loss = loss + cfg.balance_coef * balance
            if train:
                loss.backward()
            old_all[at], engine_all[at], weights_all[at] = old, engine_logp, is_weights
            sums["loss"] += float(self.env.all_sum(policy_loss.detach()) / self.env.world)
            sums["kl"] += terms.kl_sum
            sums["clipped"] += terms.clipped
            sums["tokens"] += terms.tokens
            sums["entropy"] += float((stats.entropy * mask).sum())
            if stats.agreement is not None:
                agreed = stats.agreement if agreed is None else tuple(a + b for a, b in zip(agreed, stats.agreement))
        grad_norm, vf = 0.0, 0.0
        if train:
            grad_norm = self._clip(self.policy)
            self.optimizer.step()
            if self.critic is not None:
                vf = self._critic_step(rollouts, data, adv, rows, full_mask)
        return {
            **sums,
            "grad_norm": grad_norm,
            "vf_loss": vf,
            "is_stats": mismatch_stats(old_all, engine_all, rollouts.mask[rows], self.algo.is_correction.cap, weights_all),
            "agreement": agreed,
        }

    def _micro_batches(self, rollouts: Rollouts, rows: torch.Tensor) -> list[torch.Tensor]:
        """The training forwards of ``rows``, as positions in ``rows``: all in one, or
        (``micro_batch_size: N``) sorted by the length a forward must cover (prompt and used
        completion) and cut into forwards of N, each in ascending order (a group's rows stay
        adjacent for the shared prompt forward)."""
        size = self.config.micro_batch_size
        if not 0 < size < len(rows):
            return [torch.arange(len(rows))]
        covered = rollouts.mask[rows].ne(0).cpu()
        used = torch.where(covered.any(-1), covered.shape[-1] - covered.flip(-1).int().argmax(-1), 0)
        order = torch.argsort(torch.tensor([len(rollouts.prompt_ids[i]) for i in rows.tolist()]) + used, stable=True)
        return [order[i : i + size].sort().values for i in range(0, len(order), size)]

    def _critic_step(
        self, rollouts: Rollouts, data: _TokenData, adv: AdvantageOutput, rows: torch.Tensor, mask: torch.Tensor
    ) -> float:
        cfg = self.algo.config.critic
        prompts = [rollouts.prompt_ids[i] for i in rows.tolist()]
        with self._compute():
            values = self.critic(prompts, rollouts.completions[rows], self.pad_id).float()
        numerator = value_loss(values, data.values[rows], adv.returns[rows], mask, cfg.value_clip)
        # token mean over every rank's tokens of the chunk; FSDP averages over ranks, hence the world size
        loss = cfg.vf_coef * numerator / self.env.all_sum(mask.sum()).clamp(min=1.0) * self.env.world
        self.critic_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self._clip(self.critic)
        self.critic_optimizer.step()
        return float(self.env.all_sum(loss.detach()) / self.env.world)

    def _clip(self, module: torch.nn.Module) -> float:
        max_norm = self.config.grad_clip if self.config.grad_clip > 0 else float("inf")
        return clip_grad_norm(module.parameters(), max_norm)

    # ------------------------------------------------------------------------------------------
    # 5-7. weight sync, metrics, checkpoints
    # ------------------------------------------------------------------------------------------

    def _sync_engine(self, state: dict[str, torch.Tensor] | None = None) -> None:
        """The engine samples from the new weights next step (:func:`codemoe.rl.weight_sync.sync_engine`;
        ``state``: the whole state dict, gathered before)."""
        from codemoe.rl.weight_sync import sync_engine

        sync_engine(self.engine, self.policy, self.env, state)

    def _metrics(
        self, rollouts: Rollouts, data: _TokenData, adv: AdvantageOutput, update: dict[str, Any], rounds: int
    ) -> dict[str, float]:
        env = self.env
        rewards = torch.cat(env.all_gather(rollouts.rewards))
        passed = torch.cat(env.all_gather(rollouts.passed))
        zero = torch.cat(env.all_gather(rollouts.zero_signal()))
        lengths = torch.cat(env.all_gather(rollouts.mask.sum(-1)))
        tokens = max(float(env.all_sum(torch.tensor(update["tokens"], device=self.device))), 1.0)
        n = max(update["updates"], 1.0)
        metrics = {
            "reward_mean": rewards.mean().item(),
            "reward_std": rewards.std().item() if rewards.numel() > 1 else 0.0,
            "pass_rate": passed.float().mean().item(),
            "zero_signal_frac": zero.float().mean().item(),
            "refill_rounds": float(rounds),
            "response_len": lengths.mean().item(),
            "tokens": float(lengths.sum()),
            "loss": update["loss"] / n,
            "entropy": float(env.all_sum(torch.tensor(update["entropy"], device=self.device))) / tokens,
            "clip_frac": float(env.all_sum(torch.tensor(update["clipped"], device=self.device))) / tokens,
            "grad_norm": update["grad_norm"] / n,
            "adv_abs_mean": float(env.all_sum((adv.advantages.abs() * rollouts.mask).sum()))
            / max(float(lengths.sum()), 1.0),
            **_is_metrics(env.all_gather(update["is_stats"])),
            **_agreement_metrics(env, update["agreement"]),
        }
        if self.reference is not None:
            metrics["kl"] = float(env.all_sum(torch.tensor(update["kl"], device=self.device))) / tokens
        if update["balance"]:
            metrics["balance_loss"] = update["balance"] / n
        if self.critic is not None:
            metrics["vf_loss"] = update["vf_loss"] / n
        metrics.update(_component_means(env, rollouts.components))
        metrics.update(expert_load(self.policy, self._all_sum_on_device if env.enabled else None))
        return metrics

    def _all_sum_on_device(self, value: torch.Tensor) -> torch.Tensor:
        """``env.all_sum`` of a host tensor through the trainer's device (NCCL reduces GPU tensors only)."""
        return self.env.all_sum(value.to(self.device)).to(value.device)

    def _modules(self) -> dict[str, tuple[torch.nn.Module, torch.optim.Optimizer]]:
        modules = {"policy": (self.policy, self.optimizer)}
        if self.critic is not None:
            modules["critic"] = (self.critic, self.critic_optimizer)
        return modules

    def _save(self) -> None:
        # the position after the last batch trained on: what the producer had buffered or in flight
        # is made again on resume, never trained on twice
        state = {"cursor": self._trained_cursor, "monitor": self.monitor.state()}
        save_checkpoint(self.checkpoint_dir, self.step, self._modules(), state, self.env, self.config.keep_checkpoints,
                        export=self.export_policy)

    def _resume(self) -> None:
        path = latest_checkpoint(self.checkpoint_dir)
        if path is None:
            return
        state = load_checkpoint(path, self._modules(), self.env)
        self.step, self.cursor = int(state["step"]), int(state["cursor"])
        self._trained_cursor = self.cursor
        self.monitor.load(state["monitor"])
        log.info("resumed RL training from %s (step %d)", path, self.step)

    def _frozen_copy(self, policy: torch.nn.Module) -> torch.nn.Module:
        reference = copy.deepcopy(policy)
        reference.requires_grad_(False)
        reference.eval()
        return shard_model(reference, self.env, precision=self.config.precision, mesh=self.mesh)

    def _check_sizes(self) -> None:
        from codemoe.core.errors import ConfigError

        per_rank, rest = divmod(self.config.prompts_per_step, self.env.world)
        if rest or per_rank % self.algo.config.minibatches:
            raise ConfigError(
                f"prompts_per_step={self.config.prompts_per_step} must split evenly over {self.env.world} rank(s) "
                f"and then into algo.minibatches={self.algo.config.minibatches}"
            )
        if not self.tasks:
            raise ConfigError("the RL stage got no tasks: check the suite and its split")
        if self.config.max_turns > 1 and self.environment is None:
            raise ConfigError(
                f"max_turns={self.config.max_turns} needs an environment for the episodes (multi-step agents); "
                "without one every rollout is a single completion: set max_turns=1"
            )


def _component_means(env: Dist, components: Sequence[dict[str, float]]) -> dict[str, float]:
    """``reward/<component>``: each reward-recipe component's mean over the step's samples of every
    rank (a sample that lacks a component, such as a failed episode's, does not count toward it)."""
    sums: dict[str, list[float]] = {}  # name -> [sum, count]
    for rank_components in env.all_gather(list(components)):
        for sample in rank_components:
            for name, value in sample.items():
                total = sums.setdefault(name, [0.0, 0.0])
                total[0] += float(value)
                total[1] += 1.0
    return {f"reward/{name}": total / count for name, (total, count) in sorted(sums.items())}


def _agreement_metrics(env: Dist, agreement: torch.Tensor | None) -> dict[str, float]:
    """``routing_agreement``: the share of (position, MoE layer) pairs the engine ran at which the
    policy's routers, in the first update pass, pick the engine's experts (with routing replay on:
    how far they drifted; off: how often the trainer computes with other experts). Only when the
    engine reports routing."""
    if agreement is None:
        return {}
    agreed, compared = env.all_sum(agreement).tolist()
    return {"routing_agreement": agreed / compared} if compared else {}


def _is_metrics(per_rank: list[ISStats]) -> dict[str, float]:
    """The engine/trainer mismatch of every rank, combined."""
    n = len(per_rank)
    return {
        "is_ratio_mean": sum(s.ratio_mean for s in per_rank) / n,
        "is_ratio_min": min(s.ratio_min for s in per_rank),
        "is_ratio_max": max(s.ratio_max for s in per_rank),
        "is_truncated_frac": sum(s.truncated_frac for s in per_rank) / n,
        "logp_mismatch_mean": sum(s.logp_abs_diff_mean for s in per_rank) / n,
        "logp_mismatch_max": max(s.logp_abs_diff_max for s in per_rank),
        "is_weight_mean": sum(s.weight_mean for s in per_rank) / n,
        "is_weight_min": min(s.weight_min for s in per_rank),
        "is_weight_max": max(s.weight_max for s in per_rank),
        "is_masked_frac": sum(s.masked_frac for s in per_rank) / n,
    }
