"""The ``codemoe`` command line.

Built-in commands: ``plugins``, ``components [KIND [NAME]]`` (a component's options, with types,
defaults and docs), ``config show PIPELINE [k=v ...]`` (the resolved config, every default written
out) and ``run [PIPELINE] [k=v ...]``. Packages add their own (``serve``, ``sandbox``, ``eval`` ...) through
the ``codemoe_add_commands`` hook. Errors codemoe raises on purpose print as one message, exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from codemoe.core.config import compose, resolve_defaults, validate_pipeline
from codemoe.core.errors import CodemoeError
from codemoe.core.plugins import Hooks, build_plugin_manager, build_registry, plugin_infos
from codemoe.core.runs import run_pipeline
from omegaconf import OmegaConf
from rich.console import Console
from rich.table import Table

__all__ = ["main"]


def _cmd_plugins(args: argparse.Namespace) -> int:
    registry = build_registry(args.pm)
    infos = plugin_infos(args.pm, registry)
    if args.json:
        print(json.dumps([info.__dict__ for info in infos], indent=2))
        return 0
    table = Table(title="codemoe plugins")
    for column in ("plugin", "distribution", "version", "hooks", "components"):
        table.add_column(column, overflow="fold")
    for info in infos:
        table.add_row(info.name, info.distribution, info.version, "\n".join(info.hooks), "\n".join(info.components))
    Console().print(table)
    return 0


def _cmd_components(args: argparse.Namespace) -> int:
    registry = build_registry(args.pm)
    if args.kind and args.kind not in registry.kinds():
        registry.get(args.kind, "")  # raises with the list of known kinds
    if args.name:
        return _print_options(registry.get(args.kind, args.name), as_json=args.json)
    components = registry.components(args.kind)
    if args.json:
        rows = [{"kind": c.kind, "name": c.name, "plugin": c.plugin, "summary": c.summary} for c in components]
        print(json.dumps(rows, indent=2))
        return 0
    table = Table(title=f"codemoe components{' of kind ' + args.kind if args.kind else ''}")
    for column in ("kind", "name", "plugin", "summary"):
        table.add_column(column, overflow="fold")
    for c in components:
        table.add_row(c.kind, c.name, c.plugin, c.summary)
    Console().print(table)
    return 0


def _print_options(component, *, as_json: bool) -> int:
    options = component.options()
    if as_json:
        rows = [{"name": o.name, "type": o.type, "default": o.default, "doc": o.doc, "kind": o.kind} for o in options]
        print(json.dumps({"kind": component.kind, "name": component.name, "plugin": component.plugin,
                          "summary": component.summary, "options": rows}, indent=2, default=str))
        return 0
    table = Table(title=f"{component.kind} {component.name} ({component.plugin}): {component.summary}")
    for column in ("option", "type", "default", "doc"):
        table.add_column(column, overflow="fold")
    for o in options:
        doc = o.doc or (f"a {o.kind} spec: codemoe components {o.kind}" if o.kind else "")
        table.add_row(o.name, o.type, json.dumps(o.default, default=str), doc)
    if not options:
        table.add_row("-", "-", "-", "this component takes no options")
    Console(width=max(Console().width, 120)).print(table)
    return 0


def _compose_and_validate(args: argparse.Namespace):
    """The pipeline composed, validated, and resolved: every component's defaults written out."""
    registry = build_registry(args.pm)
    registry_dir = Path(args.registry) if args.registry else None
    cfg = compose(args.pipeline, args.overrides, registry_dir=registry_dir, preset_dirs=registry.preset_dirs)
    validate_pipeline(cfg, registry)
    return resolve_defaults(cfg, registry), registry


def _cmd_config_show(args: argparse.Namespace) -> int:
    cfg, _ = _compose_and_validate(args)
    print(OmegaConf.to_yaml(cfg), end="")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    if args.pipeline and "=" in args.pipeline:  # `codemoe run a=1`: the default pipeline, overridden
        args.overrides.insert(0, args.pipeline)
        args.pipeline = None
    run_dir = Path(args.resume) if args.resume else None
    if run_dir is not None and args.pipeline is None and not args.overrides:
        cfg_path = run_dir / "config.yaml"
        if not cfg_path.is_file():
            raise CodemoeError(f"cannot resume: {cfg_path} does not exist")
        args.pipeline = str(cfg_path)
    cfg, registry = _compose_and_validate(args)
    console = Console(stderr=True)
    console.print(f"[bold]codemoe run[/bold] {cfg.run.name}")
    ctx = run_pipeline(cfg, registry, Hooks(args.pm), run_dir=run_dir, show_progress=not args.no_progress)
    console.print(f"run directory: {ctx.run_dir}")
    for stage_id, result in ctx.results.items():
        console.print(f"  {stage_id}: {json.dumps(result, default=str)}", soft_wrap=True, highlight=False,
                      markup=False)
    return 0


def build_parser(pm) -> argparse.ArgumentParser:
    """The argument parser: built-in commands plus those plugins add."""
    parser = argparse.ArgumentParser(prog="codemoe", description="Train MoE coding agents with RL on verifiable rewards.")
    parser.add_argument(
        "--registry",
        help="overlay folder searched before the presets the packages ship (default: $CODEMOE_REGISTRY, or "
        "registry/ above the working directory)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("plugins", help="list plugins, their distributions, hooks and components")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(handler=_cmd_plugins)

    p = sub.add_parser("components", help="list registered components, or one component's options")
    p.add_argument("kind", nargs="?", help="a component kind (router, stage, reward, ...)")
    p.add_argument("name", nargs="?", help="a component of that kind: print its options, types, defaults, docs")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(handler=_cmd_components)

    p = sub.add_parser("config", help="inspect composed pipeline configs")
    config_sub = p.add_subparsers(dest="config_command", metavar="SUBCOMMAND", required=True)
    show = config_sub.add_parser("show", help="print the resolved config of a pipeline")
    show.add_argument("pipeline", help="pipeline name (shipped or in the overlay's pipelines/), or a YAML path")
    show.add_argument("overrides", nargs="*", help="key=value overrides")
    show.set_defaults(handler=_cmd_config_show)

    p = sub.add_parser("run", help="run a pipeline's stages in order")
    p.add_argument("pipeline", nargs="?", help="pipeline name or YAML path (default: 'quickstart')")
    p.add_argument("overrides", nargs="*", help="key=value overrides")
    p.add_argument("--resume", metavar="RUN_DIR", help="resume a run: finished stages are skipped")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(handler=_cmd_run)

    pm.hook.codemoe_add_commands(subparsers=sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``codemoe`` script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        pm = build_plugin_manager()
        parser = build_parser(pm)
        args = parser.parse_args(argv)
        if not getattr(args, "handler", None):
            parser.print_help()
            return 0
        args.pm = pm
        return int(args.handler(args) or 0)
    except CodemoeError as exc:
        Console(stderr=True).print(f"[bold red]error:[/bold red] {exc}", highlight=False, markup=True)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
