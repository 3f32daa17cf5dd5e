"""``codemoe serve`` driven over loopback by the official ``openai`` client and plain HTTP."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request

import numpy as np
import openai
import pytest
import torch
from codemoe.serving import SamplingParams
from codemoe.serving.embedded import EmbeddedEngine


def post(server, path, payload, raw: bytes | None = None):
    """(status, JSON body) of a POST, 4xx/5xx included."""
    data = raw if raw is not None else json.dumps(payload).encode()
    req = urllib.request.Request(server.url + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def get(server, path):
    with urllib.request.urlopen(server.url + path, timeout=60) as resp:
        return resp.status, json.loads(resp.read())


@pytest.fixture(scope="module")
def reference(model_dir):
    """An embedded engine over the same checkpoint, to compare the server's answers with."""
    from codemoe.serving.checkpoint import load_checkpoint

    model, tokenizer = load_checkpoint(model_dir)
    return EmbeddedEngine(model, tokenizer)


def test_models_and_health(client, server):
    assert [m.id for m in client.models.list().data] == ["tiny-moe"]
    status, health = get(server, "/health")
    assert status == 200 and health["status"] == "ok" and health["routing"] is True
    assert get(server, "/get_model_info")[1]["is_generation"] is True
    assert get(server, "/health_generate") == (200, {"status": "ok"})


def test_completion_equals_the_engine_with_logprobs(client, reference):
    params = SamplingParams(n=2, temperature=0.8, max_new_tokens=12, seed=5, ignore_eos=True)
    want = reference.generate(["def add(a, b):"], params)[0].samples
    resp = client.completions.create(
        model="tiny-moe",
        prompt="def add(a, b):",
        n=2,
        temperature=0.8,
        max_tokens=12,
        seed=5,
        logprobs=1,
        extra_body={"ignore_eos": True, "return_tokens_as_token_ids": True},
    )
    assert [c.text for c in resp.choices] == [s.text for s in want]
    for choice, sample in zip(resp.choices, want):
        assert choice.logprobs.tokens == [f"token_id:{t}" for t in sample.token_ids]
        assert choice.logprobs.token_logprobs == pytest.approx(sample.logprobs, abs=1e-6)
        assert choice.finish_reason == "length"
    assert resp.usage.completion_tokens == 24


def test_a_batch_of_prompts_numbers_choices_prompt_major(client, reference):
    prompts = ["def add(a, b):", "for i in range("]
    want = reference.generate(prompts, SamplingParams(n=2, max_new_tokens=6, seed=9, ignore_eos=True))
    resp = client.completions.create(
        model="tiny-moe", prompt=prompts, n=2, max_tokens=6, seed=9, extra_body={"ignore_eos": True}
    )
    assert [c.index for c in resp.choices] == [0, 1, 2, 3]
    assert [c.text for c in resp.choices] == [s.text for o in want for s in o.samples]


def test_streaming_gives_the_text_of_the_non_streamed_answer(client):
    kwargs = {"model": "tiny-moe", "prompt": "class Stack:", "max_tokens": 16, "seed": 3, "n": 2}
    whole = client.completions.create(**kwargs)
    pieces = {0: "", 1: ""}
    finish = {}
    for chunk in client.completions.create(stream=True, **kwargs):
        for choice in chunk.choices:
            pieces[choice.index] += choice.text
            if choice.finish_reason:
                finish[choice.index] = choice.finish_reason
    assert [pieces[0], pieces[1]] == [c.text for c in whole.choices]
    assert finish == {c.index: c.finish_reason for c in whole.choices}


def test_chat_uses_the_tokenizer_chat_template(client, reference):
    messages = [{"role": "system", "content": "You write Python."}, {"role": "user", "content": "def fib(n):"}]
    prompt = reference.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)["input_ids"]
    want = reference.generate([prompt], SamplingParams(temperature=0, max_new_tokens=10))[0].samples[0]
    resp = client.chat.completions.create(
        model="tiny-moe", messages=messages, temperature=0, max_tokens=10, logprobs=True
    )
    assert resp.choices[0].message.role == "assistant"
    assert resp.choices[0].message.content == want.text
    assert [c.logprob for c in resp.choices[0].logprobs.content] == pytest.approx(want.logprobs, abs=1e-6)
    assert resp.usage.prompt_tokens == len(prompt)


def test_chat_streaming(client):
    kwargs = {"model": "tiny-moe", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "seed": 1}
    whole = client.chat.completions.create(**kwargs).choices[0].message.content
    streamed = "".join(
        c.choices[0].delta.content or "" for c in client.chat.completions.create(stream=True, **kwargs) if c.choices
    )
    assert streamed == whole


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"temperature": -1}, "temperature"),
        ({"n": 0}, "n"),
        ({"top_p": 1.5}, "top_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"logprobs": 5}, "logprobs"),
    ],
)
def test_bad_parameters_are_400_naming_the_field(client, kwargs, field):
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="tiny-moe", prompt="x", **{"max_tokens": 4, **kwargs})
    assert info.value.status_code == 400 and field in str(info.value)


def test_malformed_requests_get_clear_4xx(server, client):
    status, body = post(server, "/v1/completions", None, raw=b"{not json")
    assert status == 400 and "not valid JSON" in body["error"]["message"]
    status, body = post(server, "/v1/completions", {"model": "tiny-moe"})
    assert status == 400 and "prompt" in body["error"]["message"]
    status, body = post(server, "/v1/completions", ["a", "list"])
    assert status == 400 and "JSON object" in body["error"]["message"]
    status, body = post(server, "/v1/nothing", {})
    assert status == 404 and "/v1/completions" in body["error"]["message"]
    status, body = post(server, "/v1/models", {})
    assert status == 405
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.completions.create(model="gpt-4", prompt="x", max_tokens=2)
    with pytest.raises(openai.BadRequestError, match=r"messages\.0\.role"):
        client.chat.completions.create(model="tiny-moe", messages=[{"role": "wizard", "content": "x"}])


