"""The ``sglang`` engine against a real SGLang server and against ``codemoe serve``: the same tests.

The real server runs from ``.venv-sglang`` (``make engines``; CI builds it) with SGLang's CPU
recipe (:mod:`codemoe.serving.sglang_server`). Without that virtualenv the real-server half is
skipped with the reason; ``.ci/run`` always builds it, so CI runs both halves.

SGLang reports routed experts for every decoder layer; the engine keeps the MoE ones, in codemoe's
layout, prompt included. SGLang 0.5.23 builds every Qwen3-MoE layer sparse (it ignores
``mlp_only_layers``: a checkpoint with dense layers is served with wrong log-probs, measured here at
2-4e-2), so the checkpoint both servers load has MoE layers only, and the mapping of an all-layer
report with dense layers is checked against ``codemoe serve``, which reports them SGLang's way.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import warnings

import pytest
import torch
from codemoe.core.contracts import EngineError, RequestError, SamplingParams
from codemoe.serving.remote import SGLangEngine, SGLangEngineConfig
from codemoe.serving.sglang_server import SGLangServer, sglang_python

pytestmark = [pytest.mark.slow, pytest.mark.sglang]

PROMPTS = ["def add(a, b):", "for i in range("]
# the serving tests' tiny MoE (conftest.CODEMOE_SPEC), with room for a 500-token sample
CONTEXT = {"max_position_embeddings": 512}
# Both servers compute in fp32 on this CPU, with other attention kernels than the teacher-forced
# transformers forward (SGLang: torch_native; codemoe: its own decode path): sums of a few hundred
# products in another order differ by ~1e-6 relative; 1e-4 on log-probs leaves a wide margin.
LOGPROB_ATOL = 1e-4


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, tokenizer, make_codemoe_model):
    from codemoe.core.models import save_pretrained

    model = make_codemoe_model(0, **CONTEXT)
    return model, save_pretrained(model, tokenizer, tmp_path_factory.mktemp("sglang-ckpt") / "tiny-moe-dense")


@pytest.fixture(scope="module", params=["codemoe-serve", "sglang"])
def endpoint(request, checkpoint):
    """(kind, base url) of a server that loaded the checkpoint."""
    _, folder = checkpoint
    if request.param == "codemoe-serve":  # its own process, as SGLang's (a weight-update group spans processes)
        from codemoe.serving.server_process import CodemoeServer

        with CodemoeServer(folder) as server:
            yield request.param, server.url
        return
    if sglang_python() is None:
        pytest.skip("no .venv-sglang: `make engines` builds it (CI does)")
    with SGLangServer(folder) as server:
        yield request.param, server.url


def _engine(url, model, tokenizer, **options) -> SGLangEngine:
    return SGLangEngine(SGLangEngineConfig(base_url=url, **options), model=model, tokenizer=tokenizer)


def _teacher_forced(model, prompt: list[int], tokens: list[int]):
    """Log-probs of ``tokens`` after ``prompt`` and each MoE layer's experts at every position."""
    from codemoe.core.moe import capture_routing

    with torch.no_grad(), capture_routing(model) as record:
        logits = model(torch.tensor([prompt + tokens])).logits[0].float()
    logprobs = torch.log_softmax(logits[len(prompt) - 1 : -1], -1).gather(1, torch.tensor(tokens)[:, None]).squeeze(1)
    routes = torch.stack([record.forwards[0][layer] for layer in sorted(record.forwards[0])], dim=1)  # [T, L, k]
    return logprobs, routes


def _greedy(max_new_tokens=8, n=2):
    return SamplingParams(n=n, temperature=0, max_new_tokens=max_new_tokens, ignore_eos=True)


def test_greedy_logprobs_equal_a_teacher_forced_forward(endpoint, checkpoint, tokenizer):
    _, url = endpoint
    model, _ = checkpoint
    engine = _engine(url, model, tokenizer)
    outputs = engine.generate(PROMPTS, _greedy())
    for prompt, out in zip(PROMPTS, outputs):
        assert out.prompt_token_ids == list(tokenizer.encode(prompt))  # the server's tokenization, returned
        for sample in out.samples:
            assert len(sample.token_ids) == 8 and sample.finish_reason == "length"
            want, _ = _teacher_forced(model, out.prompt_token_ids, sample.token_ids)
            assert torch.allclose(torch.tensor(sample.logprobs), want, atol=LOGPROB_ATOL)


