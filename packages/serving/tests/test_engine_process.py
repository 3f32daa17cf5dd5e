"""The embedded engine in a child process (``process: true``): the same samples as in-process, the
weights shared and updated in place, the submit/collect path, refusals, and a child that dies."""

from __future__ import annotations

import copy
import os
import signal
import threading

import pytest
import torch
from codemoe.core.contracts import EngineError, RequestError, SamplingParams
from codemoe.serving.embedded import EmbeddedEngine, EmbeddedEngineConfig, build_embedded_engine

PROMPTS = ["def add(a, b):", "for i in range(", "class Stack:"]


@pytest.fixture(scope="module")
def served(tokenizer, make_codemoe_model):
    """(the model the child serves, the in-process engine on an equal copy, the process engine)."""
    model = make_codemoe_model(seed=3)
    twin = copy.deepcopy(model)
    engine = build_embedded_engine(EmbeddedEngineConfig(process=True), model=model, tokenizer=tokenizer)
    yield model, EmbeddedEngine(twin, tokenizer), engine
    engine.close()


def _same_outputs(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.prompt_token_ids == y.prompt_token_ids
        for s, t in zip(x.samples, y.samples, strict=True):
            assert s.token_ids == t.token_ids and s.text == t.text and s.finish_reason == t.finish_reason
            # the same kernels at the same thread count in both processes: equal to fp32 rounding
            assert torch.allclose(torch.tensor(s.logprobs), torch.tensor(t.logprobs), atol=1e-5, rtol=0)
            assert torch.equal(s.routing, t.routing)


def test_the_child_samples_what_the_engine_samples_in_process(served):
    _, local, remote = served
    params = SamplingParams(n=4, temperature=1.0, max_new_tokens=12, seed=7)
    _same_outputs(remote.generate(PROMPTS, params), local.generate(PROMPTS, params))
    greedy = SamplingParams(n=1, temperature=0.0, max_new_tokens=12)
    _same_outputs(remote.generate(PROMPTS, greedy), local.generate(PROMPTS, greedy))


def test_submit_and_collect_from_many_threads_give_the_same_samples(served, tokenizer):
    _, local, remote = served
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=10, seed=11)
    ids = [tokenizer.encode(p) for p in PROMPTS * 3]
    got: dict[int, object] = {}

    def one(i: int) -> None:
        handle = remote.submit(ids[i], params, seed=100 + i)
        got[i] = remote.collect(ids[i], handle)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(ids))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, prompt in enumerate(ids):
        expected = local.collect(prompt, local.submit(prompt, params, seed=100 + i))
        _same_outputs([got[i]], [expected])


def test_update_weights_reach_the_child_through_shared_memory(served, make_codemoe_model):
    model, local, remote = served
    new = make_codemoe_model(seed=5).state_dict()
    before = remote.health()["weights_version"]
    remote.update_weights(state_dict=new)
    local.update_weights(state_dict=new)
    assert all(torch.equal(model.state_dict()[k], new[k]) for k in new)  # the parent's view of the shared copy
    assert remote.health()["weights_version"] == before + 1
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=12, seed=3)
    _same_outputs(remote.generate(PROMPTS, params), local.generate(PROMPTS, params))


def test_bad_requests_and_weights_are_refused_with_the_in_process_errors(served, make_codemoe_model, tokenizer):
    _, _, remote = served
    with pytest.raises(RequestError, match="outside the vocabulary"):
        remote.generate([[10**6]], SamplingParams(max_new_tokens=2))
    with pytest.raises(RequestError, match="exceed the model's context"):
        remote.submit(tokenizer.encode("x"), SamplingParams(max_new_tokens=10**4))
    with pytest.raises(RequestError, match="'temperature'"):
        remote.generate(PROMPTS, SamplingParams(temperature=-1.0))
    with pytest.raises(RequestError, match="on_token"):
        remote.submit(tokenizer.encode("x"), SamplingParams(), on_token=print)
    other = make_codemoe_model(seed=0, num_layers=1).state_dict()
    with pytest.raises(EngineError, match="do not fit the served model"):
        remote.update_weights(state_dict=other)
    assert remote.health()["status"] == "ok"  # nothing was copied, the engine still serves


def test_a_child_that_dies_fails_the_request_in_flight_and_every_later_one(tokenizer, make_codemoe_model):
    engine = build_embedded_engine(
        EmbeddedEngineConfig(process=True), model=make_codemoe_model(seed=1), tokenizer=tokenizer
    )
    pid = engine.health()["process"]
    errors: list[BaseException] = []

    def long_request() -> None:
        try:
            engine.generate(PROMPTS * 20, SamplingParams(n=8, max_new_tokens=200, ignore_eos=True))
        except EngineError as exc:
            errors.append(exc)

    thread = threading.Thread(target=long_request)
    thread.start()
    os.kill(pid, signal.SIGKILL)
    thread.join(60)
    assert not thread.is_alive()
    assert len(errors) == 1 and "exit code -9" in str(errors[0])
    with pytest.raises(EngineError, match="exited"):
        engine.generate(PROMPTS, SamplingParams(max_new_tokens=2))
    engine.close()


