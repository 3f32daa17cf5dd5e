"""Reward presets: shipped in codemoe-sandbox, overridden by an overlay folder (codemoe.sandbox.rewards.presets)."""

from __future__ import annotations

from pathlib import Path

import pytest
from codemoe.sandbox.rewards.presets import SHIPPED_REWARDS, load_preset, rewards_dirs
from codemoe.sandbox.rewards.registration import RewardSpecError


def test_the_shipped_presets_are_found_from_anywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("CODEMOE_REGISTRY", raising=False)
    monkeypatch.chdir(tmp_path)
    assert rewards_dirs() == [SHIPPED_REWARDS]
    assert load_preset("seed2-weighted")["components"]["task_complete"] == {"weight": 0.5, "tests": "visible"}


def test_an_overlay_preset_wins_and_may_extend_the_shipped_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    overlay = tmp_path / "registry" / "rewards"
    overlay.mkdir(parents=True)
    (overlay / "seed2-weighted.yaml").write_text("_base_: seed2-weighted\ncomponents:\n  task_complete: {weight: 0.7}\n")
    monkeypatch.setenv("CODEMOE_REGISTRY", str(tmp_path / "registry"))
    spec = load_preset("seed2-weighted")
    assert spec["components"]["task_complete"] == {"weight": 0.7, "tests": "visible"}  # merged over the shipped one
    assert spec["components"]["hack_penalty"] == {"weight": -0.1}


def test_an_unknown_preset_lists_the_known_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("CODEMOE_REGISTRY", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RewardSpecError, match=r"no reward preset 'seed2-weigted' in .*presets there: .*seed2-weighted"):
        load_preset("seed2-weigted")


def test_a_yaml_syntax_error_names_file_line_and_column(tmp_path: Path):
    (tmp_path / "bad.yaml").write_text("name: weighted_sum\ncomponents: {a: 1\n")
    with pytest.raises(RewardSpecError, match=r"bad.yaml:3:1: YAML syntax error"):
        load_preset("bad", folder=tmp_path)
