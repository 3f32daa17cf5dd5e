"""Every built-in router passes the conformance kit's router contract (what a plugin's router must pass)."""

from __future__ import annotations

from codemoe.core.plugins import build_plugin_manager, build_registry
from codemoe.core.testing import RouterContract, each_of

# every router the installed plugins register, so a router added later is checked too
ROUTERS = build_registry(build_plugin_manager()).names("router")
CONSTANT_WEIGHTS = {"hash"}  # routes by token id with fixed combine weights: no gradient through them


def test_the_builtin_routers_are_all_checked():
    assert {"softmax_topk", "sigmoid_bias", "noisy_topk", "group_limited", "expert_choice", "hash"} <= set(ROUTERS)


class TestScoredRouters(RouterContract):
    component_name = each_of(sorted(set(ROUTERS) - CONSTANT_WEIGHTS))


class TestHashRouter(RouterContract):
    name = "hash"
    weights_carry_gradient = False
