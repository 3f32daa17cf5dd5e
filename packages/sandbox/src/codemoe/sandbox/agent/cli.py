"""``codemoe tasks validate PATH``: check task folders, a suite, or a SWE-bench JSONL file."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["add_tasks_command", "cmd_validate"]


def add_tasks_command(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``tasks`` and its ``validate`` sub-command to an ``argparse`` sub-parsers action."""
    parser = subparsers.add_parser("tasks", help="repository-level agent tasks (validate)")
    sub = parser.add_subparsers(dest="tasks_command", metavar="SUBCOMMAND", required=True)
    p = sub.add_parser("validate", help="check that every task's gold patch, fail/pass lists and hidden tests hold")
    p.add_argument("path", help="a task folder, a folder of task folders, or a SWE-bench .jsonl file")
    p.add_argument("--repos", help="folder of local git repositories for a .jsonl file (default: <jsonl dir>/repos)")
    p.add_argument("--workers", type=int, default=0, help="sandbox workers (default: one per CPU)")
    p.add_argument("--site-packages", metavar="NAMES",
                   help="comma-separated distributions the sandbox shows of site-packages (default: pytest,pip,numpy); "
                        "name the build backend a setup command installs with, e.g. pytest,pip,setuptools")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(handler=cmd_validate)
    return parser


def cmd_validate(args: argparse.Namespace) -> int:
    """Validate the tasks at ``args.path``; exit code 1 when any task is invalid."""
    from pathlib import Path

    from codemoe.sandbox.agent.tasks import TaskFormatError, load_swebench_jsonl, load_tasks
    from codemoe.sandbox.agent.validate import validate_tasks
    from codemoe.sandbox.local import LocalExecutor

    try:
        path = Path(args.path)
        tasks = load_swebench_jsonl(path, args.repos) if args.repos else load_tasks(path)
    except TaskFormatError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    options: dict[str, Any] = {"workers": args.workers} if args.workers else {}
    if args.site_packages:
        options["site_packages"] = [name.strip() for name in args.site_packages.split(",") if name.strip()]
    with LocalExecutor(**options) as executor:
        reports = validate_tasks(tasks, executor)
    if args.json:
        print(json.dumps([{"task": r.task_id, "type": r.type, "ok": r.ok, "problems": r.problems, "warnings": r.warnings}
                          for r in reports], indent=2))
    else:
        for r in reports:
            print(f"{'ok  ' if r.ok else 'FAIL'} {r.task_id} ({r.type}, {r.duration_s:.2f}s)")
            for problem in r.problems:
                print(f"       - {problem}")
            for warning in r.warnings:
                print(f"       warning: {warning}")
        print(f"{sum(r.ok for r in reports)}/{len(reports)} tasks valid")
    return 0 if all(r.ok for r in reports) else 1
