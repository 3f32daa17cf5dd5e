"""The sandbox's reward recipes built by codemoe-core's registry, as the RL stage builds them."""

from __future__ import annotations

import pytest
from codemoe.sandbox.rewards import RewardInput
from codemoe.sandbox.rewards.presets import load_preset

TESTS = "from m import square\n\n\ndef test_three():\n    assert square(3) == 9\n"


@pytest.fixture
def solved() -> RewardInput:
    """Every test passes after the change, two of them newly, in 7 steps."""
    return RewardInput(
        visible_before={"t::a": "passed", "t::b": "failed", "t::c": "failed"},
        visible_after={"t::a": "passed", "t::b": "passed", "t::c": "passed"},
        files_before={"m.py": "def square(x):\n    raise NotImplementedError\n", "test_m.py": TESTS},
        files_after={"m.py": "def square(x):\n    return x * x\n", "test_m.py": TESTS},
        steps=7,
    )


def test_presets_build_through_the_codemoe_registry(registry, solved):
    """The RL trainer's call: ``registry.build("reward", spec)`` with the composed preset."""
    recipe = registry.build("reward", load_preset("seed2-weighted"), where="stages.rl.reward")
    assert recipe(solved).total == pytest.approx(1.0)
    # core's validation reads the recipe's parts before anything is built, and names the key path
    with pytest.raises(ValueError, match="'reward:weighted_sum.components.all_pass.wieght': unknown option"):
        registry.build("reward", {"name": "weighted_sum", "components": {"all_pass": {"wieght": 1}}})


def test_readme_rewards_example_runs_as_written(repo_root, monkeypatch, capsys):
    text = (repo_root / "packages" / "sandbox" / "README.md").read_text()
    section = text.split("## Rewards", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(repo_root)
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)  # the README's own example, not candidate code
    assert namespace["result"].total == pytest.approx(0.35)
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "{'compile_success': 1.0, 'test_pass_rate': 0.5, 'task_complete': 0.0, 'hack_penalty': 0.0}"
    assert lines[2] == "1/2 visible tests pass"


def test_a_pipeline_names_a_preset_and_overrides_a_weight(registry, registry_dir, tmp_path, solved):
    from codemoe.core import compose
    from omegaconf import OmegaConf

    pipeline = tmp_path / "p.yaml"
    pipeline.write_text("stages:\n  rl:\n    reward: seed2-weighted\n")
    overrides = [
        "stages.rl.reward.components.compile_success.weight=0.4",
        "stages.rl.reward.components.hack_penalty=null",
        "stages.rl.reward.hack_signal=''",
    ]
    cfg = compose(pipeline, overrides, registry_dir=registry_dir)
    spec = OmegaConf.to_container(cfg.stages.rl.reward)
    result = registry.build("reward", spec, where="stages.rl.reward")(solved)
    assert result.weights == {"compile_success": 0.4, "test_pass_rate": 0.3, "task_complete": 0.5}
    assert result.total == pytest.approx(0.4 + 0.3 + 0.5)