def test_routed_experts_are_the_models_own_routing_prompt_included(endpoint, checkpoint, tokenizer):
    _, url = endpoint
    model, _ = checkpoint
    _check_routing(_engine(url, model, tokenizer, return_routing=True), model, tokenizer, [0, 1])


def test_an_all_layer_report_with_dense_layers_maps_onto_the_moe_layers(tokenizer, make_codemoe_model, tmp_path):
    from codemoe.core.models import save_pretrained
    from codemoe.serving.embedded import EmbeddedEngineConfig, build_embedded_engine
    from codemoe.serving.handlers import ServingApp
    from codemoe.serving.server import ApiServer

    model = make_codemoe_model(0, **CONTEXT, num_layers=3, dense_layers=[1])
    folder = save_pretrained(model, tokenizer, tmp_path / "dense")
    served = build_embedded_engine(EmbeddedEngineConfig(model_dir=str(folder)))
    with ApiServer(ServingApp(served, "dense", str(folder)), "127.0.0.1", 0) as running:
        with pytest.warns(RuntimeWarning, match="ignores mlp_only_layers"):  # what real SGLang would do with it
            engine = _engine(running.url, model, tokenizer, return_routing=True)
        _check_routing(engine, model, tokenizer, [0, 2])


def _check_routing(engine, model, tokenizer, moe_layers):
    assert engine.moe_layers == moe_layers
    ids = [list(tokenizer.encode(p)) for p in PROMPTS]
    for prompt, out in zip(ids, engine.generate(ids, _greedy())):
        assert out.prompt_routing is not None  # routing replay needs the prompt's rows too
        assert out.prompt_routing.shape == (len(prompt), len(moe_layers), 2)
        for sample in out.samples:
            assert sample.routing.shape == (len(sample.token_ids), len(moe_layers), 2)
            assert torch.equal(out.prompt_routing[-1], sample.routing[0])
            _, want = _teacher_forced(model, prompt, sample.token_ids)
            got = torch.cat([out.prompt_routing[:-1], sample.routing])  # positions 0 .. P + G - 2
            assert torch.equal(got.sort(-1).values, want[:-1].sort(-1).values)


def test_a_stop_string_ends_the_sample_and_is_cut_from_its_text(endpoint, checkpoint, tokenizer):
    _, url = endpoint
    model, _ = checkpoint
    engine = _engine(url, model, tokenizer)
    free = engine.generate([PROMPTS[0]], _greedy(max_new_tokens=12, n=1))[0].samples[0]
    text = tokenizer.decode(free.token_ids)
    stop = text.strip()[2:4] if len(text.strip()) >= 4 else text[-1]
    params = SamplingParams(n=1, temperature=0, max_new_tokens=12, stop=[stop])
    sample = engine.generate([PROMPTS[0]], params)[0].samples[0]
    assert sample.finish_reason == "stop"
    assert stop not in sample.text and stop in tokenizer.decode(sample.token_ids)  # tokens kept, text cut
    assert sample.token_ids == free.token_ids[: len(sample.token_ids)]
    assert len(sample.logprobs) == len(sample.token_ids)


# Buckets of 50 KiB: the tiny model's ~330 KiB of weights go in several, and a decoder layer's
# experts are split across buckets (the server must load a layer only once it is whole).
@pytest.mark.parametrize("weight_sync", ["disk", "tensor", "distributed"])
def test_a_weight_update_changes_the_logprobs_and_every_later_sample_carries_its_version(
    endpoint, checkpoint, tokenizer, make_codemoe_model, tmp_path, weight_sync
):
    _, url = endpoint
    model, folder = checkpoint
    engine = _engine(url, make_codemoe_model(0, **CONTEXT), tokenizer, sync_dir=str(tmp_path / "sync"),
                     weight_sync=weight_sync, bucket_mb=0.05)
    new = make_codemoe_model(5, **CONTEXT)
    try:
        engine.update_weights(state_dict=new.state_dict())
        first = engine.weight_version
        out = engine.generate([PROMPTS[0]], _greedy(n=1))[0]
        want, _ = _teacher_forced(new, out.prompt_token_ids, out.samples[0].token_ids)
        assert torch.allclose(torch.tensor(out.samples[0].logprobs), want, atol=LOGPROB_ATOL)
        assert not any((tmp_path / "sync").glob("*")) if weight_sync != "disk" else any((tmp_path / "sync").glob("*"))
        with pytest.raises(EngineError, match="refused the weights"):  # HTTP 400 {"success": false}
            engine.update_weights(path=str(tmp_path / "missing"))
        assert engine.weight_version == first
        other = _engine(url, model, tokenizer)  # another client moves the server on
        other.update_weights(path=str(folder))
        with pytest.raises(EngineError, match="weight_version"):
            engine.generate([PROMPTS[0]], _greedy(n=1))
    finally:
        _engine(url, model, tokenizer).update_weights(path=str(folder))


