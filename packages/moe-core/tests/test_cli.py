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


# -- a component's options, the resolved config, reproducing a run from its folder -------------------


def test_components_kind_name_prints_each_option_with_type_default_and_doc(capsys):
    assert main(["components", "router", "softmax_topk"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "top_k" in line)
    assert [cell.strip() for cell in row.strip("│ ").split("│")] == ["top_k", "int", "2", "experts per token"]


def test_components_kind_name_json_lists_nested_component_kinds(capsys):
    import json

    assert main(["components", "stage", "rl", "--json"]) == 0
    options = {o["name"]: o for o in json.loads(capsys.readouterr().out)["options"]}
    assert options["grad_clip"] == {"name": "grad_clip", "type": "float", "default": 1.0,
                                    "doc": "max global grad norm; 0 turns clipping off", "kind": None}
    assert options["engine"]["kind"] == "engine" and options["engine"]["default"] == {"name": "embedded"}
    assert options["timeout_s"]["default"] == 5.0 and options["timeout_s"]["doc"] == "sandbox limit per sample"


def test_components_unknown_name_lists_the_known_ones(capsys):
    assert main(["components", "router", "softmax_top"]) == 2
    text = " ".join(capsys.readouterr().err.split())
    assert "unknown router 'softmax_top' (did you mean 'softmax_topk'?)" in text
    assert "Valid router names:" in text and "sigmoid_bias" in text


def test_config_show_writes_out_every_default(registry_dir: Path, capsys):
    import yaml

    assert main(["--registry", str(registry_dir), "config", "show", "quickstart"]) == 0
    rl = yaml.safe_load(capsys.readouterr().out)["stages"]["rl"]
    assert rl["engine"]["name"] == "embedded" and rl["engine"]["max_batch_size"] == 256  # its own defaults too
    assert rl["executor"]["name"] == "local" and rl["grad_clip"] == 1.0 and rl["timeout_s"] == 5.0
    assert rl["algo"]["advantage"] == {"name": "grpo", **rl["algo"]["advantage"]}


def test_a_yaml_syntax_error_is_one_line_without_a_traceback(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("stages:\n  environment: {torch_threads: 0\n")
    result = codemoe("config", "show", str(bad), cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert " ".join(result.stderr.split()).startswith(f"error: {bad}:3:1: YAML syntax error:")


def test_a_run_saves_the_resolved_config_and_runs_again_from_it(tmp_path: Path, registry_dir: Path):
    first = codemoe("--registry", str(registry_dir), "run", "--no-progress", "smoke", "run.dir=out", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    (run_dir,) = (tmp_path / "out").iterdir()
    saved = (run_dir / "config.yaml").read_text()
    shown = codemoe("--registry", str(registry_dir), "config", "show", "smoke", "run.dir=out", cwd=tmp_path)
    assert saved == shown.stdout  # every default written out, as config show prints it
    again = codemoe("run", "--no-progress", str(run_dir / "config.yaml"), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    (second,) = set((tmp_path / "out").iterdir()) - {run_dir}
    assert (second / "config.yaml").read_text() == saved


class LongResult:
    """A stage whose result is longer than a terminal line (the end-of-run summary prints it whole)."""

    @hookimpl
    def codemoe_register_components(self, registry):
        registry.register("stage", "long_result", lambda **_: self)

    def run(self, ctx, stage):
        return {f"metric_{i:02d}": i for i in range(60)}


def test_the_end_of_run_summary_is_not_cut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys):
    import json

    import codemoe.core.cli as cli

    monkeypatch.setattr(cli, "build_plugin_manager", lambda: build_plugin_manager([("long", LongResult())]))
    monkeypatch.setenv("COLUMNS", "80")
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(f"run: {{dir: {tmp_path / 'out'}}}\nstages:\n  long: {{name: long_result}}\n")
    assert cli.main(["run", "--no-progress", str(pipeline)]) == 0
    summary = capsys.readouterr().err.replace("\n", "")
    assert json.dumps({f"metric_{i:02d}": i for i in range(60)}) in summary  # > 400 characters, all there
