"""Pipeline stages of codemoe.evals: ``eval`` (pass@k of a checkpoint on hidden tests) and ``report``.

``eval`` takes the checkpoint an earlier stage returned (``checkpoint_from: sft`` reads
``ctx.results["sft"]["checkpoint"]``) or a path, samples ``samples`` completions per task of the
suite's split with the engine, grades them on the hidden tests in the sandbox, and writes into its
stage folder ``eval.json`` (pass@k with CIs, per family, per task), ``samples.jsonl`` and the human
review page. With ``baseline`` naming an earlier eval stage, it also reports the improvement.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codemoe.core.contracts import SamplingParams, repository_task
from codemoe.core.errors import ConfigError
from codemoe.evals.agent_metrics import agent_summary, compare_agent
from codemoe.evals.agent_metrics import headline as agent_headline
from codemoe.evals.compare import compare_summaries, format_improvement
from codemoe.evals.evaluate import EvalOptions, Sampler, grade_and_summarize, sample_completions, write_evaluation
from codemoe.evals.grading import outcomes
from codemoe.evals.review import sample_for_review, write_review
from codemoe.evals.summary import load_summary, summarize
from codemoe.evals.tasks import STOP_SEQUENCES

__all__ = ["EvalStage", "EvalStageConfig", "ExpertLoad", "ReportStage", "ReportStageConfig", "engine_sampler"]

log = logging.getLogger("codemoe.evals")


@dataclass
class EvalStageConfig:
    """Options of the ``eval`` stage."""

    suite: Any = field(default_factory=lambda: {"name": "synthetic"}, metadata={"kind": "suite"})  # task suite
    split: str = "heldout"  # which split of the suite to evaluate
    max_tasks: int = 0  # 0: every task of the split; else the first max_tasks
    checkpoint_from: str = ""  # id of an earlier stage whose result holds "checkpoint"
    checkpoint: str = ""  # a checkpoint directory, used when checkpoint_from is empty
    engine: Any = field(default_factory=lambda: {"name": "embedded"}, metadata={"kind": "engine"})  # generator
    executor: Any = field(default_factory=lambda: {"name": "local"}, metadata={"kind": "executor"})  # sandbox
    samples: int = 8  # completions per task (n of pass@k)
    ks: list[int] = field(default_factory=lambda: [1])  # pass@k values to report; each k <= samples
    temperature: float = 0.8  # sampling temperature (0: greedy, then use samples=1)
    top_p: float = 1.0  # nucleus sampling mass
    max_new_tokens: int = 64  # longest completion, in tokens
    stop: list[str] = field(default_factory=lambda: list(STOP_SEQUENCES))  # completion ends before these
    prompts_per_batch: int = 16  # prompts per engine.generate call
    tests: str = "hidden"  # grade on 'hidden' (evaluation) or 'visible' tests
    timeout_s: float = 10.0  # sandbox limit per sample, seconds
    confidence: float = 0.95  # confidence level of every interval
    bootstrap_resamples: int = 2000  # bootstrap resamples for the intervals
    review_fraction: float = 0.07  # share of graded samples put on the human review page (0.05-0.10)
    baseline: str = ""  # id of an earlier eval stage to compare with (paired bootstrap over tasks)
    seed: int = 0  # added to the run seed for sampling
    step: int = -1  # training step this evaluation stands at in plots; -1: the checkpoint stage's step
    # agent evaluation: episodes in an environment (kind 'environment', e.g. 'repo' over a repository
    # suite such as agentic-core) instead of one completion per sample; a sample passes when its episode
    # resolves the task on the hidden tests
    environment: Any = field(default=None, metadata={"kind": "environment"})
    max_turns: int = 8  # actions per episode (the environment's step budget)
    # where the evaluated policy runs: auto | cpu | cuda | cuda:N (auto: the GPU when CUDA is available)
    device: str = "auto"

    def __post_init__(self) -> None:
        from codemoe.core.devices import check_device

        check_device(self.device)


class ExpertLoad:
    """Counts, per MoE layer and expert, the routing decisions of generated tokens.

    Engines return, for codemoe MoE models, the experts chosen at every sampled position
    (``Sample.routing``: ``[tokens, layers, k]``); the shares show how the policy routes on the
    evaluation's own completions.
    """

    def __init__(self) -> None:
        self.counts: Any = None  # [layers, experts] int tensor, grown as experts appear

    def add(self, routing: Any) -> None:
        import torch

        if routing is None or routing.numel() == 0:
            return
        layers = routing.shape[1]
        experts = int(routing.max()) + 1
        # routing: [tokens, layers, k] -> per-layer histogram [layers, experts]
        counts = torch.stack([torch.bincount(routing[:, i].flatten(), minlength=experts) for i in range(layers)])
        if self.counts is None:
            self.counts = counts
            return
        width = max(self.counts.shape[1], counts.shape[1])
        pad = torch.nn.functional.pad
        self.counts = pad(self.counts, (0, width - self.counts.shape[1])) + pad(counts, (0, width - counts.shape[1]))

    def shares(self) -> list[list[float]]:
        """[layers][experts] share of each layer's routing decisions (empty when none were seen)."""
        if self.counts is None:
            return []
        totals = self.counts.sum(dim=1, keepdim=True).clamp(min=1)
        return (self.counts / totals).tolist()


