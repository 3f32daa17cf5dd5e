"""codemoe-example's components pass codemoe's conformance kit, as any third-party plugin's should.

The kit's fixtures come from ``pytest_plugins = ["codemoe.core.testing.plugin"]`` in the root
conftest; the plugin is installed, so the registry finds its components by their entry point.
"""

from codemoe.core.testing import RewardContract, StageContract
from codemoe.sandbox.rewards.examples import example_inputs


class TestConcise(RewardContract):
    name = "concise"
    value_range = (0.0, 1.0)

    def reward_inputs(self):
        return example_inputs()


class TestDiskCheck(StageContract):
    name = "disk-check"
    options = {"min_free_gb": 0.001}
