"""Every built-in advantage estimator, policy loss, KL estimator and loss aggregation passes its conformance contract."""

from __future__ import annotations

from codemoe.core.plugins import build_plugin_manager, build_registry
from codemoe.core.testing import each_of
from codemoe.rl.testing import AdvantageContract, KLContract, LossAggregationContract, PolicyLossContract

REGISTRY = build_registry(build_plugin_manager())


def test_every_builtin_strategy_is_checked():
    assert set(REGISTRY.names("advantage")) == {"grpo", "dr_grpo", "rloo", "reinforce_pp", "gae"}
    assert {"ppo_clip", "gspo"} <= set(REGISTRY.names("policy_loss"))
    assert {"k1", "k2", "k3"} <= set(REGISTRY.names("kl"))
    assert {"token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"} <= set(REGISTRY.names("loss_agg"))


class TestGroupBaselineAdvantages(AdvantageContract):
    component_name = each_of(sorted(set(REGISTRY.names("advantage")) - {"gae"}))


class TestGAE(AdvantageContract):
    name = "gae"
    options = {"gamma": 1.0, "lam": 1.0}
    needs_values = True
    group_baseline = False  # the critic is the baseline: equal rewards still give returns - V


class TestPolicyLosses(PolicyLossContract):
    component_name = each_of(REGISTRY.names("policy_loss"))


class TestK1(KLContract):
    name = "k1"
    non_negative = False  # log(pi/pi_ref) is negative wherever pi < pi_ref
    unbiased = True


class TestK2(KLContract):
    name = "k2"


class TestK3(KLContract):
    name = "k3"
    unbiased = True


class TestLossAggregations(LossAggregationContract):
    component_name = each_of(REGISTRY.names("loss_agg"))