def _sampling_params(config: EvalStageConfig, n: int, seed: int) -> SamplingParams:
    """The engine request for ``n`` samples under the stage's options."""
    return SamplingParams(
        n=n,
        temperature=config.temperature,
        top_p=config.top_p,
        max_new_tokens=config.max_new_tokens,
        stop=list(config.stop),
        seed=seed,
    )


def engine_sampler(
    engine: Any, config: EvalStageConfig, seed: int, advance: Any = None, load: ExpertLoad | None = None
) -> Sampler:
    """A sampler that asks a generation engine (kind ``engine``) for ``n`` samples per prompt;
    routing decisions of the samples go to ``load`` when given."""

    def sample(prompts: list[str], n: int) -> list[list[str]]:
        out: list[list[str]] = []
        for start in range(0, len(prompts), config.prompts_per_batch):
            chunk = prompts[start : start + config.prompts_per_batch]
            for result in engine.generate(chunk, _sampling_params(config, n, seed + start)):
                out.append([s.text for s in result.samples])
                if load is not None:
                    for sample in result.samples:
                        load.add(sample.routing)
            if advance is not None:
                advance(len(chunk))
        return out

    return sample


def _checkpoint(ctx: Any, stage: Any, config: EvalStageConfig) -> tuple[str, int | None]:
    if config.checkpoint_from:
        result = ctx.results.get(config.checkpoint_from)
        if result is None:
            raise ConfigError(
                f"'stages.{stage.id}.checkpoint_from': no earlier stage '{config.checkpoint_from}'; "
                f"earlier stages: {', '.join(ctx.results) or 'none'}"
            )
        if "checkpoint" not in result:
            raise ConfigError(
                f"'stages.{stage.id}.checkpoint_from': stage '{config.checkpoint_from}' returned no 'checkpoint'"
            )
        step = result.get("step", result.get("steps"))
        return str(result["checkpoint"]), int(step) if isinstance(step, (int, float)) else None
    if not config.checkpoint:
        raise ConfigError(f"'stages.{stage.id}': set checkpoint_from (an earlier stage id) or checkpoint (a path)")
    return config.checkpoint, None


