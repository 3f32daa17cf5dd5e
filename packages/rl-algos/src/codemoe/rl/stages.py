"""The ``sft`` and ``rl`` pipeline stages: resolve everything from the config and the registry,
hand it to :class:`~codemoe.rl.sft.SFTTrainer` / :class:`~codemoe.rl.trainer.RLTrainer`, and save
a checkpoint whose path the next stage reads from ``ctx.results[<stage id>]["checkpoint"]``.

No rank holds a second whole model: the RL stage's engine samples the trainer's policy module
itself (under ``torchrun`` its sharded parameters, gathered block by block), and the checkpoint
is gathered one parameter at a time into rank 0's host memory, which writes it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codemoe.core.errors import ConfigError
from codemoe.rl.sft import SFTConfig, SFTTrainer, encode_examples, episode_examples, trajectory_pairs
from codemoe.rl.trainer import RLConfig, RLTrainer

log = logging.getLogger("codemoe.rl")

__all__ = [
    "RLStage", "RLStageConfig", "SFTStage", "SFTStageConfig", "TrajectoriesStage", "TrajectoriesStageConfig",
    "process_scorer",
]

# A completion is a function body: it ends where top-level code would start (the suites' convention).
STOP_SEQUENCES = ["\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#", "\nassert "]


@dataclass
class SFTStageConfig(SFTConfig):
    """Options of the ``sft`` stage (the warm-up's hyper-parameters plus where data and model come from)."""

    # model preset (codemoe-core ships them) or spec for a fresh policy; validated with its router and experts at start-up
    model: Any = field(default="tiny", metadata={"kind": "model", "presets": "models"})
    checkpoint_from: str = ""  # id of an earlier stage whose result holds "checkpoint"; "" builds `model`
    checkpoint: str = ""  # a checkpoint folder to start from (as the eval stage takes); "" builds `model`
    vocab_size: int = 1024  # tokenizer vocabulary when a fresh policy is built
    suite: Any = field(default_factory=lambda: {"name": "synthetic"}, metadata={"kind": "suite"})
    split: str = "train"  # the suite split whose reference solutions are imitated
    max_tasks: int = 0  # 0: every task of the split
    trajectories: str = ""  # JSONL of agent episodes to imitate instead of the suite's solutions ("": off)
    trajectories_from: str = ""  # id of an earlier 'trajectories' stage whose episodes to imitate ("": off)
    resolved_only: bool = True  # imitate only the episodes that solved their task
    # agent trajectories: 'episode' (one example per episode, the loss on every action) or 'turn'
    # (one example per action, the conversation before it as the prompt)
    trajectory_examples: str = "episode"

    def __post_init__(self) -> None:
        super().__post_init__()
        _one_start(self.checkpoint, self.checkpoint_from)
        if self.trajectory_examples not in ("episode", "turn"):
            raise ConfigError(f"trajectory_examples must be 'episode' or 'turn', got {self.trajectory_examples!r}")


@dataclass
class RLStageConfig(RLConfig):
    """Options of the ``rl`` stage (the loop's hyper-parameters plus its components)."""

    # id of the earlier stage whose result holds the starting "checkpoint"; None: 'sft' unless `checkpoint` is set
    checkpoint_from: str | None = None
    checkpoint: str = ""  # a checkpoint folder to start from instead of an earlier stage's (as eval takes)
    # each checkpoint also holds the policy as a model folder (step-N/policy) that `codemoe eval run`,
    # `codemoe serve` and transformers load, so a run's intermediate policies can be scored
    export_policy: bool = True
    algo: Any = field(default_factory=lambda: {"name": "policy_gradient"}, metadata={"kind": "algorithm"})
    engine: Any = field(default_factory=lambda: {"name": "embedded"}, metadata={"kind": "engine"})
    executor: Any = field(default_factory=lambda: {"name": "local"}, metadata={"kind": "executor"})
    reward: Any = field(
        default_factory=lambda: {"name": "weighted_sum", "components": {"task_complete": {"weight": 1.0}}},
        metadata={"kind": "reward"},
    )
    suite: Any = field(default_factory=lambda: {"name": "synthetic"}, metadata={"kind": "suite"})
    split: str = "train"  # tasks are drawn from this split; the visible tests give the reward
    max_tasks: int = 0  # 0: every task of the split
    stop: list[str] = field(default_factory=lambda: list(STOP_SEQUENCES))  # the completion text ends before these
    timeout_s: float = 5.0  # sandbox limit per sample
    # samples of a batch with the same whole program are checked once and share the verdict (false:
    # every sample is checked on its own; see codemoe.rl.scoring.VerifierScorer)
    check_once_per_program: bool = True
    # score in a child process of its own (the sandbox's client and the reward recipe's hack detectors):
    # with asynchronous rollouts its Python then runs beside the update instead of taking the GIL from
    # it (codemoe.rl.scoring_process). null: in a child process when max_staleness is set and the stage
    # scores single completions (no environment), in-process otherwise
    scorer_process: bool | None = None
    # multi-step agent episodes instead of single completions: an environment spec (kind 'environment',
    # e.g. 'repo' over a repository suite such as agentic-core), with max_turns actions per episode
    environment: Any = field(default=None, metadata={"kind": "environment"})

    def __post_init__(self) -> None:
        super().__post_init__()
        _one_start(self.checkpoint, self.checkpoint_from)
        if self.scorer_process and self.environment is not None:
            raise ConfigError(
                "'scorer_process': true scores single completions in a child process; agent episodes "
                "(environment set) are graded by their environment in the trainer's process: set it to null or false"
            )

    @property
    def scores_in_process(self) -> bool:
        """Whether the scorer runs in the trainer's process (``scorer_process`` resolved)."""
        if self.scorer_process is None:
            return self.max_staleness is None or self.environment is not None
        return not self.scorer_process


def _one_start(checkpoint: str, checkpoint_from: str | None) -> None:
    """A stage starts from an earlier stage's checkpoint or from a path, never from both."""
    if checkpoint and checkpoint_from:
        raise ConfigError(
            f"'checkpoint': checkpoint ({checkpoint}) and checkpoint_from ({checkpoint_from}) are both set; "
            "a stage starts from one: a checkpoint folder or an earlier stage's checkpoint"
        )


def _tasks(ctx: Any, stage: Any, suite_spec: Any, split: str, max_tasks: int) -> list[Any]:
    suite = ctx.registry.build("suite", suite_spec, where=f"stages.{stage.id}.suite")
    tasks = suite.tasks(split)
    return tasks[:max_tasks] if max_tasks else tasks


def _recorded(ctx: Any, stage: Any, source: str) -> str:
    """The trajectories file an earlier ``trajectories`` stage wrote ("" when ``source`` is empty)."""
    if not source:
        return ""
    result = ctx.results.get(source)
    if result is None or "trajectories" not in result:
        raise ConfigError(
            f"'stages.{stage.id}.trajectories_from': no earlier stage '{source}' that recorded trajectories; "
            f"stages so far: {', '.join(ctx.results) or 'none'}"
        )
    return str(result["trajectories"])


@dataclass
class TrajectoriesStageConfig:
    """Options of the ``trajectories`` stage (scripted agent episodes for imitation)."""

    suite: Any = field(default_factory=lambda: {"name": "agentic-core"}, metadata={"kind": "suite"})
    split: str = "train"  # the repository tasks to record episodes on
    max_tasks: int = 0  # 0: every task of the split
    environment: Any = field(default_factory=lambda: {"name": "repo"}, metadata={"kind": "environment"})
    executor: Any = field(default_factory=lambda: {"name": "local"}, metadata={"kind": "executor"})
    agent: Any = field(default_factory=lambda: {"name": "oracle"}, metadata={"kind": "scripted_agent"})
    # episodes at once, each in its own environment on the shared executor (whose workers run their
    # tests in parallel); 0: one per CPU. The file is the same whatever the number: task order.
    concurrency: int = 0

    def __post_init__(self) -> None:
        if self.concurrency < 0:
            raise ConfigError(f"concurrency: {self.concurrency} is negative; give 0 (one per CPU) or more")


class TrajectoriesStage:
    """Record reference agent episodes: a scripted agent (kind ``scripted_agent``; the sandbox's
    ``oracle`` replays each task's gold patch through the tools, asking for clarification first where
    the task has one, and submits) acts in the environment; the graded episodes land in
    ``trajectories.jsonl`` in chat format, for ``sft`` to imitate (``trajectories_from: <this stage>``)."""

    def __init__(self, config: TrajectoriesStageConfig) -> None:
        self.config = config

    def run(self, ctx: Any, stage: Any) -> dict[str, Any]:
        from codemoe.core.devices import usable_cpus

        cfg, where = self.config, f"stages.{stage.id}"
        tasks = _repository_tasks(_tasks(ctx, stage, cfg.suite, cfg.split, cfg.max_tasks), cfg.environment, where)
        # every rank records the same episodes (the next stage reads them on every rank); rank 0's file is the run's
        name = "trajectories.jsonl" if ctx.is_main else f"trajectories-rank{os.environ.get('RANK', '0')}.jsonl"
        path = ctx.stage_dir(stage) / name
        workers = max(1, min(cfg.concurrency or usable_cpus(), len(tasks)))
        shards = [path] if workers == 1 else [path.with_name(f"{path.stem}.part{k}.jsonl") for k in range(workers)]
        for file in {path, *shards}:
            file.unlink(missing_ok=True)
        executor = ctx.registry.build("executor", cfg.executor, where=f"{where}.executor")
        try:
            with ctx.progress(f"{stage.id}: episodes", len(tasks)) as advance:
                resolved = self._record(ctx, cfg, where, tasks, shards, executor, advance)
        finally:
            executor.close()
        if len(shards) > 1:  # one file in task order, as one environment would have written it
            order = {task.id: i for i, task in enumerate(tasks)}
            lines = [line for shard in shards if shard.exists() for line in shard.read_text(encoding="utf-8").split("\n") if line]
            lines.sort(key=lambda line: order[json.loads(line)["task_id"]])
            path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
            for shard in shards:
                shard.unlink(missing_ok=True)
        return {"trajectories": str(path), "episodes": len(tasks), "resolved": resolved}

    @staticmethod
    def _record(ctx: Any, cfg: TrajectoriesStageConfig, where: str, tasks: list[Any], shards: list[Path],
                executor: Any, advance: Any) -> int:
        """Play every task, ``len(shards)`` episodes at once (environment ``k`` appends to ``shards[k]``);
        the number resolved."""
        from concurrent.futures import ThreadPoolExecutor

        from codemoe.core.contracts import play, repository_task

        spec = {"name": cfg.environment} if isinstance(cfg.environment, str) else dict(cfg.environment)
        pending = iter(tasks)
        lock, failed = threading.Lock(), threading.Event()  # one episode's error stops the others' next task

        def worker(shard: Path) -> int:
            env = ctx.registry.build("environment", {**spec, "trajectory_path": str(shard)},
                                     where=f"{where}.environment", executor=executor)
            done = 0
            try:
                while not failed.is_set():
                    with lock:
                        task = next(pending, None)
                    if task is None:
                        break
                    inner = repository_task(task)
                    agent = ctx.registry.build("scripted_agent", cfg.agent, where=f"{where}.agent", task=inner)
                    done += play(env, inner, agent).resolved
                    with lock:
                        advance()
            except BaseException:
                failed.set()
                raise
            finally:
                env.close_workspace()
            return done

        if len(shards) == 1:
            return worker(shards[0])
        with ThreadPoolExecutor(max_workers=len(shards), thread_name_prefix="codemoe-trajectories") as pool:
            return sum(future.result() for future in [pool.submit(worker, shard) for shard in shards])


def _repository_tasks(tasks: list[Any], environment: Any, where: str) -> list[Any]:
    """``tasks``, checked to be repository tasks when the stage runs episodes in an environment."""
    from codemoe.core.contracts import repository_task

    if environment is not None and tasks and repository_task(tasks[0]) is None:
        raise ConfigError(
            f"'{where}.environment': episodes need repository tasks (a suite such as 'agentic-core'); "
            f"the suite gave {type(tasks[0]).__name__} tasks"
        )
    return tasks


def _read_jsonl(path: str) -> list[dict[str, Any]]:
    from codemoe.rl.sft import read_episodes

    try:
        return read_episodes(path)
    except ValueError as exc:
        raise ConfigError(f"'trajectories': {exc}") from None


def _start_checkpoint(ctx: Any, stage: Any, cfg: SFTStageConfig | RLStageConfig, default_from: str = "") -> str:
    """The checkpoint folder a stage starts from: ``checkpoint``, else the result of ``checkpoint_from``
    (``default_from`` when that is None); "" when it starts from neither."""
    if cfg.checkpoint:
        folder = Path(cfg.checkpoint)
        if not (folder / "config.json").is_file():
            raise ConfigError(
                f"'stages.{stage.id}.checkpoint': {folder} holds no checkpoint (no config.json there); give a "
                "folder a stage saved (RUN_DIR/<stage>/checkpoint) or a Hugging Face model folder"
            )
        return str(folder)
    source = default_from if cfg.checkpoint_from is None else cfg.checkpoint_from
    return _checkpoint(ctx, stage, source) if source else ""


def _checkpoint(ctx: Any, stage: Any, source: str) -> str:
    result = ctx.results.get(source)
    if result is None or "checkpoint" not in result:
        raise ConfigError(
            f"'stages.{stage.id}.checkpoint_from': no earlier stage '{source}' with a checkpoint; "
            f"stages so far: {', '.join(ctx.results) or 'none'}"
        )
    return result["checkpoint"]


def _reporter(ctx: Any, stage: Any, advance: Any) -> Any:
    def report(step: int, metrics: dict[str, Any]) -> None:
        ctx.metrics.write(stage.id, step, **metrics)
        scalars = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}
        ctx.hooks.after_train_step(ctx=ctx, stage=stage, step=step, metrics=scalars)
        advance()

    return report


