"""The importance-sampling corrections (truncated, masked, decoupled; token and sequence level),
their known answers, and the mismatch report."""

from __future__ import annotations

import math

import pytest
import torch
from codemoe.core.errors import ConfigError
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


# Known answers of the off-policy strategies. Two sequences of three tokens; the third token of the
# second sequence is padding (mask 0). Per-token ratios rho = exp(old - engine):
#   row 0: 0.5, 2.0, 1.25    row 1: 4.0, 1.0, (3.0: padding)
RHO = torch.tensor([[0.5, 2.0, 1.25], [4.0, 1.0, 3.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
ENGINE = torch.log(torch.full((2, 3), 0.2))
OLD = ENGINE + torch.log(RHO)
# float32 log/exp round trips: a few ulps of 4.0 at most, so 1e-6 relative is ample
CLOSE = {"rtol": 1e-6, "atol": 1e-7}


def test_token_truncated_is(registry):
    tis = registry.build("is_correction", {"name": "truncated", "cap": 1.5})
    assert torch.allclose(tis(OLD, ENGINE, MASK), torch.tensor([[0.5, 1.5, 1.25], [1.5, 1.0, 1.5]]), **CLOSE)


def test_sequence_truncated_is(registry):
    """One weight per sequence: the product of its valid tokens' ratios (row 0: 0.5*2*1.25 = 1.25;
    row 1: 4*1 = 4, the padded 3.0 left out), truncated at the cap."""
    tis = registry.build("is_correction", {"name": "truncated", "cap": 3.0, "level": "sequence"})
    assert torch.allclose(tis(OLD, ENGINE, MASK), torch.tensor([[1.25] * 3, [3.0] * 3]), **CLOSE)


def test_token_masked_is_drops_tokens_outside_the_band(registry):
    mis = registry.build("is_correction", {"name": "masked", "low": 0.6, "high": 2.0})
    assert torch.allclose(mis(OLD, ENGINE, MASK), torch.tensor([[0.0, 2.0, 1.25], [0.0, 1.0, 0.0]]), **CLOSE)


def test_sequence_masked_is_drops_whole_sequences(registry):
    """Row 0's product 1.25 is inside [0.5, 2], kept with that weight; row 1's 4.0 is not: dropped."""
    mis = registry.build("is_correction", {"name": "masked", "low": 0.5, "high": 2.0, "level": "sequence"})
    assert torch.allclose(mis(OLD, ENGINE, MASK), torch.tensor([[1.25] * 3, [0.0] * 3]), **CLOSE)


def test_decoupled_behaviour_weight_is_the_ratio_and_the_cap_drops(registry):
    plain = registry.build("is_correction", "decoupled")
    assert torch.allclose(plain(OLD, ENGINE, MASK), RHO, **CLOSE)
    capped = registry.build("is_correction", {"name": "decoupled", "cap": 3.5})
    assert torch.allclose(capped(OLD, ENGINE, MASK), torch.tensor([[0.5, 2.0, 1.25], [0.0, 1.0, 3.0]]), **CLOSE)


def test_decoupled_ppo_objective_known_answer(registry):
    """The whole decoupled loss of one token batch through the algorithm: the clipped surrogate of
    pi/pi_prox (eps 0.2) times pi_prox/pi_behav, token mean.

    Tokens (A, pi/pi_prox, pi_prox/pi_behav): (+1, 1.5, 0.5) -> 0.5 * -min(1.5, 1.2) = -0.6;
    (-1, 0.5, 2.0) -> 2 * max(0.5, 0.8) = 1.6; (+1, 1.0, 4.0) -> 4 * -1 = -4. Mean: -3/3 = -1.
    """
    algo = registry.build(
        "algorithm",
        {"name": "policy_gradient", "is_correction": "decoupled", "loss_agg": "token_mean", "balance_coef": 0.0},
        registry=registry,
    )
    behaviour = torch.log(torch.tensor([[0.2, 0.1, 0.05]]))
    proximal = behaviour + torch.log(torch.tensor([[0.5, 2.0, 4.0]]))
    logp = proximal + torch.log(torch.tensor([[1.5, 0.5, 1.0]]))
    advantages, mask = torch.tensor([[1.0, -1.0, 1.0]]), torch.ones(1, 3)
    weights = algo.is_correction(proximal, behaviour, mask)
    terms = algo.loss_terms(logp, proximal, advantages, mask, weights, None)
    assert math.isclose(float(terms.numerator / terms.denominator), -1.0, rel_tol=1e-6)
    assert terms.clipped == 2.0  # the first two tokens' clipped branch is active


def test_weight_statistics_and_share_masked(registry):
    mis = registry.build("is_correction", {"name": "masked", "low": 0.6, "high": 2.0})
    stats = mismatch_stats(OLD, ENGINE, MASK, None, mis(OLD, ENGINE, MASK))
    # valid weights: 0, 2, 1.25, 0, 1 -> mean 0.85, two of five dropped
    assert math.isclose(stats.weight_mean, 0.85, rel_tol=1e-6) and math.isclose(stats.masked_frac, 0.4, rel_tol=1e-6)
    assert stats.weight_min == 0.0 and math.isclose(stats.weight_max, 2.0, rel_tol=1e-6)


@pytest.mark.parametrize(
    ("spec", "key"),
    [
        ({"name": "truncated", "level": "sentence"}, "'is_correction.level'"),
        ({"name": "masked", "low": 1.5, "high": 2.0}, "'is_correction'"),
        ({"name": "decoupled", "cap": 0.5}, "'is_correction.cap'"),
    ],
)
def test_bad_correction_options_are_refused_by_key(registry, spec, key):
    with pytest.raises(ConfigError, match=key):
        registry.build("is_correction", spec)
