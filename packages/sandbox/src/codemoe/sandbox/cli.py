"""``codemoe sandbox ...``: run one execution, check the protections, serve executions over HTTP.

The same parser runs as ``python -m codemoe.sandbox ...`` when codemoe-core is not installed.
Sub-commands are added by the functions in :data:`SUBCOMMANDS`; other parts of the package append
their own adder there.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from codemoe.sandbox.rewards.hack_report import add_hack_report_command

__all__ = ["SUBCOMMANDS", "add_sandbox_command", "main"]


def _add_run(sub: Any) -> None:
    p = sub.add_parser("run", help="run one file or directory in the sandbox; print the result as JSON")
    p.add_argument("path", help="a file (run with python unless --cmd) or a directory (all its files)")
    p.add_argument("--cmd", help="command line to run in the work dir, e.g. 'python main.py'")
    p.add_argument("--runner", choices=["pytest", "asserts"], help="use a test runner instead of --cmd")
    p.add_argument("--timeout", type=float, default=10.0, help="wall-clock limit in seconds (default 10)")
    p.add_argument("--memory", type=int, default=1024, help="memory limit in MiB (default 1024)")
    p.add_argument("--network", action="store_true", help="keep the host network (default: loopback only)")
    p.add_argument("--stdin", help="file whose content is fed to the program's standard input")
    p.set_defaults(handler=_cmd_run)


def _add_doctor(sub: Any) -> None:
    p = sub.add_parser("doctor", help="report which protections are active on this machine, and why not")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(handler=_cmd_doctor)


def _add_serve(sub: Any) -> None:
    p = sub.add_parser("serve", help="serve executions over HTTP (run, batch, health)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 picks a free one)")
    p.add_argument("--token", help="bearer token clients must send (default: $CODEMOE_SANDBOX_TOKEN)")
    p.add_argument("--workers", type=int, default=0, help="warm workers (default: one per CPU)")
    p.add_argument("--max-request-mb", type=float, default=32.0, help="largest request body (default 32)")
    p.set_defaults(handler=_cmd_serve)


# Sub-command adders of ``codemoe sandbox``; each takes the sub-parsers action.
SUBCOMMANDS: list[Callable[[Any], None]] = [
    _add_run,
    _add_doctor,
    _add_serve,
    add_hack_report_command,
]


def add_sandbox_command(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``sandbox`` and its sub-commands to an ``argparse`` sub-parsers action."""
    parser = subparsers.add_parser("sandbox", help="isolated execution of untrusted code (run, doctor, serve)")
    sub = parser.add_subparsers(dest="sandbox_command", metavar="SUBCOMMAND", required=True)
    for add in SUBCOMMANDS:
        add(sub)
    return parser


def _cmd_run(args: argparse.Namespace) -> int:
    from codemoe.sandbox.api import ExecutionRequest, Limits
    from codemoe.sandbox.local import LocalExecutor

    request = ExecutionRequest(
        files=_read_files(Path(args.path)),
        command=_command(args),
        runner=args.runner,
        limits=Limits(timeout_s=args.timeout, cpu_s=args.timeout, memory_mb=args.memory, network=args.network),
        stdin=Path(args.stdin).read_bytes() if args.stdin else None,
        id=Path(args.path).name,
    )
    with LocalExecutor(workers=1) as executor:
        result = executor.run(request)
    print(json.dumps(result.to_dict(), indent=2))
    return 0 if result.passed else 1


def _read_files(path: Path) -> dict[str, str | bytes]:
    if path.is_file():
        return {path.name: path.read_bytes()}
    if not path.is_dir():
        raise SystemExit(f"error: {path} is neither a file nor a directory")
    skipped = {"__pycache__", ".git", ".venv", ".pytest_cache"}
    return {
        str(p.relative_to(path)): p.read_bytes()
        for p in sorted(path.rglob("*"))
        if p.is_file() and not skipped & set(p.relative_to(path).parts)
    }


def _command(args: argparse.Namespace) -> list[str] | None:
    import shlex

    if args.cmd:
        return shlex.split(args.cmd)
    if args.runner:
        return None
    path = Path(args.path)
    if path.is_file():
        return ["python", path.name]
    raise SystemExit("error: a directory needs --cmd or --runner")


def _cmd_doctor(args: argparse.Namespace) -> int:
    from codemoe.sandbox.doctor import diagnose, format_report

    checks = diagnose()
    if args.json:
        print(json.dumps([c.to_dict() for c in checks], indent=2))
    else:
        print(format_report(checks))
    end_to_end = next(c for c in checks if c.name == "end-to-end check")
    return 0 if end_to_end.active else 1


def _cmd_serve(args: argparse.Namespace) -> int:
    from codemoe.sandbox.service import serve_forever

    return serve_forever(
        host=args.host,
        port=args.port,
        token=args.token,
        workers=args.workers,
        max_request_bytes=int(args.max_request_mb * 1024 * 1024),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m codemoe.sandbox``: the ``codemoe sandbox`` command without codemoe-core."""
    parser = argparse.ArgumentParser(prog="python -m codemoe.sandbox",
                                     description="Isolated execution of untrusted code (codemoe sandbox).")
    sub = parser.add_subparsers(dest="sandbox_command", metavar="SUBCOMMAND", required=True)
    for add in SUBCOMMANDS:
        add(sub)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    return int(args.handler(args) or 0)