class SFTStage:
    """Supervised warm-up on a suite's reference solutions, router phases first."""

    def __init__(self, config: SFTStageConfig) -> None:
        self.config = config

    def run(self, ctx: Any, stage: Any) -> dict[str, Any]:
        import torch
        from codemoe.core.models import build_model, load_pretrained
        from codemoe.core.moe import set_trainable
        from codemoe.core.tokenizer import train_tokenizer
        from codemoe.rl.distributed import init_distributed

        cfg = self.config
        torch.manual_seed(ctx.seed + cfg.seed)
        start = _start_checkpoint(ctx, stage, cfg)  # first: a bad path stops the stage before any work
        # what to imitate: agent trajectories when given, else the suite's reference solutions
        source = cfg.trajectories or _recorded(ctx, stage, cfg.trajectories_from)
        records = _read_jsonl(source) if source else None
        tasks = _tasks(ctx, stage, cfg.suite, cfg.split, cfg.max_tasks) if records is None else []
        if start:
            model, tokenizer = load_pretrained(start, registry=ctx.registry)
        else:
            texts = [t.prompt + t.reference_solution for t in tasks]
            texts += [m["content"] for r in records or [] for m in r["messages"]]
            tokenizer = train_tokenizer(texts, cfg.vocab_size)
            model = build_model(cfg.model, vocab_size=len(tokenizer), registry=ctx.registry)
        if records is None:
            examples = encode_examples(tokenizer, [(t.prompt, t.reference_solution) for t in tasks], cfg.max_tokens)
        elif cfg.trajectory_examples == "episode":
            examples = episode_examples(tokenizer, records, cfg.max_tokens, cfg.resolved_only)
        else:
            examples = encode_examples(tokenizer, trajectory_pairs(tokenizer, records, cfg.resolved_only), cfg.max_tokens)
        total = sum(phase.steps for phase in cfg.phases)
        env = init_distributed()  # under torchrun: FSDP2, each rank trains on its share of every batch
        _on_device(model, cfg.device, f"stages.{stage.id}.device")
        with ctx.progress(f"sft ({stage.id})", total) as advance:
            trainer = SFTTrainer(
                cfg,
                model,
                examples,
                pad_id=tokenizer.pad_token_id,
                set_trainable=set_trainable,
                on_step=_reporter(ctx, stage, advance) if env.is_main else None,  # one rank writes the log
                env=env,
                copy_sep_id=tokenizer.eos_token_id,
            )
            result = trainer.fit()
        path = save_policy(model, tokenizer, ctx.stage_dir(stage) / "checkpoint", env)
        return {"checkpoint": str(path), "examples": len(examples), **result}