def test_a_request_longer_than_the_context_is_refused(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="tiny-moe", prompt=list(range(3, 203)), max_tokens=100)
    assert info.value.code == "context_length_exceeded" and "256" in str(info.value)


def test_sglang_generate_returns_logprobs_and_routed_experts(server, reference):
    payload = {
        "input_ids": [[5, 6, 7, 8]],
        "sampling_params": {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True},
        "return_logprob": True,
        "return_routed_experts": True,
    }
    status, body = post(server, "/generate", payload)
    assert status == 200 and len(body) == 1
    result = body[0]
    want = reference.generate([[5, 6, 7, 8]], SamplingParams(temperature=0, max_new_tokens=6, ignore_eos=True))[0]
    assert result["output_ids"] == want.samples[0].token_ids
    assert result["meta_info"]["finish_reason"] == {"type": "length", "length": 6}
    assert [lp for lp, _, _ in result["meta_info"]["output_token_logprobs"]] == pytest.approx(
        want.samples[0].logprobs, abs=1e-6
    )
    routed = np.frombuffer(base64.b64decode(result["meta_info"]["routed_experts"]), dtype=np.int32)
    routed = torch.from_numpy(routed.copy()).reshape(4 + 6 - 1, 2, 2)  # positions x layers x k
    assert torch.equal(routed[3:], want.samples[0].routing)
    assert torch.equal(routed[:3], want.prompt_routing[:3])


def test_sglang_generate_text_prompt_single_result(server):
    status, body = post(server, "/generate", {"text": "def add", "sampling_params": {"max_new_tokens": 3}})
    assert status == 200 and isinstance(body, dict) and body["meta_info"]["completion_tokens"] <= 3
    status, body = post(server, "/generate", {"sampling_params": {"max_new_tokens": 3}})
    assert status == 400 and "exactly one of 'text' or 'input_ids'" in body["error"]["message"]


def test_update_weights_from_disk(server, make_codemoe_model, tokenizer, tmp_path, model_dir):
    from codemoe.core.models import save_pretrained

    payload = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True}}
    new = make_codemoe_model(3)
    want = EmbeddedEngine(new, tokenizer).generate(
        [[5, 6, 7]], SamplingParams(temperature=0, max_new_tokens=8, ignore_eos=True)
    )
    before = post(server, "/generate", payload)[1]["output_ids"]
    status, body = post(
        server, "/update_weights_from_disk", {"model_path": str(save_pretrained(new, tokenizer, tmp_path / "n"))}
    )
    assert status == 200 and body["success"] is True
    after = post(server, "/generate", payload)[1]["output_ids"]
    assert after == want[0].samples[0].token_ids != before
    status, body = post(server, "/update_weights_from_disk", {"model_path": str(tmp_path / "missing")})
    assert status == 400 and body["success"] is False and "config.json" in body["message"]
    assert post(server, "/update_weights_from_disk", {"model_path": str(model_dir)})[1]["success"] is True


def test_streaming_with_a_stop_string_never_sends_the_stop_string(client):
    kwargs = {"model": "tiny-moe", "prompt": "def fib(n):", "max_tokens": 30, "temperature": 0}
    free = client.completions.create(**kwargs).choices[0].text
    stop = free[len(free) // 2 :][:3]
    whole = client.completions.create(stop=[stop], **kwargs).choices[0]
    streamed = "".join(c.choices[0].text for c in client.completions.create(stream=True, stop=[stop], **kwargs))
    assert whole.finish_reason == "stop" and whole.text == free[: free.find(stop)]
    assert streamed == whole.text


def test_a_client_that_leaves_mid_stream_stops_its_generation(server):
    import socket
    import time

    body = json.dumps({"model": "tiny-moe", "prompt": "x", "max_tokens": 200, "stream": True, "ignore_eos": True})
    host, port = server.server_address
    with socket.create_connection((host, port), timeout=30) as sock:
        request = f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}"
        sock.sendall(request.encode())
        received = b""
        while b"data: " not in received:  # generation is running
            received += sock.recv(4096)
    deadline = time.monotonic() + 30
    while get(server, "/health")[1]["running"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert get(server, "/health")[1]["running"] == 0


def test_an_abort_all_that_comes_before_a_request_submits_its_prompt_still_ends_it(reference, monkeypatch):
    """``/abort_request`` with ``abort_all`` ends every ``/generate`` request received, also one
    whose prompt is not yet in the engine (the request is parsed, not yet submitted): that prompt is
    cancelled as it is submitted, and the request answers at once with no tokens."""
    from codemoe.serving.handlers import ServingApp

    app = ServingApp(EmbeddedEngine(reference.model, reference.tokenizer), "tiny-moe")
    submit = app.engine.submit

    def abort_first(*args, **kwargs):
        assert app.abort_request({"abort_all": True}) == (200, None)
        return submit(*args, **kwargs)

    monkeypatch.setattr(app.engine, "submit", abort_first)
    status, result = app.generate({"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 200, "ignore_eos": True}})
    assert status == 200
    assert result["meta_info"]["finish_reason"]["type"] == "abort" and result["output_ids"] == []
