"""Truncated importance sampling between engine and trainer log-probs, and its mismatch report."""

from __future__ import annotations

import math

import torch
from codemoe.rl.importance import mismatch_stats


def test_truncated_weights(registry):
    tis = registry.build("is_correction", {"name": "truncated", "cap": 2.0})
    old = torch.log(torch.tensor([[0.5, 0.9, 0.3]]))
    engine = torch.log(torch.tensor([[0.5, 0.3, 0.6]]))
    assert torch.allclose(tis(old, engine), torch.tensor([[1.0, 2.0, 0.5]]))  # 3.0 truncated to 2.0


def test_no_correction_is_one(registry):
    none = registry.build("is_correction", "none")
    assert torch.equal(none(torch.zeros(2, 3), torch.ones(2, 3)), torch.ones(2, 3))


def test_mismatch_stats_over_valid_tokens():
    old = torch.log(torch.tensor([[0.5, 0.9, 0.3]]))
    engine = torch.log(torch.tensor([[0.5, 0.3, 0.6]]))
    stats = mismatch_stats(old, engine, torch.tensor([[1.0, 1.0, 0.0]]), cap=2.0)
    assert math.isclose(stats.ratio_mean, 2.0, rel_tol=1e-6)  # (1 + 3) / 2; the padded 0.5 is ignored
    assert math.isclose(stats.ratio_max, 3.0, rel_tol=1e-6) and math.isclose(stats.ratio_min, 1.0, rel_tol=1e-6)
    assert stats.truncated_frac == 0.5
    assert math.isclose(stats.logp_abs_diff_max, math.log(3), rel_tol=1e-6)
