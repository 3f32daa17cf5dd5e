"""The conformance kit fails components that break their kind's laws, each at the check that states
the law (a kit that passes everything would prove nothing)."""

from __future__ import annotations

import textwrap

import pytest

BROKEN = '''
from dataclasses import dataclass
from typing import Any

import pluggy
import torch
from codemoe.core.moe import Router, RouterOutput
from codemoe.core.moe.experts import LoopExperts
from codemoe.rl.advantages import AdvantageOutput
from codemoe.rl.policy_losses import PolicyLossOutput

hookimpl = pluggy.HookimplMarker("codemoe")


@dataclass
class TopKConfig:
    top_k: int = 2


class DuplicateRouter(Router):
    """Routes every token to its best expert twice."""
    def route(self, x, token_ids=None):
        logits = self.logits(x)
        probs = logits.softmax(-1)
        w, i = probs.topk(1, dim=-1)
        return RouterOutput(logits, probs, torch.cat([w, w], -1) / 2, torch.cat([i, i], -1))


class UnnormalisedRouter(Router):
    """Top-k probabilities as they are, while replay (the base class) renormalises them."""
    def route(self, x, token_ids=None):
        logits = self.logits(x)
        probs = logits.softmax(-1)
        w, i = probs.topk(self.top_k, dim=-1)
        return RouterOutput(logits, probs, w, i)


def duplicate_router(config, *, hidden_size, num_experts):
    """duplicate"""
    return DuplicateRouter(hidden_size, num_experts, config.top_k)


def unnormalised_router(config, *, hidden_size, num_experts):
    """unnormalised"""
    return UnnormalisedRouter(hidden_size, num_experts, config.top_k)


@dataclass
class NoOptions:
    pass


class UnweightedExperts(LoopExperts):
    """Ignores the router's combine weights."""
    def forward(self, x, indices, weights):
        return super().forward(x, indices, torch.ones_like(weights) * (indices >= 0))


def unweighted_experts(config, *, registry=None, **shape):
    """unweighted"""
    return UnweightedExperts(**shape)


class PaddedAdvantage:
    """Group-centred scores on every position, padding included."""
    def __init__(self, config):
        pass
    def __call__(self, inputs):
        g = inputs.grouped()
        return AdvantageOutput((g - g.mean(-1, keepdim=True)).flatten()[:, None].expand_as(inputs.mask).clone())


class WrongSignLoss:
    """Gradient ascent on the loss: the advantage's sign flipped."""
    def __init__(self, config):
        pass
    def __call__(self, logp, old_logp, advantages, mask):
        ratio = torch.exp(logp - old_logp)
        return PolicyLossOutput(advantages * ratio, ratio.detach(), torch.zeros_like(ratio, dtype=torch.bool))


@dataclass
class WeightConfig:
    weight: float = 1.0


class CountingReward:
    """Pays less for every input it has seen: state kept between calls."""
    def __init__(self, config):
        self.seen = 0
    def __call__(self, inp):
        from codemoe.sandbox.rewards.types import RewardValue
        self.seen += 1
        return RewardValue("counting", 1.0 / self.seen, "fewer each time")


@dataclass
class RequiredConfig:
    threshold: float  # no default


class Required:
    def __init__(self, config):
        pass
    def __call__(self, logp, ref_logp):
        return logp - ref_logp


class HotEngine:
    """The embedded engine with its log-probs reported at temperature 1 whatever was asked."""
    def __init__(self, config, *, model, tokenizer=None, registry):
        self.inner = registry.build("engine", "embedded", model=model, tokenizer=tokenizer)
    def generate(self, prompts, params):
        import dataclasses
        outputs = self.inner.generate(prompts, params)
        if params.temperature not in (0.0, 1.0):
            cold = self.inner.generate(prompts, dataclasses.replace(params, temperature=1.0))
            for o, c in zip(outputs, cold):
                o.samples = c.samples
        return outputs
    def update_weights(self, state_dict=None, path=None):
        self.inner.update_weights(state_dict=state_dict, path=path)
    def health(self):
        return self.inner.health()


class Verdict:
    status, reason, stdout, stderr, duration_s, tests = "passed", "", "", "", 0.0, {}
    passed = True
    def to_reward_input(self):
        return None


class TrustingExecutor:
    """Says every program passed, without running any."""
    def __init__(self, config):
        pass
    def check_programs(self, checks, *, timeout_s=10.0, memory_mb=1024):
        return [Verdict() for _ in checks]
    def close(self):
        pass


COMPONENTS = [
    ("router", "duplicate", duplicate_router, TopKConfig),
    ("router", "unnormalised", unnormalised_router, TopKConfig),
    ("experts", "unweighted", unweighted_experts, NoOptions),
    ("advantage", "padded", PaddedAdvantage, NoOptions),
    ("policy_loss", "wrong_sign", WrongSignLoss, NoOptions),
    ("reward", "counting", CountingReward, WeightConfig),
    ("kl", "required", Required, RequiredConfig),
    ("engine", "hot", HotEngine, NoOptions),
    ("executor", "trusting", TrustingExecutor, NoOptions),
]


@hookimpl
def codemoe_register_components(registry):
    for kind, name, factory, config in COMPONENTS:
        registry.register(kind, name, factory, config, summary=f"broken {kind}")
'''