def test_tensors_of_weights_the_model_lacks_are_refused_by_codemoe_and_ignored_by_sglang(endpoint, checkpoint, tokenizer):
    """codemoe serve refuses a name its checkpoint does not have; SGLang's loaders skip such names
    (its model's load_weights), so there the update is taken and nothing changes: the names the
    engine sends come from transformers' own conversion (checkpoint_names), and the update tests
    above check their effect on log-probs."""
    kind, url = endpoint
    model, _ = checkpoint
    engine = _engine(url, model, tokenizer)
    before = engine.generate([PROMPTS[0]], _greedy(n=1))[0].samples[0]
    wrong = {"model.layers.9.mlp.gate.weight": torch.ones(8, 64)}  # a layer the model does not have
    if kind == "codemoe-serve":
        with pytest.raises(EngineError, match="refused /update_weights_from_tensor.*not a weight of this model"):
            engine.update_weights_from_tensors(wrong.items())
        assert engine.weight_version is None
    else:
        engine.update_weights_from_tensors(wrong.items())
    after = engine.generate([PROMPTS[0]], _greedy(n=1))[0].samples[0]
    assert after.token_ids == before.token_ids and after.logprobs == before.logprobs


def test_abort_ends_running_samples_with_finish_reason_abort(endpoint, checkpoint, tokenizer):
    _, url = endpoint
    model, _ = checkpoint
    engine = _engine(url, model, tokenizer)
    box = {}

    def long_generation():
        box["out"] = engine.generate([[5, 6, 7]], SamplingParams(temperature=0, max_new_tokens=500, ignore_eos=True))

    worker = threading.Thread(target=long_generation)
    worker.start()
    deadline = time.monotonic() + 120
    while worker.is_alive() and time.monotonic() < deadline:  # until the request is there to abort
        engine.abort()
        worker.join(0.05)
    worker.join()
    sample = box["out"][0].samples[0]
    assert sample.finish_reason == "abort"
    assert len(sample.token_ids) < 500 and len(sample.logprobs) == len(sample.token_ids)


def test_flushing_the_cache_keeps_the_samples(endpoint, checkpoint, tokenizer):
    _, url = endpoint
    model, _ = checkpoint
    engine = _engine(url, model, tokenizer)
    before = engine.generate(PROMPTS, _greedy())
    engine.flush_cache()  # the prefix cache goes; greedy samples from the same weights do not change
    after = engine.generate(PROMPTS, _greedy())
    assert [[s.token_ids for s in o.samples] for o in after] == [[s.token_ids for s in o.samples] for o in before]


def test_bad_requests_are_request_errors(endpoint, checkpoint, tokenizer):
    _, url = endpoint
    model, _ = checkpoint
    engine = _engine(url, model, tokenizer)
    with pytest.raises(RequestError, match="HTTP 400"):
        engine.generate([list(range(3, 600))], SamplingParams(max_new_tokens=50))  # past the context


def test_seeded_sampling_warns_where_the_server_ignores_seeds(endpoint, checkpoint, tokenizer):
    kind, url = endpoint
    model, _ = checkpoint
    engine = _engine(url, model, tokenizer)
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=4, seed=3, ignore_eos=True)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        engine.generate(PROMPTS, params)
    deterministic = [w for w in seen if "deterministic" in str(w.message)]
    # codemoe serve honours every seed; SGLang's CPU recipe cannot run --enable-deterministic-inference
    assert len(deterministic) == (1 if kind == "sglang" else 0)


def test_the_cpu_recipe_leaves_a_trainer_half_the_cores_and_the_scheduler_sleeps_when_idle(monkeypatch, tmp_path):
    """Without OMP_NUM_THREADS the server's torch gets half the machine's cores (a server on every
    core stalls its parallel ops on the cores a trainer beside it holds); a value the caller set
    stands. The scheduler blocks on its sockets when idle instead of polling them."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    server = SGLangServer(tmp_path, python=sys.executable)
    assert server.env()["OMP_NUM_THREADS"] == str(max(1, (os.cpu_count() or 2) // 2))
    assert "--sleep-on-idle" in server.args
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert SGLangServer(tmp_path, python=sys.executable).env()["OMP_NUM_THREADS"] == "3"