def process_scorer(cfg: RLStageConfig, registry: Any, where: str, recipe: Any) -> Any:
    """The scorer an rl stage configured by ``cfg`` runs in a child process of its own
    (:class:`~codemoe.rl.scoring_process.ProcessScorer`), or None to score in the trainer's process:
    ``scorer_process: false``, or null where it does not apply (a synchronous stage, agent episodes)
    or where the executor or the recipe cannot be rebuilt in a child (a factory that takes the
    registry, a recipe that does not pickle or whose class the child cannot import, e.g. one defined
    in a script's ``__main__``); ``where`` names the stage in errors and warnings (``stages.rl``)."""
    from codemoe.rl.scoring_process import ProcessScorer, ScorerProcessError, portable_parts

    if cfg.scores_in_process:
        return None
    try:
        factory, config = registry.portable("executor", cfg.executor, where=f"{where}.executor")
        parts = portable_parts(factory, config, recipe, f"{where}.scorer_process")
        return ProcessScorer(parts, timeout_s=cfg.timeout_s, once_per_program=cfg.check_once_per_program)
    except (ConfigError, ScorerProcessError) as exc:
        if cfg.scorer_process:
            raise
        log.warning("%s.scorer_process: scoring in the trainer's process (%s)", where, exc)
        return None


