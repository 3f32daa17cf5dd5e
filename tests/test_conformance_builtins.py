"""The built-in engines, executors, reward components, suites, stages and loggers pass the conformance kit.

(Routers, experts and the RL strategies are checked in their own packages' tests.)
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest
from codemoe.core.plugins import build_plugin_manager, build_registry
from codemoe.core.testing import (
    EngineContract,
    ExecutorContract,
    LoggerContract,
    RewardContract,
    StageContract,
    each_of,
)
from codemoe.evals.testing import SuiteContract
from codemoe.sandbox.rewards.examples import example_inputs

REGISTRY = build_registry(build_plugin_manager())


class TestEmbeddedEngine(EngineContract):
    name = "embedded"


class TestLocalExecutor(ExecutorContract):
    name = "local"
    options = {"workers": 1}


class TestRemoteExecutor(ExecutorContract):
    """The ``remote`` executor against a real ``codemoe sandbox serve`` on loopback."""

    name = "remote"

    @pytest.fixture(scope="class")
    @classmethod
    def spec(cls, component_name):
        token = "conformance-7f3a"
        command = [sys.executable, "-m", "codemoe.sandbox", "serve", "--port", "0", "--workers", "1"]
        proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "CODEMOE_SANDBOX_TOKEN": token})
        try:
            url = re.search(r"http://[\d.]+:\d+", proc.stderr.readline()).group(0)
            yield {"name": component_name, "url": url, "token": token}
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


class TestRewardComponents(RewardContract):
    component_name = each_of(REGISTRY.names("reward"))

    def reward_inputs(self):
        return example_inputs()


class TestSyntheticSuite(SuiteContract):
    name = "synthetic"


class TestHumanEvalSuite(SuiteContract):
    name = "humaneval"
    filled_splits = ("heldout",)  # an evaluation suite: every problem is held out by default


class TestSyntheticReposSuite(SuiteContract):
    name = "synthetic-repos"
    options = {"train_tasks": 9, "heldout_tasks": 9}
    function_level = False  # repository tasks: `codemoe tasks validate` checks their gold patches


class TestAgenticCoreSuite(SuiteContract):
    name = "agentic-core"
    options = {"heldout_percent": 50}  # by default every task is held out; split them to check both
    function_level = False  # repository tasks


class TestEnvironmentStage(StageContract):
    name = "environment"


class TestTensorBoardLogger(LoggerContract):
    name = "tensorboard"

    def read_back(self, run_dir):
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        events = EventAccumulator(str(run_dir / "tensorboard"))
        events.Reload()
        return {(tag, e.step): e.value for tag in events.Tags()["scalars"] for e in events.Scalars(tag)}


class TestWandbLogger(LoggerContract):
    name = "wandb"
    options = {"mode": "offline"}