class EvalStage:
    """pass@k with confidence intervals of a checkpoint on a suite's hidden tests."""

    def __init__(self, config: EvalStageConfig) -> None:
        self.config = config

    def run(self, ctx: Any, stage: Any) -> dict[str, Any]:
        if not ctx.is_main:
            return {"skipped": "evaluation runs on rank 0 of the launch"}
        cfg = self.config
        if cfg.baseline and cfg.baseline not in ctx.results:
            raise ConfigError(f"'stages.{stage.id}.baseline': no earlier stage '{cfg.baseline}'")
        suite = ctx.registry.build("suite", cfg.suite, where=f"stages.{stage.id}.suite")
        tasks = suite.tasks(cfg.split)
        tasks = tasks[: cfg.max_tasks] if cfg.max_tasks > 0 else tasks
        if cfg.environment is not None and tasks and repository_task(tasks[0]) is None:
            raise ConfigError(
                f"'stages.{stage.id}.environment': agent evaluation needs repository tasks (a suite such as "
                f"'agentic-core'); the suite gave {type(tasks[0]).__name__} tasks"
            )
        checkpoint, step = _checkpoint(ctx, stage, cfg)
        step = cfg.step if cfg.step >= 0 else (step or 0)
        graded, summary = self._sample_and_grade(ctx, stage, tasks, checkpoint)
        folder = ctx.stage_dir(stage)
        summary_path = write_evaluation(folder, graded, summary)
        review = sample_for_review(graded, cfg.review_fraction, seed=ctx.seed)
        page = write_review(folder, review, {t.id: t for t in tasks}, title=f"{stage.id}: review", total=len(graded))
        headline = {f"pass@{k}": summary["overall"][f"pass@{k}"] for k in cfg.ks}
        agent = summary["agent"]["metrics"] if "agent" in summary else {}
        curves = {**headline, **{name: est for name, est in agent.items() if est["value"] is not None}}
        ctx.metrics.write(
            stage.id,
            step,
            **{name: est["value"] for name, est in curves.items()},
            **{f"{name}_low": est["low"] for name, est in curves.items()},
            **{f"{name}_high": est["high"] for name, est in curves.items()},
            **({"expert_load": summary["expert_load"]} if summary["expert_load"] else {}),
        )
        result: dict[str, Any] = {
            "kind": "eval",
            "suite": getattr(suite, "name", str(cfg.suite)),
            "split": cfg.split,
            "checkpoint": checkpoint,
            "checkpoint_from": cfg.checkpoint_from,
            "step": step,
            "tasks": summary["tasks"],
            "samples_per_task": cfg.samples,
            "summary": str(summary_path),
            "review": str(page),
            "review_samples": len(review),
            **{name: round(est["value"], 4) for name, est in headline.items()},
            **{f"{name}_ci": [round(est["low"], 4), round(est["high"], 4)] for name, est in headline.items()},
        }
        if "agent" in summary:
            result["agent"] = agent_headline(summary["agent"])
        if cfg.baseline:
            result["comparison"] = self._compare(ctx, cfg, summary)
        log.info("stage %s: %s", stage.id, {k: result[k] for k in headline})
        return result

    def _sample_and_grade(
        self, ctx: Any, stage: Any, tasks: list[Any], checkpoint: str
    ) -> tuple[list[Any], dict[str, Any]]:
        """Load the policy, sample with the engine, grade in the sandbox; the summary carries the
        checkpoint and the expert load seen while sampling."""
        from codemoe.core.devices import resolve_device
        from codemoe.core.models import load_policy

        cfg, where = self.config, f"stages.{stage.id}"
        model, tokenizer = load_policy(checkpoint, registry=ctx.registry)
        model.to(resolve_device(cfg.device, key=f"{where}.device"))
        engine = ctx.registry.build("engine", cfg.engine, where=f"{where}.engine", model=model, tokenizer=tokenizer)
        executor = ctx.registry.build("executor", cfg.executor, where=f"{where}.executor")
        options = EvalOptions(
            samples=cfg.samples,
            ks=cfg.ks,
            tests=cfg.tests,
            stop=cfg.stop,
            timeout_s=cfg.timeout_s,
            confidence=cfg.confidence,
            resamples=cfg.bootstrap_resamples,
            seed=ctx.seed,
        )
        load = ExpertLoad()
        if cfg.environment is not None:
            try:
                graded = self._agent_episodes(ctx, stage, tasks, engine, executor, load, tokenizer)
            finally:
                executor.close()
            counts = outcomes(tasks, graded)
            summary = summarize(counts, list(cfg.ks), confidence=cfg.confidence, resamples=cfg.bootstrap_resamples, seed=ctx.seed)
            agent = agent_summary(graded, confidence=cfg.confidence, resamples=cfg.bootstrap_resamples, seed=ctx.seed)
            if agent is not None:  # format errors, turns, self-correction, stops: codemoe.evals.agent_metrics
                summary["agent"] = agent
            summary["checkpoint"] = checkpoint
            summary["expert_load"] = load.shares()
            return graded, summary
        try:
            with ctx.progress(f"{stage.id}: sampling", len(tasks)) as sampled:
                sampler = engine_sampler(engine, cfg, ctx.seed + cfg.seed, sampled, load)
                completions = sample_completions(tasks, sampler, options)
            with ctx.progress(f"{stage.id}: grading", len(tasks) * cfg.samples) as graded_bar:
                graded, summary = grade_and_summarize(tasks, completions, executor, options, advance=graded_bar)
        finally:
            executor.close()
        summary["checkpoint"] = checkpoint
        summary["expert_load"] = load.shares()
        return graded, summary

    def _agent_episodes(
        self, ctx: Any, stage: Any, tasks: list[Any], engine: Any, executor: Any, load: ExpertLoad, tokenizer: Any
    ) -> list[Any]:
        """``samples`` graded episodes per task (see :mod:`codemoe.evals.agent_eval`)."""
        from codemoe.core.chat import ChatFormat
        from codemoe.evals.agent_eval import run_agent_episodes

        cfg, where = self.config, f"stages.{stage.id}"
        spec = {"name": cfg.environment} if isinstance(cfg.environment, str) else dict(cfg.environment)
        spec["step_budget"] = spec.get("step_budget") or cfg.max_turns  # 0, the default: the stage's max_turns

        def generate(prompts: list[str], n: int, turn: int) -> list[list[str]]:
            params = _sampling_params(cfg, n, (ctx.seed + cfg.seed) * 1_000_003 + turn)
            out = []
            for result in engine.generate(prompts, params):
                out.append([sample.text for sample in result.samples])
                for sample in result.samples:
                    load.add(sample.routing)
            return out

        def make() -> Any:
            return ctx.registry.build("environment", spec, where=f"{where}.environment", executor=executor)

        with ctx.progress(f"{stage.id}: episodes", len(tasks) * cfg.samples) as done:
            graded = run_agent_episodes(generate, make, tasks, samples=cfg.samples, max_turns=cfg.max_turns,
                                        chat=ChatFormat(tokenizer), advance=done)
        _warn_on_evicted_histories(engine, where)
        return graded

    @staticmethod
    def _compare(ctx: Any, cfg: EvalStageConfig, summary: dict[str, Any]) -> dict[str, Any]:
        base = ctx.results[cfg.baseline]
        if base.get("kind") != "eval":
            raise ConfigError(f"baseline stage '{cfg.baseline}' is not an eval stage")
        before = load_summary(Path(base["summary"]))
        imp = compare_summaries(before, summary, confidence=cfg.confidence, resamples=cfg.bootstrap_resamples)
        log.info("%s", format_improvement(cfg.baseline, "this stage", imp))
        comparison = imp.as_dict()
        if "agent" in before and "agent" in summary:  # each agent metric before and after, paired over tasks
            comparison["agent"] = compare_agent(
                before["agent"], summary["agent"], confidence=cfg.confidence, resamples=cfg.bootstrap_resamples
            )
        return comparison


