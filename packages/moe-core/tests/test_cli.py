import os
import shutil
import subprocess
from pathlib import Path

import pytest
from codemoe.core import build_plugin_manager, hookimpl
from codemoe.core.cli import build_parser, main


class Greeter:
    @hookimpl
    def codemoe_add_commands(self, subparsers):
        p = subparsers.add_parser("greet", help="say hello")
        p.add_argument("who")
        p.set_defaults(handler=lambda args: print(f"hello {args.who}") or 3)


def test_plugins_contribute_subcommands(capsys):
    pm = build_plugin_manager([("greeter", Greeter())], entry_points=False)
    args = build_parser(pm).parse_args(["greet", "world"])
    assert args.handler(args) == 3
    assert capsys.readouterr().out == "hello world\n"


def codemoe(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    exe = shutil.which("codemoe") or str(Path(os.sys.executable).parent / "codemoe")
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("CODEMOE_DISABLE_PLUGINS", None)
    return subprocess.run([exe, *args], capture_output=True, text=True, cwd=cwd, env=env)


def test_components_rejects_unknown_kinds():
    bad = codemoe("components", "stagee")
    assert bad.returncode == 2 and "did you mean 'stage'" in " ".join(bad.stderr.split())


def test_config_show_applies_an_override(registry_dir: Path):
    result = codemoe("--registry", str(registry_dir), "config", "show", "smoke", "run.seed=41")
    assert result.returncode == 0, result.stderr
    assert "seed: 41" in result.stdout


def test_misspelled_component_prints_the_valid_choices(tmp_path: Path, registry_dir: Path):
    pipeline = tmp_path / "typo.yaml"
    pipeline.write_text("stages:\n  env: {name: environmnt}\n")
    result = codemoe("--registry", str(registry_dir), "config", "show", str(pipeline))
    text = " ".join(result.stderr.split())
    assert result.returncode == 2
    assert "unknown stage 'environmnt' at 'stages.env' (did you mean 'environment'?)" in text
    assert "Valid stage names:" in text and "environment" in text


def test_run_writes_a_run_directory(tmp_path: Path, registry_dir: Path):
    result = codemoe("--registry", str(registry_dir), "run", "--no-progress", "smoke", "run.dir=out", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (run_dir,) = (tmp_path / "out").iterdir()
    assert {"config.yaml", "run.log", "metrics.jsonl", "state.json"} <= {p.name for p in run_dir.iterdir()}


def test_main_returns_2_with_a_message_for_bad_overrides(capsys, registry_dir: Path):
    assert main(["--registry", str(registry_dir), "config", "show", "smoke", "run.sed=1"]) == 2
    assert "did you mean 'seed'" in " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize("argv", [[], ["--help"]])
def test_help_lists_builtin_commands(argv, capsys):
    code = 0
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    assert code == 0
    out = capsys.readouterr().out
    assert all(cmd in out for cmd in ("plugins", "components", "config", "run"))
