import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from codemoe.core import PluginError, RegistryError, build_plugin_manager, build_registry, hookimpl, plugin_infos


class StageOnly:
    @hookimpl
    def codemoe_register_components(self, registry):
        registry.register("stage", "noop", lambda: None, summary="does nothing")


class Typo:
    @hookimpl
    def codemoe_after_stgae(self, ctx, stage, result):
        pass


def test_components_record_the_plugin_that_registered_them():
    pm = build_plugin_manager([("mine", StageOnly())], entry_points=False)
    registry = build_registry(pm)
    assert registry.get("stage", "noop").plugin == "mine"
    assert [i.components for i in plugin_infos(pm, registry) if i.name == "mine"] == [["stage:noop"]]


def test_misspelled_hook_fails_at_start_up_naming_plugin_and_hook():
    with pytest.raises(PluginError) as err:
        build_plugin_manager([("typo-plugin", Typo())], entry_points=False)
    message = str(err.value)
    assert "plugin 'typo-plugin'" in message
    assert "codemoe_after_stgae" in message and "did you mean 'codemoe_after_stage'" in message


def test_two_plugins_registering_the_same_component_are_both_named():
    pm = build_plugin_manager([("first", StageOnly()), ("second", StageOnly())], entry_points=False)
    with pytest.raises(RegistryError, match="by plugin 'first' and by plugin 'second'"):
        build_registry(pm)


def test_manager_is_built_by_a_function_not_at_import():
    code = "import codemoe.core, pluggy, gc; print(sum(isinstance(o, pluggy.PluginManager) for o in gc.get_objects()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0"


def _fake_distribution(root: Path, module_body: str) -> None:
    """A plugin installed the way pip would: a module plus a .dist-info with an entry point."""
    (root / "typo_plugin.py").write_text(textwrap.dedent(module_body))
    info = root / "typo_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: typo-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[codemoe]\ntypo = typo_plugin\n")


def _codemoe(args: list[str], pythonpath: Path, **env: str) -> subprocess.CompletedProcess:
    import os

    environ = {**os.environ, "PYTHONPATH": str(pythonpath), **env}
    return subprocess.run([sys.executable, "-m", "codemoe.core", *args], capture_output=True, text=True, env=environ)


def test_installed_plugin_with_misspelled_hook_stops_the_cli(tmp_path: Path):
    _fake_distribution(
        tmp_path,
        """
        import pluggy
        hookimpl = pluggy.HookimplMarker("codemoe")

        @hookimpl
        def codemoe_register_component(registry):
            pass
        """,
    )
    result = _codemoe(["plugins"], tmp_path)
    assert result.returncode == 2
    assert "plugin 'typo' implements unknown hook 'codemoe_register_component'" in " ".join(result.stderr.split())
    blocked = _codemoe(["plugins", "--json"], tmp_path, CODEMOE_DISABLE_PLUGINS="typo")
    assert blocked.returncode == 0 and '"typo"' not in blocked.stdout


def test_plugin_that_fails_to_import_is_named(tmp_path: Path):
    _fake_distribution(tmp_path, "raise ImportError('needs libfoo')\n")
    result = _codemoe(["plugins"], tmp_path)
    text = " ".join(result.stderr.split())
    assert result.returncode == 2
    assert "plugin 'typo'" in text and "typo-plugin" in text and "needs libfoo" in text
    assert "CODEMOE_DISABLE_PLUGINS=typo" in text


def test_disable_env_blocks_plugins_by_name(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("CODEMOE_DISABLE_PLUGINS", "mine, other")
    pm = build_plugin_manager([("mine", StageOnly())])
    names = {info.name for info in plugin_infos(pm)}
    assert "mine" not in names and "core" in names
    assert ("stage", "noop") not in build_registry(pm)