def _warn_on_evicted_histories(engine: Any, where: str) -> None:
    """The episodes run turn by turn: a prefix cache too small for all their histories drops each
    before its next turn, which then prefills it again (the stage's figures are the same, its time
    is not). Say so, with the size that holds them."""
    health = engine.health() if callable(getattr(engine, "health", None)) else {}
    evicted = health.get("prefix_cache_evicted_tokens", 0)
    if evicted:
        log.warning(
            "%s: the engine's prefix cache dropped %d tokens of episode histories for room, so later turns "
            "prefilled them again (same figures, more time); raise %s.engine.prefix_cache_tokens to hold "
            "every episode's history (it held %d tokens at the end; each costs a few KiB of keys and values)",
            where, evicted, where, health.get("prefix_cache_tokens", 0),
        )


@dataclass
class ReportStageConfig:
    """Options of the ``report`` stage."""

    baseline: str = ""  # eval stage id to compare from; empty: the first eval stage
    candidate: str = ""  # eval stage id to compare to; empty: the last eval stage
    k: int = 1  # pass@k used for the comparison
    print_report: bool = True  # print report.md to the console at the end


class ReportStage:
    """Write report.md and plots for the run so far."""

    def __init__(self, config: ReportStageConfig) -> None:
        self.config = config

    def run(self, ctx: Any, stage: Any) -> dict[str, Any]:
        from codemoe.evals.report import build_report

        if not ctx.is_main:
            return {"skipped": "the report is written on rank 0 of the launch"}
        path = build_report(
            ctx.run_dir,
            ctx.results,
            baseline=self.config.baseline or None,
            candidate=self.config.candidate or None,
            k=self.config.k,
            title=str(ctx.config.run.name),
        )
        if self.config.print_report:
            print(path.read_text())
        plots = sorted(p.name for p in (ctx.run_dir / "plots").glob("*.png"))
        return {"report": str(path), "plots": plots}