def test_a_model_on_another_device_is_refused(tokenizer):
    from codemoe.core.errors import ConfigError

    model = torch.nn.Linear(2, 2).to("meta")
    with pytest.raises(ConfigError, match="CPU only"):
        build_embedded_engine(EmbeddedEngineConfig(process=True), model=model, tokenizer=tokenizer)


def test_abort_returns_the_calls_in_flight_in_the_child(make_codemoe_model, tokenizer):
    """A call in flight returns once aborted: the samples that had finished keep their 240 tokens,
    every other one ends "abort" with fewer. The request is long (96 samples of 240 tokens through
    8 slots: twelve waves of 240 decode steps), so the abort, sent as soon as the child has drawn a
    token, finds at least the last wave still waiting."""
    engine = build_embedded_engine(
        EmbeddedEngineConfig(process=True, max_batch_size=8), model=make_codemoe_model(seed=4), tokenizer=tokenizer
    )
    outputs: list = []
    caller = threading.Thread(
        target=lambda: outputs.extend(
            engine.generate(PROMPTS * 8, SamplingParams(n=4, max_new_tokens=240, ignore_eos=True))
        )
    )
    caller.start()
    while engine.health()["tokens_generated"] == 0:  # the request reached the child's engine
        pass
    engine.abort()
    caller.join(120)
    assert not caller.is_alive()
    samples = [s for out in outputs for s in out.samples]
    assert len(samples) == 96
    assert all((s.finish_reason, len(s.token_ids) == 240) in {("length", True), ("abort", False)} for s in samples)
    assert [s.finish_reason for s in outputs[-1].samples] == ["abort"] * 4  # the last wave never started
    engine.close()


SCRIPT = """
import torch
from codemoe.core.models import build_model
from codemoe.core.tokenizer import train_tokenizer
from codemoe.core.contracts import SamplingParams
from codemoe.serving.embedded import EmbeddedEngineConfig, build_embedded_engine

tokenizer = train_tokenizer(["def add(a, b):\\n    return a + b\\n"] * 8, vocab_size=300)
model = build_model({SPEC}, vocab_size=len(tokenizer)).eval()
engine = build_embedded_engine(EmbeddedEngineConfig(process=True), model=model, tokenizer=tokenizer)
(out,) = engine.generate(["def add"], SamplingParams(n=2, max_new_tokens=3, ignore_eos=True, seed=0))
print("samples", len(out.samples), [len(s.token_ids) for s in out.samples])
engine.close()
"""


def test_a_script_without_a_main_guard_can_start_the_engine_process(tmp_path):
    """The child imports codemoe's modules only, never the user's script: a script that builds the
    engine at top level (no ``if __name__ == "__main__"``) is not run a second time in the child."""
    import subprocess
    import sys

    spec = {"name": "qwen3_moe", "hidden_size": 32, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1,
            "head_dim": 16, "num_experts": 4, "moe_intermediate_size": 32, "max_position_embeddings": 64,
            "router": {"name": "softmax_topk", "top_k": 2}, "experts": {"name": "grouped"}}
    script = tmp_path / "top_level.py"
    script.write_text(SCRIPT.replace("{SPEC}", repr(spec)))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["samples 2 [3, 3]"]


def test_a_model_larger_than_the_free_shared_memory_is_refused_before_anything_moves(
    make_codemoe_model, tokenizer, monkeypatch
):
    """A container's /dev/shm is often 64 MiB: the refusal names both sizes and the way out (the
    machine's own statvfs is replaced by one of a nearly full /dev/shm)."""
    from codemoe.core.errors import ConfigError
    from codemoe.serving import engine_process

    model = make_codemoe_model(seed=2)
    monkeypatch.setattr(engine_process.os, "statvfs", lambda path: type("S", (), {"f_bavail": 1, "f_frsize": 4096})())
    with pytest.raises(ConfigError, match=r"MiB through /dev/shm, which has 0 MiB free.*process: false"):
        build_embedded_engine(EmbeddedEngineConfig(process=True), model=model, tokenizer=tokenizer)
    assert not any(p.is_shared() for p in model.parameters())  # nothing was moved


def test_encode_gives_the_token_ids_of_the_in_process_engine(served, tokenizer):
    _, local, remote = served
    assert [remote.encode(p) for p in PROMPTS] == [local.encode(p) for p in PROMPTS]
    with pytest.raises(RequestError, match="outside the vocabulary"):
        remote.encode([10**6])
