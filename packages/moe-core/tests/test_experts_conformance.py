"""Every built-in expert implementation passes the conformance kit's experts contract."""

from __future__ import annotations

from codemoe.core.plugins import build_plugin_manager, build_registry
from codemoe.core.testing import ExpertsContract, each_of

EXPERTS = build_registry(build_plugin_manager()).names("experts")


def test_the_builtin_experts_are_all_checked():
    assert {"loop", "grouped", "grouped_mm"} <= set(EXPERTS)


class TestBuiltinExperts(ExpertsContract):
    component_name = each_of(EXPERTS)
