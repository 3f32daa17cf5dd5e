"""``codemoe sandbox run|doctor`` and ``python -m codemoe.sandbox``, as a user types them."""

from __future__ import annotations

import json
import subprocess
import sys

from codemoe.sandbox import plugin
from codemoe.sandbox.cli import SUBCOMMANDS, main


def test_run_a_file_prints_the_result_as_json(tmp_path, capsys):
    script = tmp_path / "hello.py"
    script.write_text("print('hello from the sandbox')\n")
    assert main(["run", str(script), "--timeout", "5"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["status"] == "passed" and result["stdout"] == "hello from the sandbox\n"


def test_run_a_directory_with_a_runner_and_a_timeout(tmp_path, capsys):
    (tmp_path / "test_x.py").write_text("def test_x():\n    assert 1 + 1 == 2\n")
    assert main(["run", str(tmp_path), "--runner", "pytest"]) == 0
    assert json.loads(capsys.readouterr().out)["tests"] == {"test_x.py::test_x": "passed"}
    (tmp_path / "loop.py").write_text("while True:\n    pass\n")
    assert main(["run", str(tmp_path), "--cmd", "python loop.py", "--timeout", "1"]) == 1
    assert json.loads(capsys.readouterr().out)["status"] == "timeout"


def test_module_entry_point_runs_doctor_without_codemoe_core():
    # the sandbox CLI must not need codemoe.core: block its import and run doctor
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'codemoe.core' or name.startswith('codemoe.core.') or name == 'torch':\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "sys.argv = ['codemoe.sandbox', 'doctor', '--json']\n"
        "import runpy\n"
        "runpy.run_module('codemoe.sandbox', run_name='__main__')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    checks = {c["name"]: c for c in json.loads(done.stdout)}
    assert checks["time limits"]["active"] is True
    assert checks["end-to-end check"]["active"] is True
    assert all(isinstance(c["detail"], str) and c["detail"] for c in checks.values())


class _Registry:
    def __init__(self):
        self.items = {}

    def register(self, kind, name, factory, config=None, *, summary=""):
        self.items[(kind, name)] = (factory, config, summary)


def test_plugin_registers_the_executors_by_import_path():
    registry = _Registry()
    plugin.codemoe_register_components(registry)
    assert {name for kind, name in registry.items if kind == "executor"} == {"local", "remote"}
    factory, config, _ = registry.items[("executor", "local")]
    assert factory == "codemoe.sandbox.local:build_local_executor"
    assert config == "codemoe.sandbox.local:LocalExecutorConfig"


def test_subcommands_are_a_visible_list_others_extend():
    names = [add.__name__ for add in SUBCOMMANDS]
    assert names[:3] == ["_add_run", "_add_doctor", "_add_serve"]
