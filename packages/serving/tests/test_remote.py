"""The ``openai`` and ``sglang`` engines driving ``codemoe serve`` over loopback."""

from __future__ import annotations

import pytest
import torch
from codemoe.core import build_plugin_manager, build_registry
from codemoe.core.errors import ConfigError
from codemoe.serving import EngineError, RequestError, SamplingParams
from codemoe.serving.embedded import EmbeddedEngine
from codemoe.serving.remote import OpenAIEngine, SGLangEngine

PROMPTS = ["def add(a, b):", "for i in range("]


@pytest.fixture(scope="module")
def registry():
    return build_registry(build_plugin_manager())


@pytest.fixture(scope="module")
def reference(model_dir):
    from codemoe.serving.checkpoint import load_checkpoint

    model, tokenizer = load_checkpoint(model_dir)
    return EmbeddedEngine(model, tokenizer)


def tokens(outputs):
    return [[s.token_ids for s in o.samples] for o in outputs]


def test_openai_engine_gives_the_embedded_engine_samples(server, registry, reference):
    engine = registry.build("engine", {"name": "openai", "base_url": server.url})  # ids come from the server
    assert isinstance(engine, OpenAIEngine)
    params = SamplingParams(n=3, temperature=0.9, max_new_tokens=10, seed=21, ignore_eos=True)
    got, want = engine.generate(PROMPTS, params), reference.generate(PROMPTS, params)
    assert tokens(got) == tokens(want)
    assert [o.prompt_token_ids for o in got] == [o.prompt_token_ids for o in want]
    for g, w in zip(got, want):
        for a, b in zip(g.samples, w.samples):
            assert a.text == b.text and a.finish_reason == b.finish_reason
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-6)
    assert engine.health()["status"] == "ok"


def test_sglang_engine_greedy_logprobs_and_routing(server, registry, reference):
    engine = registry.build(
        "engine", {"name": "sglang", "base_url": server.url, "return_routing": True}, model=reference.model
    )
    assert isinstance(engine, SGLangEngine)
    ids = [reference.encode(p) for p in PROMPTS]
    params = SamplingParams(n=2, temperature=0, max_new_tokens=7, ignore_eos=True)
    got, want = engine.generate(ids, params), reference.generate(ids, params)
    assert tokens(got) == tokens(want)
    for g, w in zip(got, want):
        for a, b in zip(g.samples, w.samples):
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-6)
            assert torch.equal(a.routing, b.routing)


def test_sglang_engine_seeded_sampling_is_reproducible(server, registry):
    engine = registry.build("engine", {"name": "sglang", "base_url": server.url})
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=8, seed=4, ignore_eos=True)
    first, second = engine.generate(PROMPTS, params), engine.generate(PROMPTS, params)
    assert tokens(first) == tokens(second)
    assert len({tuple(t) for t in tokens(first)[0]}) > 1  # each sample has its own seed


def test_remote_update_weights_from_a_state_dict(server, registry, reference, make_codemoe_model, tmp_path):
    engine = registry.build(
        "engine",
        {"name": "sglang", "base_url": server.url, "sync_dir": str(tmp_path / "sync")},
        model=make_codemoe_model(0),
        tokenizer=reference.tokenizer,
    )
    params = SamplingParams(temperature=0, max_new_tokens=6, ignore_eos=True)
    new = make_codemoe_model(8)
    want = tokens(EmbeddedEngine(new, reference.tokenizer).generate([[5, 6, 7]], params))
    engine.update_weights(state_dict=new.state_dict())
    assert tokens(engine.generate([[5, 6, 7]], params)) == want
    engine.update_weights(state_dict=reference.model.state_dict())  # back to the served weights
    assert tokens(engine.generate([[5, 6, 7]], params)) == tokens(reference.generate([[5, 6, 7]], params))


def test_remote_errors_are_clear(server, registry):
    engine = registry.build("engine", {"name": "sglang", "base_url": server.url})
    with pytest.raises(RequestError, match="HTTP 400"):
        engine.generate([list(range(3, 250))], SamplingParams(max_new_tokens=50))
    with pytest.raises(EngineError, match="needs the model passed as model="):  # its checkpoint names
        engine.update_weights(state_dict={})
    on_disk = registry.build("engine", {"name": "sglang", "base_url": server.url, "weight_sync": "disk"})
    with pytest.raises(EngineError, match="sync_dir"):
        on_disk.update_weights(state_dict={})
    with pytest.raises(ConfigError, match="weight_sync': 'nccl' is not one of tensor, disk, distributed"):
        registry.build("engine", {"name": "sglang", "base_url": server.url, "weight_sync": "nccl"})
    down = registry.build("engine", {"name": "openai", "base_url": "http://127.0.0.1:9", "timeout_s": 2})
    assert down.health()["status"] == "unreachable"
    with pytest.raises(EngineError, match="failed"):
        down.generate(["x"], SamplingParams(max_new_tokens=2))


def test_the_prepared_sglang_check_passes_against_codemoe_serve(server, model_dir):
    from codemoe.serving.sglang_check import check

    report = check(server.url, str(model_dir), prompts=2, new_tokens=6, routing=True)
    assert report["health"]["status"] == "ok"
    assert report["greedy_token_agreement"] == 1.0 and report["greedy_sequences_identical"] == 2
    assert report["max_logprob_gap_vs_fp32_teacher_forcing"] < 1e-4
    assert report["routing_agreement_on_identical_sequences"] == 1.0
    assert report["weight_round_trip"] == {
        "perturbed_weights_change_output": True,
        "original_weights_restore_output": True,
    }


@pytest.fixture
def misbehaving():
    """A loopback HTTP server whose answers are not SGLang's: a body per path."""
    import http.server
    import threading

    bodies = {"/generate": b"<html>not json</html>", "/update_weights_from_disk": b'{"success": false, "message": "no"}'}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = bodies.get(self.path, b"[]")
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", bodies
    server.shutdown()
    server.server_close()


def test_a_misbehaving_server_gives_engine_errors_not_parse_errors(misbehaving, registry):
    url, bodies = misbehaving
    engine = registry.build("engine", {"name": "sglang", "base_url": url})
    with pytest.raises(EngineError, match="not JSON"):
        engine.generate([[5, 6]], SamplingParams(max_new_tokens=2))
    bodies["/generate"] = b"[]"  # no result for the one request sent
    with pytest.raises(EngineError, match="for 1 requests"):
        engine.generate([[5, 6]], SamplingParams(max_new_tokens=2))
    bodies["/generate"] = b'[{"text": "", "output_ids": [3], "meta_info": {"finish_reason": {"type": "cosmic"}}}]'
    with pytest.raises(EngineError, match="unknown finish_reason"):
        engine.generate([[5, 6]], SamplingParams(max_new_tokens=2))
    with pytest.raises(EngineError, match="refused the weights"):
        engine.update_weights(path="/somewhere")


def test_remote_engines_encode_text_prompts_with_their_tokenizer(server, registry, reference):
    """An agent episode's prompt is text that the episode runner encodes with the engine's
    ``encode``: the token ids the embedded engine would use; no tokenizer, a clear error."""
    for name in ("sglang", "openai"):
        engine = registry.build("engine", {"name": name, "base_url": server.url}, tokenizer=reference.tokenizer)
        assert [engine.encode(p) for p in PROMPTS] == [reference.encode(p) for p in PROMPTS]
        assert engine.encode([5, 6]) == [5, 6]
        bare = registry.build("engine", {"name": name, "base_url": server.url})
        with pytest.raises(RequestError, match="no tokenizer"):
            bare.encode("def f():")