class RLStage:
    """RL on a suite's train split: engine, executor, reward recipe and algorithm from the registry."""

    def __init__(self, config: RLStageConfig) -> None:
        self.config = config

    def run(self, ctx: Any, stage: Any) -> dict[str, Any]:
        import torch
        from codemoe.core.models import load_pretrained
        from codemoe.rl.distributed import init_distributed

        cfg = self.config
        env = init_distributed()
        torch.manual_seed(ctx.seed + cfg.seed)
        policy, tokenizer = load_pretrained(_start_checkpoint(ctx, stage, cfg, "sft"), registry=ctx.registry)
        _on_device(policy, cfg.device, f"stages.{stage.id}.device")  # before the engine, which runs it there
        # a scorer in a child process builds its own executor there; the trainer's process needs one only
        # to score in-process (agent episodes always do: their environment runs the tools here)
        recipe = ctx.registry.build("reward", cfg.reward, where=f"stages.{stage.id}.reward")
        scorer = process_scorer(cfg, ctx.registry, f"stages.{stage.id}", recipe)
        executor = None
        if scorer is None:
            executor = ctx.registry.build("executor", cfg.executor, where=f"stages.{stage.id}.executor")
        trainer = None
        try:
            with ctx.progress(f"rl ({stage.id})", cfg.steps) as advance:
                trainer = self._trainer(ctx, stage, env, policy, tokenizer, executor, recipe, scorer, advance)
                result = trainer.fit()
        finally:
            for part in (executor, scorer):
                if part is not None:  # the sandbox's worker processes (a scorer's child's too) end with the stage
                    part.close()
            close = getattr(getattr(trainer, "engine", None), "close", None)
            if close is not None:  # an engine with a process of its own (embedded with process: true)
                close()
        path = save_policy(trainer.policy, tokenizer, ctx.stage_dir(stage) / "checkpoint", env)
        return {"checkpoint": str(path), **result}

    def _trainer(
        self,
        ctx: Any,
        stage: Any,
        env: Any,
        policy: Any,
        tokenizer: Any,
        executor: Any,
        recipe: Any,
        scorer: Any,
        advance: Any,
    ) -> RLTrainer:
        """The trainer with every component resolved from the registry; the engine is built on the
        policy module itself (the embedded engine samples its live parameters, no copy), or with
        asynchronous rollouts (``max_staleness`` set) on a copy of it that every weight sync
        refreshes, so generation never reads weights an optimizer step is changing."""
        import copy

        from codemoe.rl.scoring import VerifierScorer

        cfg, where = self.config, f"stages.{stage.id}"
        served = policy if cfg.max_staleness is None else copy.deepcopy(policy)
        engine = ctx.registry.build(
            "engine", _engine_spec(cfg, served), where=f"{where}.engine", model=served, tokenizer=tokenizer
        )
        algorithm = ctx.registry.build("algorithm", cfg.algo, where=f"{where}.algo", registry=ctx.registry)
        if scorer is None:
            scorer = VerifierScorer(executor, recipe, timeout_s=cfg.timeout_s, once_per_program=cfg.check_once_per_program)
        return RLTrainer(
            cfg,
            algorithm,
            policy,
            engine,
            scorer,
            _repository_tasks(_tasks(ctx, stage, cfg.suite, cfg.split, cfg.max_tasks), cfg.environment, where),
            pad_id=tokenizer.pad_token_id,
            checkpoint_dir=ctx.stage_dir(stage) / "checkpoints",
            env=env,
            on_step=_reporter(ctx, stage, advance) if env.is_main else None,  # one rank writes the log
            on_rollouts=lambda step, batch: ctx.hooks.after_rollout_batch(ctx=ctx, stage=stage, step=step, batch=batch),
            export_policy=(lambda path: save_policy(policy, tokenizer, path, env)) if cfg.export_policy else None,
            environment=self._environment(ctx, where, executor, recipe, tokenizer),
        )

    def _environment(self, ctx: Any, where: str, executor: Any, recipe: Any, tokenizer: Any) -> Any:
        """Makes one episode's environment when the stage runs multi-step episodes, else None."""
        cfg = self.config
        if cfg.environment is None:
            return None
        from codemoe.core.chat import ChatFormat
        from codemoe.rl.repo_episodes import RepoEpisodes

        chat = ChatFormat(tokenizer)  # the rendering SFT on trajectories used
        spec = {"name": cfg.environment} if isinstance(cfg.environment, str) else dict(cfg.environment)
        # every episode ends, graded, within max_turns actions; 0 (the environment's default, "the task's
        # own budget") is what a resolved config.yaml holds when the pipeline left it out
        spec["step_budget"] = spec.get("step_budget") or cfg.max_turns
        ctx.registry.build("environment", spec, where=f"{where}.environment", executor=executor)  # fail early

        def make() -> RepoEpisodes:
            return RepoEpisodes(ctx.registry.build("environment", spec, executor=executor), recipe, chat)

        return make


