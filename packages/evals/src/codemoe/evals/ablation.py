"""The ablation runner: run variants of one pipeline and compare each with a baseline variant.

The seeds ask which part a gain came from: swap the MoE for a dense model of equal *active*
parameters, or evaluate without the RL stage. An ablation spec (YAML) names the pipeline, the
variants (each a list of ``key=value`` overrides and the eval stage whose result counts), and the
baseline variant::

    name: rl-vs-sft
    pipeline: quickstart
    overrides: [run.seed=0]          # applied to every variant
    baseline: without_rl
    variants:
      with_rl: {eval_stage: eval_rl}
      without_rl: {eval_stage: eval_sft}

Each variant runs as its own run directory (variants with the same overrides, like the two above,
share one run and differ only in the eval stage read); ``ablation-<name>.json`` next to them holds every variant's
pass@k and its improvement over the baseline, with CIs. Parameter counts that stages return
(``total_parameters``, ``active_parameters``) are collected so "equal active parameters" is checked,
not assumed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codemoe.core.config import compose
from codemoe.core.errors import ConfigError
from codemoe.core.runs import run_pipeline
from codemoe.evals.compare import compare_summaries, eval_stages
from codemoe.evals.summary import load_summary
from omegaconf import OmegaConf

__all__ = ["ABLATIONS_DIR", "AblationSpec", "Variant", "format_ablation", "load_ablation", "run_ablation"]

_PARAM_KEYS = ("total_parameters", "active_parameters")
ABLATIONS_DIR = Path(__file__).parent / "ablations"  # ready specs: rl-vs-sft, moe-vs-dense


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


def load_ablation(path: Path | str) -> AblationSpec:
    """Read and check an ablation spec: a YAML path, or the name of one in :data:`ABLATIONS_DIR`."""
    path = Path(path)
    if not path.is_file():
        named = ABLATIONS_DIR / f"{path.name}.yaml"
        if not named.is_file():
            known = sorted(p.stem for p in ABLATIONS_DIR.glob("*.yaml"))
            raise ConfigError(f"no ablation spec {path}; give a YAML path or one of: {', '.join(known)}")
        path = named
    data = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: an ablation spec is a mapping")
    unknown = set(data) - {f for f in AblationSpec.__dataclass_fields__}
    if unknown:
        raise ConfigError(f"{path}: unknown keys {sorted(unknown)}; known: {sorted(AblationSpec.__dataclass_fields__)}")
    variants = {str(n): Variant(**(v or {})) for n, v in (data.get("variants") or {}).items()}
    if len(variants) < 2:
        raise ConfigError(f"{path}: an ablation needs at least two variants")
    spec = AblationSpec(**{**data, "name": str(data.get("name", Path(path).stem)), "variants": variants})
    if spec.baseline not in variants:
        raise ConfigError(f"{path}: baseline '{spec.baseline}' is not a variant; variants: {', '.join(variants)}")
    return spec


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


def run_ablation(
    spec: AblationSpec,
    registry: Any,
    hooks: Any,
    *,
    registry_dir: str | Path | None = None,
    show_progress: bool = True,
    out_dir: Path | None = None,
) -> dict[str, Any]:
    """Run every variant, then compare each with the baseline; writes ``ablation.json``."""
    arms: dict[str, dict[str, Any]] = {}
    runs: dict[tuple[str, ...], Any] = {}  # variants with the same overrides share one run
    for name, variant in spec.variants.items():
        overrides = (*spec.overrides, *variant.overrides)
        if overrides not in runs:
            named = [*overrides, f"run.name={spec.name}-{name}"]
            cfg = compose(spec.pipeline, named, registry_dir=Path(registry_dir) if registry_dir else None)
            if out_dir is not None:
                cfg.run.dir = str(out_dir)
            runs[overrides] = run_pipeline(cfg, registry, hooks, show_progress=show_progress)
        ctx = runs[overrides]
        evals = eval_stages(ctx.run_dir, ctx.results)
        if not evals:
            raise ConfigError(f"ablation '{spec.name}', variant '{name}': the pipeline has no eval stage")
        stage = variant.eval_stage or list(evals)[-1]
        if stage not in evals:
            raise ConfigError(f"ablation variant '{name}': no eval stage '{stage}'; eval stages: {', '.join(evals)}")
        arms[name] = {
            "run_dir": str(ctx.run_dir),
            "eval_stage": stage,
            "summary": load_summary(Path(evals[stage]["summary"])),
            **_parameters(ctx.results),
        }
    base = arms[spec.baseline]
    table: dict[str, Any] = {}
    for name, arm in arms.items():
        row = {k: arm[k] for k in ("run_dir", "eval_stage", *_PARAM_KEYS) if k in arm}
        row[f"pass@{spec.k}"] = arm["summary"]["overall"][f"pass@{spec.k}"]
        if name != spec.baseline:
            row["vs_baseline"] = compare_summaries(base["summary"], arm["summary"], k=spec.k).as_dict()
        table[name] = row
    _check_active(spec, table)
    result = {"name": spec.name, "pipeline": spec.pipeline, "baseline": spec.baseline, "k": spec.k, "variants": table}
    folder = Path(out_dir) if out_dir is not None else Path(base["run_dir"]).parent
    (folder / f"ablation-{spec.name}.json").write_text(json.dumps(result, indent=2))
    return result


def _check_active(spec: AblationSpec, table: dict[str, Any]) -> None:
    active = {n: r["active_parameters"] for n, r in table.items() if "active_parameters" in r}
    if spec.max_active_ratio > 0 and len(active) >= 2:
        ratio = max(active.values()) / max(1, min(active.values()))
        if ratio > spec.max_active_ratio:
            raise ConfigError(
                f"ablation '{spec.name}': active parameters differ by {ratio:.2f}x ({active}), more than "
                f"max_active_ratio={spec.max_active_ratio}; size the variants to equal active parameters"
            )


def format_ablation(result: dict[str, Any]) -> str:
    """The ablation as a small text table."""
    k = result["k"]
    lines = [f"ablation {result['name']} (pipeline {result['pipeline']}, baseline {result['baseline']})"]
    for name, row in result["variants"].items():
        est = row[f"pass@{k}"]
        params = " ".join(f"{p}={row[p]:,}" for p in _PARAM_KEYS if p in row)
        line = f"  {name:<16} pass@{k} {100 * est['value']:5.1f}% [{100 * est['low']:.1f}, {100 * est['high']:.1f}] {params}"
        if "vs_baseline" in row:
            a, r = row["vs_baseline"]["absolute"], row["vs_baseline"]["relative"]
            line += (
                f"  abs {100 * a['value']:+.1f} [{100 * a['low']:+.1f}, {100 * a['high']:+.1f}]"
                f"  rel {100 * r['value']:+.1f}% [{100 * r['low']:+.1f}, {100 * r['high']:+.1f}]"
            )
        lines.append(line)
    return "\n".join(lines)