TESTS = '''
from codemoe.core.testing import EngineContract, ExecutorContract, ExpertsContract, RewardContract, RouterContract
from codemoe.rl.testing import AdvantageContract, KLContract, PolicyLossContract
from codemoe.sandbox.rewards.examples import example_inputs

import broken_components

P = [("broken", broken_components)]


class TestDuplicate(RouterContract):
    name, plugins = "duplicate", P


class TestUnnormalised(RouterContract):
    name, plugins = "unnormalised", P


class TestUnweighted(ExpertsContract):
    name, plugins = "unweighted", P


class TestPadded(AdvantageContract):
    name, plugins = "padded", P


class TestWrongSign(PolicyLossContract):
    name, plugins = "wrong_sign", P


class TestCounting(RewardContract):
    name, plugins = "counting", P

    def reward_inputs(self):
        return example_inputs()


class TestRequired(KLContract):
    name, plugins = "required", P


class TestHot(EngineContract):
    name, plugins = "hot", P


class TestTrusting(ExecutorContract):
    name, plugins = "trusting", P
'''

# each broken component -> exactly the checks that fail on it (its other checks pass)
EXPECTED = {
    "TestDuplicate": {"test_output_shapes_dtypes_and_ranges", "test_replays_its_own_decision"},  # p/2 twice != replay's 1/2
    "TestUnnormalised": {"test_replays_its_own_decision"},
    "TestUnweighted": {"test_matches_the_reference_loop[all-routed]", "test_matches_the_reference_loop[unrouted-slots]"},
    "TestPadded": {"test_shape_finite_and_zero_on_padding"},
    "TestWrongSign": {"test_the_gradient_follows_the_advantage"},
    "TestCounting": {"test_value_depends_on_the_input_only"},
    "TestHot": {"test_logprobs_are_the_teacher_forced_ones[0.7]"},
    "TestTrusting": {"test_one_verdict_per_check_in_order", "test_a_program_that_never_ends_times_out",
                     "test_memory_beyond_the_limit_does_not_pass"},
}


@pytest.mark.timeout(300)
def test_each_broken_component_fails_the_check_of_its_law(pytester: pytest.Pytester):
    pytester.makepyfile(broken_components=textwrap.dedent(BROKEN))
    pytester.makepyfile(test_broken=textwrap.dedent(TESTS))
    pytester.makeconftest('pytest_plugins = ["codemoe.core.testing.plugin"]\n')
    pytester.syspathinsert()
    reprec = pytester.inline_run("-q", "-p", "no:cacheprovider")
    failed: dict[str, set[str]] = {}
    for report in reprec.getfailures():
        cls, test = report.nodeid.split("::")[1:3]
        failed.setdefault(cls, set()).add(test)
    for cls, laws in EXPECTED.items():
        assert failed.get(cls, set()) == laws, f"{cls}: failed {sorted(failed.get(cls, set()))}, expected {sorted(laws)}"
    # an option without a default: the component cannot build from its name, and the kit says so
    assert {"test_every_option_has_a_default", "test_builds_from_its_config"} <= failed["TestRequired"]