def _engine_spec(cfg: Any, served: Any) -> Any:
    """The stage's engine spec; asynchronous rollouts on CPU run the embedded engine in a child
    process of its own unless the spec sets ``process`` (true or false; null, its default, leaves
    it to the stage): generation then runs beside the update instead of sharing the trainer's
    interpreter with it (1.26-1.41x -> 1.46-1.58x per step on the quickstart, ``docs/performance.md``)."""
    from collections.abc import Mapping

    spec = {"name": cfg.engine} if isinstance(cfg.engine, str) else cfg.engine
    if not isinstance(spec, Mapping) or spec.get("name") != "embedded" or spec.get("process") is not None:
        return cfg.engine
    param = next(served.parameters(), None)
    if cfg.max_staleness is None or param is None or param.device.type != "cpu":
        return cfg.engine
    return {**dict(spec), "process": True}


def _on_device(model: Any, spec: str, key: str) -> None:
    """Move ``model`` to the device ``spec`` names (:func:`codemoe.core.devices.resolve_device`)."""
    from codemoe.core.devices import resolve_device

    model.to(resolve_device(spec, key=key))


def save_policy(model: Any, tokenizer: Any, path: Path, env: Any) -> Path:
    """Save a trained policy as a Hugging Face checkpoint in ``path``; every rank calls it.

    Sharded (FSDP2), the whole state dict is gathered one parameter at a time into rank 0's host
    memory (``cpu_offload``: the other ranks keep nothing, and no device holds more than its shard
    and one parameter), and rank 0 writes it with the model's own ``save_pretrained``.
    """
    from codemoe.core.models import save_pretrained

    if not env.enabled:
        save_pretrained(model, tokenizer, path)
        return path
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if env.is_main:
        path.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(path, state_dict=state)
        if tokenizer is not None:
            tokenizer.save_pretrained(path)
    del state
    env.barrier()
    return path
