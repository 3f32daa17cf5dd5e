"""The ablation runner: run variants of one pipeline and compare each with a baseline variant.

The seeds ask which part a gain came from: swap the MoE for a dense model of equal *active*
parameters, or evaluate without the RL stage. An ablation spec (YAML) names the pipeline, the
variants (each a list of ``key=value`` overrides and the eval stage whose result counts), and the
baseline variant::

    name: agentic-samples
    pipeline: agentic-repos
    overrides: [run.seed=0]          # applied to every variant
    share: [trajectories, sft, eval_sft]
    baseline: samples_4
    variants:
      samples_4: {eval_stage: eval_rl, overrides: [stages.rl.algo.group_size=4]}
      samples_8: {eval_stage: eval_rl, overrides: [stages.rl.algo.group_size=8]}

Every variant's config is composed and validated before anything runs, so a misspelt key, a
misspelt option of a component or an unknown eval stage stops the ablation at once, naming it.

One run per distinct config: variants whose resolved configs are equal (``with_rl`` and
``without_rl`` of ``rl-vs-sft``, which differ only in the eval stage read, or the default arm of
two ablations run together) share one run directory.

``share`` lists stages that are the same for every variant and run once: the first run that needs
them runs them, and each later run whose config of those stages (and of ``run:``, seed included)
is the same starts with them recorded as finished in its ``state.json`` (each result marked
``shared_from`` with the run that made it), so its next stage reads their results, the SFT
checkpoint for instance, as it would read its own. A variant that changes a shared stage is refused
with the key it changes; so is a shared stage that reads a stage that is not shared (its
``checkpoint_from`` or ``trajectories_from``, say).

A single run per variant says how sure a difference is for those trained models, not for the
configs: two training runs of one config can differ by more than that (the quickstart's RL stage
scored 75.0% and 66.0% held-out with seeds 0 and 1). ``seeds: [0, 1, 2]`` runs every variant once
per value, set by the override ``seed_key`` (default ``run.seed``; ``stages.rl.seed`` keeps shared
SFT stages shared), and each variant's pass@k and its difference to the baseline are then taken
over its runs and the tasks together (:func:`codemoe.evals.stats.improvement_over_runs`); the
agent metrics (format errors) stay those of each variant's first run.

An ablation of the agentic pipeline runs for an hour: ``resume`` (``--resume``) takes up the runs
an earlier call left in the same folder, each where it stopped (``codemoe run --resume``), if its
saved config is the planned one; without it every call starts fresh runs.

A list of ablations is a YAML file with ``specs:`` (names of ready specs or paths), run together
by :func:`run_ablations`: the runs and shared stages above are shared across all of them. Each
ablation writes ``ablation-<name>.json`` (every variant's pass@k and its improvement over the
baseline, absolute and relative, with CIs) and ``ablation-<name>.md`` (the same as a markdown
table); a list writes ``ablation-<list name>.json`` and ``.md`` with every row. Parameter counts
(``total_parameters``, ``active_parameters``) are collected so "equal active parameters" is
checked, not assumed: before the runs on the composed model, after them on the checkpoints.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codemoe.core.config import compose, resolve_defaults, validate_pipeline
from codemoe.core.errors import ConfigError
from codemoe.core.runs import create_run_dir, run_pipeline
from codemoe.evals.agent_metrics import compare_agent
from codemoe.evals.compare import compare_summaries, eval_stages
from codemoe.evals.stats import bootstrap_over_runs, improvement_over_runs
from codemoe.evals.summary import load_summary, per_task_pass
from omegaconf import DictConfig, OmegaConf

__all__ = [
    "ABLATIONS_DIR",
    "AblationPlan",
    "AblationSpec",
    "PlannedRun",
    "Variant",
    "ablation_markdown",
    "format_ablation",
    "format_ablations",
    "format_plan",
    "load_ablation",
    "load_ablations",
    "plan_ablations",
    "run_ablation",
    "run_ablations",
]

_PARAM_KEYS = ("total_parameters", "active_parameters")
ABLATIONS_DIR = Path(__file__).parent / "ablations"  # ready specs (rl-vs-sft, moe-vs-dense, agentic-*) and lists (agentic)


@dataclass
class Variant:
    """One arm of an ablation."""

    overrides: list[str] = field(default_factory=list)  # key=value overrides of the pipeline
    eval_stage: str = ""  # the eval stage whose pass@k counts; empty: the last eval stage


@dataclass
class AblationSpec:
    """An ablation: a pipeline, its variants, and the variant the others are compared with."""

    name: str
    pipeline: str
    variants: dict[str, Variant]
    baseline: str
    overrides: list[str] = field(default_factory=list)  # applied to every variant first
    k: int = 1  # pass@k compared
    max_active_ratio: float = 0.0  # > 0: fail when variants' active parameters differ by more than this factor
    share: list[str] = field(default_factory=list)  # stage ids run once for every variant (see the module doc)
    seeds: list[Any] = field(default_factory=list)  # each variant runs once per value (see the module doc)
    seed_key: str = "run.seed"  # the override each of ``seeds`` sets


# -- reading specs


def _spec_path(path: Path | str) -> Path:
    path = Path(path)
    if path.is_file():
        return path
    named = ABLATIONS_DIR / f"{path.name}.yaml"
    if not named.is_file():
        known = sorted(p.stem for p in ABLATIONS_DIR.glob("*.yaml"))
        raise ConfigError(f"no ablation spec {path}; give a YAML path or one of: {', '.join(known)}")
    return named


def _read(path: Path) -> dict[str, Any]:
    data = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: an ablation spec is a mapping")
    return data


def load_ablation(path: Path | str) -> AblationSpec:
    """Read and check an ablation spec: a YAML path, or the name of one in :data:`ABLATIONS_DIR`."""
    path = _spec_path(path)
    data = _read(path)
    if "specs" in data:
        raise ConfigError(f"{path}: a list of ablations (specs: ...); read it with load_ablations")
    unknown = set(data) - set(AblationSpec.__dataclass_fields__)
    if unknown:
        raise ConfigError(f"{path}: unknown keys {sorted(unknown)}; known: {sorted(AblationSpec.__dataclass_fields__)}")
    variants = {}
    for name, options in (data.get("variants") or {}).items():
        unknown = set(options or {}) - set(Variant.__dataclass_fields__)
        if unknown:
            raise ConfigError(f"{path}: variants.{name}: unknown keys {sorted(unknown)}; known: overrides, eval_stage")
        variants[str(name)] = Variant(**(options or {}))
    if len(variants) < 2:
        raise ConfigError(f"{path}: an ablation needs at least two variants")
    spec = AblationSpec(**{**data, "name": str(data.get("name", path.stem)), "variants": variants})
    if spec.baseline not in variants:
        raise ConfigError(f"{path}: baseline '{spec.baseline}' is not a variant; variants: {', '.join(variants)}")
    if not isinstance(spec.seeds, list) or len(set(map(str, spec.seeds))) < len(spec.seeds):
        raise ConfigError(f"{path}: seeds must be a list of distinct values (e.g. [0, 1, 2]), not {spec.seeds!r}")
    return spec


def load_ablations(path: Path | str) -> tuple[str, list[AblationSpec]]:
    """(name, specs) of an ablation spec or of a list of them (``name:``, ``specs: [NAME or PATH, ...]``,
    paths relative to the list's folder)."""
    path = _spec_path(path)
    data = _read(path)
    if "specs" not in data:
        return load_ablation(path).name, [load_ablation(path)]
    unknown = set(data) - {"name", "specs"}
    if unknown:
        raise ConfigError(f"{path}: unknown keys {sorted(unknown)} in a list of ablations; known: name, specs")
    items = data["specs"] or []
    if not items:
        raise ConfigError(f"{path}: 'specs' is empty; name the ablations to run")
    specs = [load_ablation(path.parent / item if (path.parent / str(item)).is_file() else item) for item in items]
    names = [spec.name for spec in specs]
    if len(set(names)) < len(names):
        raise ConfigError(f"{path}: two ablations of the list have the same name ({', '.join(names)})")
    return str(data.get("name", path.stem)), specs


# -- planning: compose every arm, find the runs and the shared stages


@dataclass
class PlannedRun:
    """One pipeline run of an ablation: the arms it serves and the stages it takes from an earlier run."""

    config: DictConfig  # resolved, with run.name (and run.dir) set
    arms: list[tuple[str, str]] = field(default_factory=list)  # (ablation, variant)
    shared: tuple[str, ...] = ()  # stage ids recorded as finished from run `source`
    source: int | None = None  # index of the earlier planned run whose results they are


@dataclass
class AblationPlan:
    """Every run the ablations need, in order, and which run and eval stage each arm reads."""

    specs: list[AblationSpec]
    runs: list[PlannedRun]
    arms: dict[tuple[str, str], tuple[int, str]]  # (ablation, variant) -> (run index, eval stage or ""), first seed
    seed_runs: dict[tuple[str, str], list[int]] = field(default_factory=dict)  # (ablation, variant) -> run per seed


@dataclass
class _Arm:
    cfg: DictConfig  # resolved
    plain: dict[str, Any]  # the same as a container, for comparisons
    stages: list[str]  # stage ids in order


def plan_ablations(
    specs: Sequence[AblationSpec],
    registry: Any,
    *,
    registry_dir: str | Path | None = None,
    overrides: Sequence[str] = (),
    out_dir: Path | None = None,
) -> AblationPlan:
    """Compose and validate every arm and decide the runs (nothing runs).

    ``overrides`` apply to every arm after each spec's own and before the variant's, so a variant's
    key wins (a shortened run keeps its arms apart).
    """
    runs: list[PlannedRun] = []
    keys: list[str] = []
    arms: dict[tuple[str, str], tuple[int, str]] = {}
    seed_runs: dict[tuple[str, str], list[int]] = {}
    for spec in specs:
        for seed in spec.seeds or [None]:
            extra = [*overrides, f"{spec.seed_key}={seed}"] if seed is not None else list(overrides)
            composed = {name: _compose_arm(spec, name, registry, registry_dir, extra, out_dir) for name in spec.variants}
            _check_shared(spec, composed)
            _check_planned_active(spec, composed, registry)
            for name, arm in composed.items():
                key = _fingerprint(arm.plain)
                if key not in keys:
                    keys.append(key)
                    suffix = f"-seed{seed}" if seed is not None else ""
                    OmegaConf.update(arm.cfg, "run.name", f"{spec.name}-{name}{suffix}")
                    runs.append(_new_run(runs, arm, spec.share))
                arms.setdefault((spec.name, name), (keys.index(key), spec.variants[name].eval_stage))
                seed_runs.setdefault((spec.name, name), []).append(keys.index(key))
                runs[keys.index(key)].arms.append((spec.name, name))
    for spec in specs:
        for name in spec.variants:
            indices = seed_runs[(spec.name, name)]
            if len(set(indices)) < len(indices):
                raise ConfigError(
                    f"ablation '{spec.name}', variant '{name}': two of seeds {spec.seeds} give it the same run, so "
                    f"{spec.seed_key} changes nothing in it (do its overrides set that key?)"
                )
    return AblationPlan(list(specs), runs, arms, seed_runs)


def _compose_arm(
    spec: AblationSpec, name: str, registry: Any, registry_dir: Any, extra: Sequence[str], out_dir: Path | None
) -> _Arm:
    variant = spec.variants[name]
    where = f"ablation '{spec.name}', variant '{name}'"
    try:
        cfg = compose(
            spec.pipeline,
            [*spec.overrides, *extra, *variant.overrides],
            registry_dir=Path(registry_dir) if registry_dir else None,
            preset_dirs=getattr(registry, "preset_dirs", None),
        )
        if out_dir is not None:
            cfg.run.dir = str(out_dir)
        stages = [stage_id for stage_id, _, _ in validate_pipeline(cfg, registry)]
        cfg = resolve_defaults(cfg, registry)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if variant.eval_stage and variant.eval_stage not in stages:
        raise ConfigError(f"{where}: eval_stage '{variant.eval_stage}' is not a stage of {spec.pipeline}; stages: {', '.join(stages)}")
    return _Arm(cfg, OmegaConf.to_container(cfg, resolve=True), stages)


def _fingerprint(plain: dict[str, Any]) -> str:
    """What makes two runs the same: the resolved config, but for the run's name."""
    run = {k: v for k, v in plain.get("run", {}).items() if k != "name"}
    return json.dumps({**plain, "run": run}, sort_keys=True, default=str)


def _shared_view(plain: dict[str, Any], share: Sequence[str]) -> dict[str, Any]:
    run = {k: v for k, v in plain.get("run", {}).items() if k != "name"}
    return {"run": run, "stages": {s: plain["stages"][s] for s in share}}


def _new_run(runs: list[PlannedRun], arm: _Arm, share: Sequence[str]) -> PlannedRun:
    """A run of ``arm``; with its shared stages taken from the first earlier run that has the same ones."""
    if share:
        view = _shared_view(arm.plain, share)
        for index, run in enumerate(runs):
            other = OmegaConf.to_container(run.config, resolve=True)
            if set(share) <= set(other["stages"]) and _shared_view(other, share) == view:
                return PlannedRun(arm.cfg, shared=tuple(s for s in arm.stages if s in share), source=index)
    return PlannedRun(arm.cfg)


def _check_shared(spec: AblationSpec, arms: dict[str, _Arm]) -> None:
    """Shared stages exist, read only shared stages, and are the same in every variant."""
    if not spec.share:
        return
    first_name, first = next(iter(arms.items()))
    unknown = [s for s in spec.share if s not in first.stages]
    if unknown:
        raise ConfigError(
            f"ablation '{spec.name}': share names {unknown}, not stages of {spec.pipeline}; its stages: {', '.join(first.stages)}"
        )
    for stage_id in spec.share:
        for key, value in first.plain["stages"][stage_id].items():
            if key != "name" and isinstance(value, str) and value in first.stages and value not in spec.share:
                raise ConfigError(
                    f"ablation '{spec.name}': share: stage '{stage_id}' reads stage '{value}' "
                    f"(stages.{stage_id}.{key}={value}), which is not shared; share '{value}' too, or not '{stage_id}'"
                )
    view = _shared_view(first.plain, spec.share)
    for name, arm in arms.items():
        changed = _first_difference(view, _shared_view(arm.plain, spec.share))
        if changed is not None:
            path, before, after = changed
            raise ConfigError(
                f"ablation '{spec.name}', variant '{name}': it changes {path} ({before!r} in variant "
                f"'{first_name}', {after!r} here), which share: {spec.share} runs once for every variant; "
                "a variant may change only stages that are not shared: remove the stage from share, or the override"
            )


def _first_difference(a: Any, b: Any, path: str = "") -> tuple[str, Any, Any] | None:
    """The first key path (``stages.sft.model.num_experts``) where two containers differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in [*a, *(k for k in b if k not in a)]:
            found = _first_difference(a.get(key), b.get(key), f"{path}.{key}" if path else str(key))
            if found is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            found = _first_difference(x, y, f"{path}.{index}")
            if found is not None:
                return found
        return None
    return None if a == b else (path, a, b)


def _check_planned_active(spec: AblationSpec, arms: dict[str, _Arm], registry: Any) -> None:
    """max_active_ratio on the composed models (the first stage that builds one), before hours of runs."""
    if spec.max_active_ratio <= 0:
        return
    from codemoe.core.models import count_parameters

    active = {}
    for name, arm in arms.items():
        built = [s for s in arm.plain["stages"].values() if isinstance(s.get("model"), dict)]
        if built:
            model = built[0]
            active[name] = count_parameters(model["model"], registry=registry, vocab_size=model.get("vocab_size")).active
    _check_ratio(spec, active)


def _check_ratio(spec: AblationSpec, active: dict[str, int]) -> None:
    if spec.max_active_ratio > 0 and len(active) >= 2:
        ratio = max(active.values()) / max(1, min(active.values()))
        if ratio > spec.max_active_ratio:
            raise ConfigError(
                f"ablation '{spec.name}': active parameters differ by {ratio:.2f}x ({active}), more than "
                f"max_active_ratio={spec.max_active_ratio}; size the variants to equal active parameters"
            )


def format_plan(plan: AblationPlan) -> str:
    """The runs a plan makes: what each runs, what it takes from an earlier run, which arms read it."""
    lines = [f"{len(plan.runs)} runs for {len(plan.arms)} arms of {len(plan.specs)} ablation(s)"]
    for index, run in enumerate(plan.runs):
        stages = [s for s in run.config.stages if s not in run.shared]
        taken = f"; takes {', '.join(run.shared)} from run {run.source + 1}" if run.source is not None else ""
        arms = ", ".join(f"{a}/{v}" for a, v in run.arms)
        lines.append(f"  run {index + 1} {run.config.run.name}: runs {', '.join(stages)}{taken}; read by {arms}")
    return "\n".join(lines)


# -- running


def run_ablations(
    specs: Sequence[AblationSpec],
    registry: Any,
    hooks: Any,
    *,
    name: str | None = None,
    registry_dir: str | Path | None = None,
    overrides: Sequence[str] = (),
    show_progress: bool = True,
    out_dir: Path | None = None,
    announce: Callable[[str], None] | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """Plan, run every planned run once, and compare each ablation's variants with its baseline.

    Returns ``{"name", "ablations": [one result per spec], "runs": [run dirs]}``; writes each
    ablation's JSON and markdown, and with ``name`` the list's, into ``out_dir`` (default: the
    folder the runs are in). With ``resume`` a planned run that an earlier call left in that
    folder (same name, same resolved config) is taken up where it stopped, as ``codemoe run
    --resume`` does, instead of started anew: finished runs are read, not run again.
    """
    plan = plan_ablations(specs, registry, registry_dir=registry_dir, overrides=overrides, out_dir=out_dir)
    contexts: list[Any] = []
    described = format_plan(plan).splitlines()[1:]
    for index, run in enumerate(plan.runs):
        if announce is not None:
            announce(described[index].strip())
        contexts.append(_run(run, contexts, registry, hooks, show_progress, resume))
    folder = Path(out_dir) if out_dir is not None else contexts[0].run_dir.parent
    results = [_compare(spec, plan, contexts) for spec in plan.specs]
    for result in results:
        _write(folder, result["name"], result, [result])
    suite = {"name": name or results[0]["name"], "ablations": results, "runs": [str(c.run_dir) for c in contexts]}
    if name is not None:
        _write(folder, name, suite, results)
    return suite


def run_ablation(
    spec: AblationSpec,
    registry: Any,
    hooks: Any,
    *,
    registry_dir: str | Path | None = None,
    show_progress: bool = True,
    out_dir: Path | None = None,
) -> dict[str, Any]:
    """Run one ablation (see :func:`run_ablations`) and return its result."""
    suite = run_ablations([spec], registry, hooks, registry_dir=registry_dir, show_progress=show_progress, out_dir=out_dir)
    return suite["ablations"][0]


def _run(run: PlannedRun, done: list[Any], registry: Any, hooks: Any, show_progress: bool, resume: bool) -> Any:
    """Run the pipeline; shared stages first recorded as finished with the source run's results."""
    run_dir = _earlier_run(run) if resume else None
    if run_dir is None and run.source is not None:
        source = done[run.source]
        run_dir = create_run_dir(run.config)
        finished = {s: {**source.results[s], "shared_from": source.results[s].get("shared_from", str(source.run_dir))}
                    for s in run.shared}
        (run_dir / "state.json").write_text(json.dumps({"finished": finished}, indent=2, default=str))
    return run_pipeline(run.config, registry, hooks, run_dir=run_dir, show_progress=show_progress)


def _earlier_run(run: PlannedRun) -> Path | None:
    """The newest run directory of this run's name in run.dir whose saved config is this run's."""
    key = _fingerprint(OmegaConf.to_container(run.config, resolve=True))
    folder = Path(run.config.run.dir).resolve()
    for run_dir in sorted(folder.glob(f"{run.config.run.name}-*"), reverse=True):
        saved = run_dir / "config.yaml"  # written before the first stage starts
        if saved.is_file() and _fingerprint(OmegaConf.to_container(OmegaConf.load(saved), resolve=True)) == key:
            return run_dir
    return None


def _compare(spec: AblationSpec, plan: AblationPlan, contexts: list[Any]) -> dict[str, Any]:
    stage_of = {name: plan.arms[(spec.name, name)][1] for name in spec.variants}
    seeded = {name: [_arm_result(spec, name, index, stage_of[name], contexts)
                     for index in plan.seed_runs.get((spec.name, name), [plan.arms[(spec.name, name)][0]])]
              for name in spec.variants}
    arms = {name: results[0] for name, results in seeded.items()}
    base = arms[spec.baseline]
    per_task = ({name: [per_task_pass(r["summary"], spec.k) for r in results] for name, results in seeded.items()}
                if spec.seeds else {})  # read only where the comparison is over runs
    table: dict[str, Any] = {}
    for name, arm in arms.items():
        row = {key: arm[key] for key in ("run_dir", "eval_stage", *_PARAM_KEYS) if key in arm}
        row["tasks"], row["samples"] = arm["summary"]["tasks"], arm["summary"]["samples"]
        if spec.seeds:  # over the runs and the tasks together
            row[f"pass@{spec.k}"] = bootstrap_over_runs(per_task[name]).as_dict()
            row["seeds"] = [{"seed": seed, "run_dir": r["run_dir"], f"pass@{spec.k}": sum(t.values()) / len(t)}
                            for seed, r, t in zip(spec.seeds, seeded[name], per_task[name], strict=True)]
            if name != spec.baseline:
                row["vs_baseline"] = improvement_over_runs(per_task[spec.baseline], per_task[name]).as_dict()
        else:
            row[f"pass@{spec.k}"] = arm["summary"]["overall"][f"pass@{spec.k}"]
            if name != spec.baseline:
                row["vs_baseline"] = compare_summaries(base["summary"], arm["summary"], k=spec.k).as_dict()
        agent, base_agent = arm["summary"].get("agent"), base["summary"].get("agent")
        if agent and base_agent:  # agent evaluations: format errors move where the resolve rate may not
            row["format_errors"] = agent["metrics"]["format_errors"]
            if name != spec.baseline:
                row["format_errors_vs_baseline"] = compare_agent(base_agent, agent)["metrics"]["format_errors"]["absolute"]
        table[name] = row
    _check_ratio(spec, {n: r["active_parameters"] for n, r in table.items() if "active_parameters" in r})
    return {"name": spec.name, "pipeline": spec.pipeline, "baseline": spec.baseline, "k": spec.k,
            "share": list(spec.share), "variants": table}


def _arm_result(spec: AblationSpec, name: str, run_index: int, eval_stage: str, contexts: list[Any]) -> dict[str, Any]:
    ctx = contexts[run_index]
    evals = eval_stages(ctx.run_dir, ctx.results)
    if not evals:
        raise ConfigError(f"ablation '{spec.name}', variant '{name}': the pipeline has no eval stage")
    stage = eval_stage or list(evals)[-1]
    if stage not in evals:
        raise ConfigError(f"ablation variant '{name}': no eval stage '{stage}'; eval stages: {', '.join(evals)}")
    return {
        "run_dir": str(ctx.run_dir),
        "eval_stage": stage,
        "summary": load_summary(Path(evals[stage]["summary"])),
        **_parameters(ctx.results),
    }


def _parameters(results: dict[str, Any]) -> dict[str, int]:
    """Total and active parameters: as a stage returned them, else counted from the spec saved in
    the first checkpoint's config.json (on the meta device, no memory)."""
    found: dict[str, int] = {}
    for result in results.values():
        if isinstance(result, dict):
            for key in _PARAM_KEYS:
                if isinstance(result.get(key), int):
                    found.setdefault(key, result[key])
    if found:
        return found
    for result in results.values():
        config_file = Path(str(result.get("checkpoint", ""))) / "config.json" if isinstance(result, dict) else None
        if config_file is not None and config_file.is_file():
            config = json.loads(config_file.read_text())
            if "codemoe" in config:
                from codemoe.core.models import count_parameters

                count = count_parameters(config["codemoe"], vocab_size=config.get("vocab_size"))
                return {"total_parameters": count.total, "active_parameters": count.active}
    return {}


def _write(folder: Path, name: str, document: dict[str, Any], results: list[dict[str, Any]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"ablation-{name}.json").write_text(json.dumps(document, indent=2))
    (folder / f"ablation-{name}.md").write_text(ablation_markdown(results) + "\n")


# -- tables


def _ci(est: dict[str, float], signed: bool = False, suffix: str = "") -> str:
    """``41.5% [35.0, 48.0]``; ``n/a`` where the estimate is undefined (relative to a baseline of 0)."""

    def pct(x: float) -> str:
        return ("{:+.1f}" if signed else "{:.1f}").format(100 * x) if math.isfinite(x) else "n/a"

    if not math.isfinite(est["value"]):
        return "n/a"
    return f"{pct(est['value'])}{suffix} [{pct(est['low'])}, {pct(est['high'])}]"


def _num(est: dict[str, Any] | None, signed: bool = False) -> str:
    """``3.09 [2.90, 3.27]`` for a count per episode; empty where there is none."""
    if not est or est.get("value") is None:
        return ""
    form = "{:+.2f}" if signed else "{:.2f}"
    return f"{form.format(est['value'])} [{form.format(est['low'])}, {form.format(est['high'])}]"


def format_ablations(results: Sequence[dict[str, Any]]) -> str:
    """Every arm of the ablations as one text table: pass@k with its CI, the absolute (points) and
    relative difference to the ablation's baseline with CIs, episodes graded and parameters."""
    width = max(len(name) for r in results for name in r["variants"])
    lines = []
    for result in results:
        k = result["k"]
        lines.append(f"ablation {result['name']} (pipeline {result['pipeline']}, baseline {result['baseline']})")
        for name, row in result["variants"].items():
            params = " ".join(f"{p.split('_')[0]} {row[p]:,}" for p in _PARAM_KEYS if p in row)
            line = f"  {name:<{width}} pass@{k} {_ci(row[f'pass@{k}'], suffix='%')}"
            if "vs_baseline" in row:
                diff = row["vs_baseline"]
                line += f"  abs {_ci(diff['absolute'], True)}  rel {_ci(diff['relative'], True, '%')}"
            else:
                line += "  (baseline)"
            if row.get("format_errors"):
                line += f"  format errors/episode {_num(row['format_errors'])}"
                if row.get("format_errors_vs_baseline"):
                    line += f" ({_num(row['format_errors_vs_baseline'], True)})"
            runs = f"  {len(row['seeds'])} seeds" if row.get("seeds") else ""
            lines.append(f"{line}  {row['tasks']} tasks {row['samples']} samples{runs}  {params}".rstrip())
    return "\n".join(lines)


def format_ablation(result: dict[str, Any]) -> str:
    """One ablation as a text table (see :func:`format_ablations`)."""
    return format_ablations([result])


def ablation_markdown(results: Sequence[dict[str, Any]]) -> str:
    """Every arm of the ablations as one markdown table, for docs/performance.md."""
    k = {r["k"] for r in results}
    metric = f"pass@{k.pop()}" if len(k) == 1 else "pass@k"
    lines = [
        f"| ablation | arm | eval stage | {metric} % [95% CI] | vs baseline, points [95% CI] | "
        "vs baseline, relative % [95% CI] | format errors / episode [95% CI] | vs baseline [95% CI] | "
        "tasks | samples | active params | total params |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        for name, row in result["variants"].items():
            diff = row.get("vs_baseline")
            cells = [
                result["name"],
                name,
                row["eval_stage"],
                _ci(row[f"pass@{result['k']}"]),
                _ci(diff["absolute"], True) if diff else "baseline",
                _ci(diff["relative"], True) if diff else "",
                _num(row.get("format_errors")),
                _num(row.get("format_errors_vs_baseline"), True),
                str(row["tasks"]),
                str(row["samples"]) + (f" x {len(row['seeds'])} seeds" if row.get("seeds") else ""),
                *(f"{row[p]:,}" if p in row else "" for p in reversed(_PARAM_KEYS)),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
