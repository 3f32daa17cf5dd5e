"""Conformance contracts: the checks every component of a kind must pass, as pytest base classes.

A plugin's test subclasses the contract of its component's kind and names the component::

    from codemoe.core.testing import RouterContract

    class TestMyRouter(RouterContract):
        name = "my_router"          # the registered name
        options = {"top_k": 2}      # options for the build (defaults fill the rest)

pytest then runs every ``test_*`` method of the contract against it. Every contract checks what
:class:`ComponentContract` checks (registered with a summary, builds from its config, the config
round-trips through YAML, a misspelt or wrongly typed option is an error naming its key); each
kind's contract adds what the framework relies on when it calls the component (shapes, dtypes,
determinism under a seed, and the kind's own laws: a router's replay, an expert kernel's agreement
with the reference loop, an engine's log-prob convention, an executor's verdicts).

The fixtures come from :mod:`codemoe.core.testing.plugin` (``pytest_plugins =
["codemoe.core.testing.plugin"]`` in the root conftest). Contracts for kinds whose data types live
in another package ship with that package: ``codemoe.rl.testing`` (advantage, policy loss, KL),
``codemoe.evals.testing`` (suite). Nothing here imports torch until a test runs.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import tempfile
import time
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

try:
    import pytest
except ImportError as exc:  # the kit is a pytest plugin: its users test with pytest
    raise ImportError("the codemoe conformance kit needs pytest: pip install 'codemoe-core[testing]'") from exc

__all__ = [
    "ComponentContract",
    "EngineContract",
    "ExecutorContract",
    "ExpertsContract",
    "LoggerContract",
    "RewardContract",
    "RouterContract",
    "StageContract",
    "each_of",
    "fp32_close",
]


def each_of(names: Sequence[str]) -> Any:
    """A ``component_name`` fixture that runs a contract once per name::

        class TestEveryRouter(RouterContract):
            component_name = each_of(registry.names("router"))
    """

    def component_name(cls: type, request: Any) -> str:
        return request.param

    return pytest.fixture(scope="class", params=list(names), ids=list(names))(classmethod(component_name))


def fp32_close(actual: Any, expected: Any, *, what: str, atol: float = 1e-5, rtol: float = 1e-4) -> None:
    """Assert two float tensors agree to what fp32 arithmetic in another order can differ by.

    The defaults fit sums of tens of terms of order one: each reordering changes the result by a few
    ulps (~1e-7 relative), far inside 1e-4; a real bug (a wrong weight, a dropped token) is O(1).
    """
    import torch

    actual, expected = actual.detach().float(), expected.detach().float()
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
    if not torch.allclose(actual, expected, atol=atol, rtol=rtol):
        worst = (actual - expected).abs().max().item()
        raise AssertionError(f"{what}: differs from the reference by up to {worst:.3g} (atol {atol}, rtol {rtol})")


class ComponentContract:
    """What every component of every kind must do. Subclasses set :attr:`kind`; tests set :attr:`name`.

    Override :meth:`factory_kwargs` to pass what the framework passes the factory besides the config
    (a router's sizes, an engine's model). To run one contract over several components, set
    ``component_name = each_of([...names])``.
    """

    kind: ClassVar[str] = ""
    name: ClassVar[str] = ""  # the registered component under test
    options: ClassVar[Mapping[str, Any]] = {}  # options the tests build it with
    plugins: ClassVar[Sequence[tuple[str, object]]] = ()  # plugins to register that are not installed

    # -- fixtures ---------------------------------------------------------------------------------

    @pytest.fixture(scope="class")
    @classmethod
    def component_name(cls) -> str:
        if not cls.name:
            pytest.fail(f"{cls.__name__}: set `name` to the registered {cls.kind or 'component'} name")
        return cls.name

    @pytest.fixture(scope="class")
    @classmethod
    def registry(cls, codemoe_registry: Any) -> Any:
        """The installed plugins' registry, plus :attr:`plugins` when the class lists any."""
        if not cls.plugins:
            return codemoe_registry
        from codemoe.core.plugins import build_plugin_manager, build_registry

        return build_registry(build_plugin_manager(extra_plugins=cls.plugins))

    @pytest.fixture(scope="class")
    @classmethod
    def spec(cls, component_name: str) -> dict[str, Any]:
        return {"name": component_name, **copy.deepcopy(dict(cls.options))}

    # -- hooks for kind contracts -----------------------------------------------------------------

    def factory_kwargs(self) -> dict[str, Any]:
        """Keyword arguments the framework gives this kind's factory besides the config."""
        return {}

    def build(self, registry: Any, spec: Mapping[str, Any]) -> Any:
        """Build the component the way the framework does."""
        return registry.build(self.kind, dict(spec), where=f"conformance.{self.kind}", **self.factory_kwargs())

    def check_built(self, component: Any) -> None:
        """Kind-specific checks of a freshly built component (its interface)."""

    # -- the checks -------------------------------------------------------------------------------

    def test_is_registered_with_a_summary(self, registry: Any, component_name: str) -> None:
        component = registry.get(self.kind, component_name)
        assert component.summary.strip(), (
            f"{self.kind} '{component_name}' has no summary: `codemoe components` prints one line per "
            "component (pass summary=... to register, or give the factory a docstring)"
        )

    def test_every_option_has_a_default(self, registry: Any, component_name: str) -> None:
        cls = registry.get(self.kind, component_name).config_class()
        if cls is None:  # a component without options builds from its bare name
            assert registry.make_config(self.kind, component_name) is None
            return
        missing = [
            f.name for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        assert not missing, (
            f"{self.kind} '{component_name}': options {missing} have no default, so `{{name: {component_name}}}` "
            "does not build; give each a documented default"
        )

    def test_builds_from_its_config(self, registry: Any, spec: dict[str, Any]) -> None:
        self.check_built(self.build(registry, spec))

    def test_config_round_trips_through_yaml(self, registry: Any, spec: dict[str, Any], component_name: str) -> None:
        from omegaconf import OmegaConf

        config = registry.make_config(self.kind, spec)
        if config is None:
            return
        written = {"name": component_name, **dataclasses.asdict(config)}
        read = OmegaConf.to_container(OmegaConf.create(OmegaConf.to_yaml(OmegaConf.create(written))), resolve=True)
        again = registry.make_config(self.kind, read)
        assert again == config, (
            f"{self.kind} '{component_name}': its config written as YAML and read back differs "
            f"({again!r} != {config!r}); a run saved with it would not reproduce"
        )

    def test_unknown_option_is_an_error_naming_it(self, registry: Any, spec: dict[str, Any]) -> None:
        from codemoe.core.errors import CodemoeError

        where = f"stages.conformance.{self.kind}"
        with pytest.raises(CodemoeError) as info:
            registry.make_config(self.kind, {**spec, "no_such_option": 1}, where=where)
        message = str(info.value)
        assert "no_such_option" in message and where in message, f"the error does not name the key: {message}"

    def test_wrongly_typed_option_is_an_error_naming_it(self, registry: Any, spec: dict[str, Any], component_name: str) -> None:
        from codemoe.core.errors import CodemoeError

        cls = registry.get(self.kind, component_name).config_class()
        typed = _numeric_fields(cls) if cls is not None else {}
        where = f"stages.conformance.{self.kind}"
        for field_name, bad in typed.items():
            with pytest.raises(CodemoeError) as info:
                registry.make_config(self.kind, {**spec, field_name: bad}, where=where)
            message = str(info.value)
            assert f"{where}.{field_name}" in message, f"'{field_name}={bad!r}': the error does not name the key: {message}"


def _numeric_fields(cls: type) -> dict[str, Any]:
    """Fields typed int, float or bool (optionally ``| None``), each with a value of the wrong type."""
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # a config whose annotations do not resolve: nothing to check by type
        return {}
    out = {}
    for field in dataclasses.fields(cls):
        hint = hints.get(field.name)
        args = set(typing.get_args(hint)) - {type(None)} if typing.get_args(hint) else {hint}
        if args and args <= {int, float}:
            out[field.name] = "not-a-number"
        elif args == {bool}:
            out[field.name] = "maybe"
    return out


# ---------------------------------------------------------------------------------------------------
# kind: router
# ---------------------------------------------------------------------------------------------------


class RouterContract(ComponentContract):
    """A router (kind ``router``): ``factory(config, hidden_size=H, num_experts=E)`` -> ``Router``.

    It must hold ``weight [E, H]`` (``gate.weight`` in a checkpoint), return a ``RouterOutput`` with
    fp32 ``logits``/``probs [T, E]`` and ``weights``/``indices [T, k]``, route each token to each
    expert at most once, put zero weight on unrouted slots, let gradients reach ``weight``, give the
    same decision under the same seed, and replay its own decision (routing replay).
    """

    kind = "router"
    hidden_size: ClassVar[int] = 16
    num_experts: ClassVar[int] = 8
    tokens: ClassVar[int] = 24
    weights_carry_gradient: ClassVar[bool] = True  # False for routers whose combine weights are constant (hash)

    def factory_kwargs(self) -> dict[str, Any]:
        return {"hidden_size": self.hidden_size, "num_experts": self.num_experts}

    def seeded_router(self, registry: Any, spec: Mapping[str, Any], seed: int = 0) -> Any:
        """The router built and initialised under ``seed`` (its weight drawn from N(0, 0.5^2))."""
        import torch

        torch.manual_seed(seed)
        router = self.build(registry, spec)
        with torch.no_grad():
            router.weight.normal_(0.0, 0.5)
        return router

    def inputs(self, seed: int = 1) -> tuple[Any, Any]:
        import torch

        g = torch.Generator().manual_seed(seed)
        x = torch.randn(self.tokens, self.hidden_size, generator=g)
        ids = torch.randint(0, 1000, (self.tokens,), generator=g)
        return x, ids

    def check_built(self, component: Any) -> None:
        from codemoe.core.moe.routing import Router

        assert isinstance(component, Router), f"a router must subclass codemoe.core.moe.routing.Router, got {type(component)}"
        assert tuple(component.weight.shape) == (self.num_experts, self.hidden_size), (
            f"router weight is {tuple(component.weight.shape)}, expected [E, H] = {(self.num_experts, self.hidden_size)}"
        )

    def test_output_shapes_dtypes_and_ranges(self, registry: Any, spec: dict[str, Any]) -> None:
        import torch
        from codemoe.core.moe.routing import UNROUTED

        router = self.seeded_router(registry, spec)
        x, ids = self.inputs()
        out = router(x, ids)
        T, E = self.tokens, self.num_experts
        for field in ("logits", "probs"):
            value = getattr(out, field)
            assert tuple(value.shape) == (T, E) and value.dtype == torch.float32, f"{field}: {tuple(value.shape)} {value.dtype}, expected [{T}, {E}] float32"
            assert torch.isfinite(value).all(), f"{field} has non-finite values"
        assert (out.probs >= 0).all() and (out.probs <= 1).all(), "probs must lie in [0, 1]"
        assert out.weights.shape == out.indices.shape and out.weights.shape[0] == T, "weights and indices must be [T, k]"
        assert out.indices.dtype == torch.int64, f"indices are {out.indices.dtype}, expected int64"
        routed = out.indices != UNROUTED
        assert ((out.indices >= 0) & (out.indices < E) | ~routed).all(), "an index is neither an expert nor UNROUTED"
        assert torch.isfinite(out.weights).all() and (out.weights >= 0).all(), "combine weights must be finite and >= 0"
        assert (out.weights[~routed] == 0).all(), "an unrouted slot carries weight"
        for row, mask in zip(out.indices.tolist(), routed.tolist()):
            chosen = [e for e, m in zip(row, mask) if m]
            assert len(chosen) == len(set(chosen)), f"a token is routed to the same expert twice: {row}"

    def test_gradient_reaches_the_router_weight(self, registry: Any, spec: dict[str, Any]) -> None:
        import torch

        router = self.seeded_router(registry, spec)
        x, ids = self.inputs()
        out = router(x, ids)
        g = torch.Generator().manual_seed(2)
        target = out.weights if self.weights_carry_gradient else out.logits
        (target * torch.randn(target.shape, generator=g)).sum().backward()
        grad = router.weight.grad
        assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0, (
            "no gradient reaches the router weight through the combine weights "
            "(set weights_carry_gradient = False only for a router whose weights are constant)"
        )

    def test_deterministic_under_a_seed(self, registry: Any, spec: dict[str, Any]) -> None:
        import torch

        outs = []
        for _ in range(2):
            router = self.seeded_router(registry, spec, seed=3)
            x, ids = self.inputs()
            torch.manual_seed(4)
            outs.append(router(x, ids))
        assert torch.equal(outs[0].indices, outs[1].indices), "same seed, same tokens: different experts"
        assert torch.equal(outs[0].weights, outs[1].weights), "same seed, same tokens: different weights"

    def test_replays_its_own_decision(self, registry: Any, spec: dict[str, Any]) -> None:
        import torch

        router = self.seeded_router(registry, spec).eval()
        x, ids = self.inputs()
        with torch.no_grad():
            out = router(x, ids)
            replayed = router.replay(x, out.indices)
        assert torch.equal(replayed.indices, out.indices), "replay must keep the given experts"
        fp32_close(replayed.weights, out.weights, what="replayed combine weights")


# ---------------------------------------------------------------------------------------------------
# kind: experts
# ---------------------------------------------------------------------------------------------------


class ExpertsContract(ComponentContract):
    """An expert implementation (kind ``experts``): ``factory(config, registry=, num_experts=E,
    hidden_size=H, intermediate_size=I)`` -> ``Experts``, with the ``transformers`` weight layout
    (``gate_up_proj [E, 2I, H]``, ``down_proj [E, H, I]``) and the reference loop's results: the
    same outputs and gradients (input, weights, combine weights) on the same weights, unrouted
    slots included.
    """

    kind = "experts"
    num_experts: ClassVar[int] = 4
    hidden_size: ClassVar[int] = 16
    intermediate_size: ClassVar[int] = 8
    tokens: ClassVar[int] = 20
    top_k: ClassVar[int] = 2

    def factory_kwargs(self) -> dict[str, Any]:
        return {"num_experts": self.num_experts, "hidden_size": self.hidden_size, "intermediate_size": self.intermediate_size}

    def seeded(self, registry: Any, spec: Mapping[str, Any], seed: int = 0) -> Any:
        import torch

        torch.manual_seed(seed)
        experts = self.build(registry, spec)
        with torch.no_grad():
            experts.gate_up_proj.normal_(0.0, 0.3)
            experts.down_proj.normal_(0.0, 0.3)
        return experts

    def routing(self, seed: int = 1, unrouted: bool = False) -> tuple[Any, Any, Any]:
        import torch
        from codemoe.core.moe.routing import UNROUTED

        g = torch.Generator().manual_seed(seed)
        x = torch.randn(self.tokens, self.hidden_size, generator=g)
        indices = torch.stack([torch.randperm(self.num_experts, generator=g)[: self.top_k] for _ in range(self.tokens)])
        weights = torch.rand(self.tokens, self.top_k, generator=g)
        if unrouted:  # every third token drops its second slot, the last token routes nowhere
            indices[::3, 1] = UNROUTED
            indices[-1, :] = UNROUTED
            weights = torch.where(indices == UNROUTED, torch.zeros_like(weights), weights)
        return x, indices, weights

    def check_built(self, component: Any) -> None:
        e, h, i = self.num_experts, self.hidden_size, self.intermediate_size
        assert tuple(component.gate_up_proj.shape) == (e, 2 * i, h), f"gate_up_proj is {tuple(component.gate_up_proj.shape)}, expected {(e, 2 * i, h)}"
        assert tuple(component.down_proj.shape) == (e, h, i), f"down_proj is {tuple(component.down_proj.shape)}, expected {(e, h, i)}"

    def _run(self, experts: Any, x: Any, indices: Any, weights: Any) -> tuple[Any, dict[str, Any]]:
        import torch

        x = x.clone().requires_grad_(True)
        weights = weights.clone().requires_grad_(True)
        out = experts(x, indices, weights)
        g = torch.Generator().manual_seed(5)
        (out * torch.randn(out.shape, generator=g)).sum().backward()
        return out, {"input": x.grad, "combine weights": weights.grad,
                     "gate_up_proj": experts.gate_up_proj.grad, "down_proj": experts.down_proj.grad}

    @pytest.mark.parametrize("unrouted", [False, True], ids=["all-routed", "unrouted-slots"])
    def test_matches_the_reference_loop(self, registry: Any, spec: dict[str, Any], unrouted: bool) -> None:
        experts = self.seeded(registry, spec)
        reference = registry.build("experts", "loop", where="conformance.reference", **self.factory_kwargs())
        reference.load_state_dict({"gate_up_proj": experts.gate_up_proj.detach(), "down_proj": experts.down_proj.detach()}, strict=False)
        x, indices, weights = self.routing(unrouted=unrouted)
        out, grads = self._run(experts, x, indices, weights)
        ref_out, ref_grads = self._run(reference, x, indices, weights)
        assert out.dtype == x.dtype, f"output dtype {out.dtype}, input {x.dtype}"
        fp32_close(out, ref_out, what="expert outputs")
        for what, grad in grads.items():
            assert grad is not None, f"no gradient for the {what}"
            fp32_close(grad, ref_grads[what], what=f"gradient of the {what}")
        if unrouted:
            assert (out[-1] == 0).all(), "a token routed nowhere must get a zero output"

    def test_deterministic_under_a_seed(self, registry: Any, spec: dict[str, Any]) -> None:
        import torch

        outs = [self.seeded(registry, spec, seed=7)(*self.routing()) for _ in range(2)]
        assert torch.equal(outs[0], outs[1]), "same weights, same tokens: different outputs"


# ---------------------------------------------------------------------------------------------------
# kind: engine
# ---------------------------------------------------------------------------------------------------

_MICRO_MODEL = {
    "name": "qwen3_moe", "vocab_size": 64, "hidden_size": 32, "num_layers": 2, "num_heads": 2,
    "num_kv_heads": 1, "head_dim": 16, "num_experts": 4, "moe_intermediate_size": 16,
    "max_position_embeddings": 64, "router": {"name": "softmax_topk", "top_k": 2},
}


class EngineContract(ComponentContract):
    """A generation engine (kind ``engine``), per :mod:`codemoe.core.contracts.engine`.

    The default :meth:`factory_kwargs` serves a micro MoE built in-process (``model=``,
    ``tokenizer=None``); an engine that serves elsewhere overrides the ``engine`` and ``policy``
    fixtures (the engine, and the torch model whose weights it serves). The checks: ``n`` samples per
    prompt in order, the log-prob convention (a teacher-forced forward of the same weights at the
    same temperature gives the engine's log-probs), greedy is the argmax, the same seed gives the
    same samples, bad parameters and too-long prompts are request errors, and new weights change
    what it samples.
    """

    kind = "engine"
    model_spec: ClassVar[Mapping[str, Any]] = _MICRO_MODEL

    def micro_policy(self, registry: Any = None) -> Any:
        """The model the default engine serves: ``model_spec`` built under seed 0, in eval mode."""
        import torch
        from codemoe.core.models.build import build_model

        torch.manual_seed(0)
        return build_model(dict(self.model_spec), registry=registry).eval()

    @pytest.fixture
    def policy(self, registry: Any) -> Any:
        return self.micro_policy(registry)

    @pytest.fixture
    def engine(self, registry: Any, spec: dict[str, Any], policy: Any) -> Any:
        return registry.build(self.kind, spec, where="conformance.engine", model=policy, tokenizer=None)

    def factory_kwargs(self) -> dict[str, Any]:
        return {"model": self.micro_policy(), "tokenizer": None}

    def check_built(self, component: Any) -> None:
        from codemoe.core.contracts import Engine

        assert isinstance(component, Engine), f"an engine implements generate, update_weights and health; got {type(component)}"

    prompts: ClassVar[list[list[int]]] = [[1, 5, 9, 2], [3, 3, 7], [11, 4, 6, 8, 10]]

    def _params(self, **kw: Any) -> Any:
        from codemoe.core.contracts import SamplingParams

        return SamplingParams(**{"n": 2, "temperature": 1.0, "max_new_tokens": 6, "seed": 0, **kw})

    def test_samples_per_prompt_in_order(self, engine: Any, policy: Any) -> None:
        params = self._params(n=3)
        outputs = engine.generate(self.prompts, params)
        assert len(outputs) == len(self.prompts), "one output per prompt"
        vocab = policy.config.vocab_size
        for prompt, output in zip(self.prompts, outputs):
            assert list(output.prompt_token_ids) == prompt, "outputs must come back in the prompts' order"
            assert len(output.samples) == params.n, f"{len(output.samples)} samples, asked for n={params.n}"
            for s in output.samples:
                assert 1 <= len(s.token_ids) <= params.max_new_tokens, f"{len(s.token_ids)} tokens for max_new_tokens={params.max_new_tokens}"
                assert all(0 <= t < vocab for t in s.token_ids), "a token outside the vocabulary"
                assert len(s.logprobs) == len(s.token_ids), "one log-prob per generated token"
                assert all(math.isfinite(lp) and lp <= 0 for lp in s.logprobs), "log-probs must be finite and <= 0"
                assert s.finish_reason in ("stop", "length"), f"finish_reason {s.finish_reason!r}"

    @pytest.mark.parametrize("temperature", [1.0, 0.7])
    def test_logprobs_are_the_teacher_forced_ones(self, engine: Any, policy: Any, temperature: float) -> None:
        import torch

        outputs = engine.generate(self.prompts, self._params(temperature=temperature))
        for prompt, output in zip(self.prompts, outputs):
            for s in output.samples:
                ids = torch.tensor([prompt + list(s.token_ids)])
                with torch.no_grad():
                    logits = policy(input_ids=ids).logits[0].float()
                logp = torch.log_softmax(logits / temperature, dim=-1)
                want = logp[len(prompt) - 1 : -1].gather(-1, torch.tensor(s.token_ids)[:, None])[:, 0]
                # the engine decodes with a KV cache, the reference runs the whole sequence: fp32 sums
                # of tens of terms in another order, ~1e-6 apart; a wrong position or temperature is O(0.1)
                fp32_close(torch.tensor(s.logprobs), want, what="engine log-probs", atol=2e-4, rtol=1e-4)

    def test_greedy_is_the_argmax(self, engine: Any, policy: Any) -> None:
        import torch

        outputs = engine.generate(self.prompts, self._params(n=1, temperature=0.0))
        for prompt, output in zip(self.prompts, outputs):
            s = output.samples[0]
            with torch.no_grad():
                logits = policy(input_ids=torch.tensor([prompt + list(s.token_ids)])).logits[0].float()
            steps = logits[len(prompt) - 1 : -1]
            chosen = steps.gather(-1, torch.tensor(s.token_ids)[:, None])[:, 0]
            # a token within fp32 noise (1e-4) of the maximum counts as the argmax: a near tie may fall either way
            assert (steps.max(-1).values - chosen <= 1e-4).all(), "greedy decoding did not pick the most likely token"

    def test_same_seed_same_samples(self, engine: Any) -> None:
        a = engine.generate(self.prompts, self._params(seed=7))
        b = engine.generate(self.prompts, self._params(seed=7))
        assert [[s.token_ids for s in o.samples] for o in a] == [[s.token_ids for s in o.samples] for o in b]

    def test_bad_requests_are_request_errors(self, engine: Any, policy: Any) -> None:
        from codemoe.core.contracts import ContextLengthError, RequestError

        with pytest.raises(RequestError, match="top_p"):
            engine.generate(self.prompts, self._params(top_p=0.0))
        context = int(policy.config.max_position_embeddings)
        with pytest.raises(ContextLengthError):
            engine.generate([[1] * context], self._params(max_new_tokens=4))

    def test_health_is_ok(self, engine: Any) -> None:
        health = engine.health()
        json.dumps(health)
        assert health.get("status") == "ok", f"health: {health}"

    def test_new_weights_change_the_samples(self, engine: Any, policy: Any) -> None:
        import torch

        changed = copy.deepcopy(policy)
        with torch.no_grad():
            changed.lm_head.weight.mul_(-1.0)  # every preference reversed
        engine.update_weights(state_dict=changed.state_dict())
        s = engine.generate(self.prompts[:1], self._params(n=1, temperature=0.0))[0].samples[0]
        with torch.no_grad():
            logits = changed(input_ids=torch.tensor([self.prompts[0] + list(s.token_ids)])).logits[0].float()
        steps = logits[len(self.prompts[0]) - 1 : -1]
        chosen = steps.gather(-1, torch.tensor(s.token_ids)[:, None])[:, 0]
        assert (steps.max(-1).values - chosen <= 1e-4).all(), "after update_weights the engine still samples the old weights"


# ---------------------------------------------------------------------------------------------------
# kind: executor
# ---------------------------------------------------------------------------------------------------


class ExecutorContract(ComponentContract):
    """An executor (kind ``executor``): a :class:`~codemoe.core.contracts.Verifier` that runs untrusted
    programs in isolation and gives one verdict per check, in order, never an exception for a
    failing program: passed, failed (with a reason), timeout within its limit, memory, the program's
    output captured, and the same verdicts for the same programs.
    """

    kind = "executor"
    timeout_s: ClassVar[float] = 2.0

    @pytest.fixture(scope="class")
    @classmethod
    def executor(cls, registry: Any, spec: dict[str, Any]) -> Any:
        executor = cls().build(registry, spec)
        try:
            yield executor
        finally:
            executor.close()

    def check_built(self, component: Any) -> None:
        from codemoe.core.contracts import Verifier

        try:
            assert isinstance(component, Verifier), f"an executor implements check_programs and close; got {type(component)}"
        finally:
            component.close()

    def _checks(self) -> list[Any]:
        from codemoe.core.contracts import ProgramCheck

        return [
            ProgramCheck("pass", "def f(x):\n    return x + 1\nprint('hello from the program')\n", "assert f(1) == 2\n"),
            ProgramCheck("fail", "def f(x):\n    return x\n", "assert f(1) == 2, 'f(1) should be 2'\n"),
            ProgramCheck("raise", "def f(x):\n    raise KeyError('boom')\n", "assert f(1) == 2\n"),
            ProgramCheck("syntax", "def f(x) return x\n", "assert f(1) == 2\n"),
        ]

    def test_one_verdict_per_check_in_order(self, executor: Any) -> None:
        verdicts = list(executor.check_programs(self._checks(), timeout_s=self.timeout_s, memory_mb=256))
        assert len(verdicts) == 4
        passed, failed, raised, syntax = verdicts
        assert passed.passed and passed.status == "passed", f"a correct program: {passed.status} {passed.reason}"
        assert "hello from the program" in passed.stdout, "the program's output is not captured"
        for name, v in (("failing assert", failed), ("exception", raised), ("syntax error", syntax)):
            assert not v.passed and v.status != "passed", f"{name} graded {v.status}"
            assert v.reason.strip(), f"{name}: a verdict that did not pass must say why"
            assert v.duration_s >= 0
        assert "f(1) should be 2" in failed.reason + failed.stderr, "the failing assertion's message is lost"

    def test_a_program_that_never_ends_times_out(self, executor: Any) -> None:
        from codemoe.core.contracts import ProgramCheck

        start = time.monotonic()
        (verdict,) = executor.check_programs([ProgramCheck("spin", "while True:\n    pass\n", "")], timeout_s=1.0, memory_mb=256)
        elapsed = time.monotonic() - start
        assert verdict.status == "timeout" and not verdict.passed, f"an endless loop graded {verdict.status}"
        assert elapsed < 30, f"a 1 s limit took {elapsed:.1f} s to enforce"

    def test_memory_beyond_the_limit_does_not_pass(self, executor: Any) -> None:
        from codemoe.core.contracts import ProgramCheck

        hog = "x = bytearray(1024 * 1024 * 1024)\nx[::4096] = b'1' * len(x[::4096])\n"
        (verdict,) = executor.check_programs([ProgramCheck("hog", hog, "")], timeout_s=10.0, memory_mb=128)
        assert not verdict.passed, f"1 GiB under a 128 MiB limit graded {verdict.status}"

    def test_same_programs_same_verdicts(self, executor: Any) -> None:
        runs = [[v.status for v in executor.check_programs(self._checks(), timeout_s=self.timeout_s)] for _ in range(2)]
        assert runs[0] == runs[1]


# ---------------------------------------------------------------------------------------------------
# kind: reward
# ---------------------------------------------------------------------------------------------------


class RewardContract(ComponentContract):
    """A reward component (kind ``reward``): ``factory(config)`` -> a callable scoring the verifier's
    reward input. Its value is a finite number with a one-line explanation, the same for the same
    input whatever else it scored before (no state between calls).

    Tests provide the inputs by overriding :meth:`reward_inputs`; codemoe-sandbox ships a varied
    set: ``codemoe.sandbox.rewards.examples.example_inputs()``.
    """

    kind = "reward"
    value_range: ClassVar[tuple[float, float] | None] = None  # e.g. (0.0, 1.0) for a rate

    def reward_inputs(self) -> Sequence[Any]:
        raise NotImplementedError(
            f"{type(self).__name__}: define reward_inputs() returning reward inputs, e.g. "
            "codemoe.sandbox.rewards.examples.example_inputs()"
        )

    @staticmethod
    def _value(result: Any) -> float:
        return float(result.total if hasattr(result, "total") else result.value)

    def test_values_are_finite_and_explained(self, registry: Any, spec: dict[str, Any]) -> None:
        reward = self.build(registry, spec)
        for inp in self.reward_inputs():
            result = reward(inp)
            value = self._value(result)
            assert math.isfinite(value), f"{getattr(inp, 'task_id', inp)!r}: value {value}"
            if self.value_range is not None:
                low, high = self.value_range
                assert low <= value <= high, f"{getattr(inp, 'task_id', inp)!r}: {value} outside {self.value_range}"
            explanation = getattr(result, "explanation", None) or getattr(result, "explanations", None)
            assert explanation is not None, "a reward must say why it gave its value"

    def test_value_depends_on_the_input_only(self, registry: Any, spec: dict[str, Any]) -> None:
        inputs = list(self.reward_inputs())
        forward = [self._value(self.build(registry, spec)(inp)) for inp in inputs]
        reward = self.build(registry, spec)
        backward = [self._value(reward(inp)) for inp in reversed(inputs)][::-1]
        again = [self._value(reward(inp)) for inp in inputs]
        assert forward == backward == again, "the same input scored differently after other inputs"


# ---------------------------------------------------------------------------------------------------
# kind: stage
# ---------------------------------------------------------------------------------------------------


class StageContract(ComponentContract):
    """A pipeline stage (kind ``stage``): ``factory(config)`` -> an object with ``run(ctx, stage)``
    returning a JSON-able result. Runs inside a real pipeline in a temporary folder: its result and
    metrics are JSON, and a resumed run skips it once it finished.

    :attr:`before` holds the stages a stage needs before it (id -> spec), e.g. an ``sft`` stage for
    one that reads its checkpoint.
    """

    kind = "stage"
    before: ClassVar[Mapping[str, Any]] = {}

    def check_built(self, component: Any) -> None:
        assert callable(getattr(component, "run", None)), f"a stage has run(ctx, stage); got {type(component)}"

    def _pipeline(self, spec: Mapping[str, Any], root: Path) -> Any:
        from omegaconf import OmegaConf

        stages = {**copy.deepcopy(dict(self.before)), "under_test": dict(spec)}
        return OmegaConf.create({"run": {"name": "conformance", "dir": str(root), "seed": 0}, "stages": stages})

    def test_runs_in_a_pipeline_and_resumes(self, registry: Any, spec: dict[str, Any], tmp_path: Path) -> None:
        from codemoe.core.plugins import Hooks, build_plugin_manager
        from codemoe.core.runs import run_pipeline

        hooks = Hooks(build_plugin_manager(extra_plugins=self.plugins))
        ctx = run_pipeline(self._pipeline(spec, tmp_path), registry, hooks, show_progress=False)
        result = ctx.results["under_test"]
        assert isinstance(result, dict), f"a stage returns a dict, got {type(result)}"
        json.dumps(result, default=str)
        for line in (ctx.run_dir / "metrics.jsonl").read_text().splitlines() if (ctx.run_dir / "metrics.jsonl").exists() else []:
            json.loads(line)
        again = run_pipeline(self._pipeline(spec, tmp_path), registry, hooks, run_dir=ctx.run_dir, show_progress=False)
        assert json.dumps(again.results["under_test"], default=str, sort_keys=True) == json.dumps(result, default=str, sort_keys=True), (
            "a resumed run must skip the finished stage and keep its result"
        )


# ---------------------------------------------------------------------------------------------------
# kind: logger
# ---------------------------------------------------------------------------------------------------


class LoggerContract(ComponentContract):
    """An experiment tracker (kind ``logger``): ``factory(config, run_dir=)`` -> an object with
    ``log(stage, step, values)`` and ``close()`` (see :mod:`codemoe.core.loggers`).

    It takes records with and without a step, and after ``close()`` what it wrote holds every value:
    define :meth:`read_back` (``run_dir`` -> ``{("<stage>/<key>", step): value}``, a record without a
    step at step 0) to have the kit compare them.
    """

    kind = "logger"
    records: ClassVar[list[tuple[str, int | None, dict[str, float]]]] = [
        ("sft", 1, {"loss": 2.5, "lr": 1e-3}),
        ("sft", 2, {"loss": 2.0, "lr": 5e-4}),
        ("rl", 1, {"reward/pass": 0.25, "kl": 0.01}),
        ("eval", None, {"pass@1": 0.4}),
    ]

    def factory_kwargs(self) -> dict[str, Any]:
        return {"run_dir": Path(tempfile.mkdtemp(prefix="codemoe-logger-"))}

    def read_back(self, run_dir: Path) -> dict[tuple[str, int], float] | None:
        """What the logger wrote under ``run_dir``; None: the kit does not read this logger's files."""
        return None

    def check_built(self, component: Any) -> None:
        try:
            assert callable(getattr(component, "log", None)), f"a logger has log(stage, step, values); got {type(component)}"
        finally:
            component.close()

    def test_every_value_is_written(self, registry: Any, spec: dict[str, Any], tmp_path: Path) -> None:
        logger = registry.build(self.kind, dict(spec), where="run.loggers[0]", run_dir=tmp_path)
        try:
            for stage, step, values in self.records:
                logger.log(stage, step, dict(values))
        finally:
            logger.close()
        written = self.read_back(tmp_path)
        if written is None:
            return
        for stage, step, values in self.records:
            for key, value in values.items():
                got = written.get((f"{stage}/{key}", 0 if step is None else step))
                assert got is not None, f"{stage}/{key} at step {step} was not written"
                assert math.isclose(got, value, rel_tol=1e-6), f"{stage}/{key}: wrote {got}, logged {value}"  # fp32 storage
