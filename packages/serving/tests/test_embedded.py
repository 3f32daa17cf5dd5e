"""The embedded engine against teacher-forced forwards and ``transformers`` generate."""

from __future__ import annotations

import threading
import time

import pytest
import torch
from codemoe.core.moe import capture_routing
from codemoe.serving import ContextLengthError, RequestError, SamplingParams
from codemoe.serving.embedded import EmbeddedEngine, EmbeddedEngineConfig

PROMPTS = ["def add(a, b):", "for i in range(", "class Stack:\n    def"]


def teacher_forced_logprobs(model, prompt_ids, token_ids, temperature):
    """log_softmax(logits / T) of ``token_ids`` under one full forward of prompt + completion."""
    full = torch.tensor([prompt_ids + token_ids])
    with torch.no_grad():
        logits = model(full).logits[0, len(prompt_ids) - 1 : -1].float()
    logp = torch.log_softmax(logits / (temperature or 1.0), dim=-1)
    return logp.gather(1, torch.tensor(token_ids)[:, None]).squeeze(1)


@pytest.mark.parametrize("which", ["codemoe_model", "hf_model"])
def test_greedy_equals_transformers_generate(which, request, tokenizer):
    model = request.getfixturevalue(which)
    engine = EmbeddedEngine(model, tokenizer)
    outputs = engine.generate(PROMPTS, SamplingParams(temperature=0, max_new_tokens=24, ignore_eos=True))
    for out in outputs:
        prompt = torch.tensor([out.prompt_token_ids])
        with torch.no_grad():
            ref = model.generate(prompt, do_sample=False, max_new_tokens=24, min_new_tokens=24, pad_token_id=2)
        assert out.samples[0].token_ids == ref[0, prompt.shape[1] :].tolist()


@pytest.mark.parametrize("shared_attention", [True, False], ids=["shared-prefix-attention", "gathered-keys"])
@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.3])
def test_logprobs_match_teacher_forced_forward(temperature, shared_attention, codemoe_model, tokenizer):
    engine = EmbeddedEngine(codemoe_model, tokenizer, EmbeddedEngineConfig(shared_prefix_attention=shared_attention))
    params = SamplingParams(n=3, temperature=temperature, max_new_tokens=20, seed=7, ignore_eos=True)
    for out in engine.generate(PROMPTS, params):
        for sample in out.samples:
            expected = teacher_forced_logprobs(codemoe_model, out.prompt_token_ids, sample.token_ids, temperature)
            assert torch.allclose(torch.tensor(sample.logprobs), expected, atol=1e-4, rtol=0)


def test_prefix_sharing_gives_the_samples_of_no_sharing(codemoe_model, tokenizer):
    params = SamplingParams(n=4, temperature=1.0, top_p=0.9, max_new_tokens=16, seed=11, ignore_eos=True)
    shared = EmbeddedEngine(codemoe_model, tokenizer, EmbeddedEngineConfig(prefix_sharing=True))
    alone = EmbeddedEngine(codemoe_model, tokenizer, EmbeddedEngineConfig(prefix_sharing=False))
    a, b = shared.generate(PROMPTS, params), alone.generate(PROMPTS, params)
    assert [[s.token_ids for s in o.samples] for o in a] == [[s.token_ids for s in o.samples] for o in b]
    assert len({tuple(s.token_ids) for s in a[0].samples}) > 1  # the n samples differ from each other


def test_continuous_batching_with_few_slots_gives_the_same_samples(codemoe_model, tokenizer):
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=12, seed=5)
    wide = EmbeddedEngine(codemoe_model, tokenizer, EmbeddedEngineConfig(max_batch_size=64))
    narrow = EmbeddedEngine(codemoe_model, tokenizer, EmbeddedEngineConfig(max_batch_size=3))
    a, b = wide.generate(PROMPTS * 2, params), narrow.generate(PROMPTS * 2, params)
    assert [[s.token_ids for s in o.samples] for o in a] == [[s.token_ids for s in o.samples] for o in b]
    assert narrow.health()["running"] == 0


def test_samples_that_end_at_different_steps_leave_the_batch(codemoe_model, tokenizer):
    budgets = [4, 13, 7, 10]

    def run(engine, indices):
        jobs = []
        for i in indices:
            ids = engine.encode([*PROMPTS, "import os"][i])
            params = SamplingParams(n=2, max_new_tokens=budgets[i], ignore_eos=True)
            jobs.append((ids, engine.submit(ids, params, seed=3, prompt_index=i)))
        return [engine.collect(ids, parts) for ids, parts in jobs]

    narrow = EmbeddedEngine(codemoe_model, tokenizer, EmbeddedEngineConfig(max_batch_size=5))
    together = run(narrow, range(4))  # groups join and leave while others run
    for i, out in enumerate(together):
        (alone,) = run(EmbeddedEngine(codemoe_model, tokenizer), [i])
        assert [s.token_ids for s in out.samples] == [s.token_ids for s in alone.samples]
        assert [len(s.token_ids) for s in out.samples] == [budgets[i]] * 2
        expected = teacher_forced_logprobs(codemoe_model, out.prompt_token_ids, out.samples[1].token_ids, 1.0)
        assert torch.allclose(torch.tensor(out.samples[1].logprobs), expected, atol=1e-4, rtol=0)
    assert narrow.health()["running"] == 0 and narrow.health()["waiting"] == 0


def test_seed_makes_samples_reproducible(codemoe_model, tokenizer):
    engine = EmbeddedEngine(codemoe_model, tokenizer)

    def tokens(seed):
        out = engine.generate(PROMPTS[:1], SamplingParams(n=3, max_new_tokens=10, seed=seed, ignore_eos=True))
        return [s.token_ids for s in out[0].samples]

    assert tokens(1) == tokens(1)
    assert tokens(1) != tokens(2)


def test_top_k_one_is_greedy(codemoe_model, tokenizer):
    engine = EmbeddedEngine(codemoe_model, tokenizer)
    greedy = engine.generate(PROMPTS, SamplingParams(temperature=0, max_new_tokens=10, ignore_eos=True))
    top1 = engine.generate(PROMPTS, SamplingParams(top_k=1, max_new_tokens=10, seed=3, ignore_eos=True))
    assert [o.samples[0].token_ids for o in greedy] == [o.samples[0].token_ids for o in top1]


def test_finish_reasons_and_stop_strings(codemoe_model, tokenizer):
    engine = EmbeddedEngine(codemoe_model, tokenizer)
    free = engine.generate(PROMPTS[:1], SamplingParams(temperature=0, max_new_tokens=30, ignore_eos=True))[0]
    sample = free.samples[0]
    assert sample.finish_reason == "length" and len(sample.token_ids) == 30
    stop = sample.text[len(sample.text) // 2 :][:2]  # a piece of text the greedy continuation will produce
    cut = engine.generate(PROMPTS[:1], SamplingParams(temperature=0, max_new_tokens=30, stop=[stop], ignore_eos=True))
    stopped = cut[0].samples[0]
    assert stopped.finish_reason == "stop"
    assert stopped.text == sample.text[: sample.text.find(stop)]
    assert stopped.token_ids == sample.token_ids[: len(stopped.token_ids)]


def test_an_end_of_sequence_token_ends_a_sample_and_is_kept(hf_model, tokenizer):
    greedy = (
        EmbeddedEngine(hf_model, tokenizer)
        .generate(PROMPTS[:1], SamplingParams(temperature=0, max_new_tokens=12, ignore_eos=True))[0]
        .samples[0]
        .token_ids
    )
    end = next(i for i, t in enumerate(greedy) if i >= 2 and t not in greedy[:i])
    previous = hf_model.generation_config.eos_token_id
    hf_model.generation_config.eos_token_id = greedy[end]  # this model's end-of-sequence token
    try:
        engine = EmbeddedEngine(hf_model, tokenizer)
    finally:
        hf_model.generation_config.eos_token_id = previous
    sample = engine.generate(PROMPTS[:1], SamplingParams(temperature=0, max_new_tokens=12))[0].samples[0]
    assert sample.token_ids == greedy[: end + 1] and sample.finish_reason == "stop"
    ignoring = engine.generate(PROMPTS[:1], SamplingParams(temperature=0, max_new_tokens=12, ignore_eos=True))
    assert ignoring[0].samples[0].token_ids == greedy


def test_a_request_longer_than_the_context_is_refused(codemoe_model, tokenizer):
    engine = EmbeddedEngine(codemoe_model, tokenizer)
    prompt = list(range(3, 203))  # 200 tokens; the context is 256
    with pytest.raises(ContextLengthError, match="exceed the model's context of 256"):
        engine.generate([prompt], SamplingParams(max_new_tokens=57))
    out = engine.generate([prompt], SamplingParams(max_new_tokens=56, temperature=0, ignore_eos=True))
    assert len(out[0].samples[0].token_ids) == 56


@pytest.mark.parametrize(
    ("prompts", "params", "message"),
    [
        ([[]], SamplingParams(), "empty"),
        ([[999999]], SamplingParams(), "outside the vocabulary"),
        (["x"], SamplingParams(temperature=-1), "temperature"),
        (["x"], SamplingParams(n=0), "'n'"),
        (["x"], SamplingParams(top_p=0), "top_p"),
    ],
)
def test_malformed_requests_are_refused(prompts, params, message, codemoe_model, tokenizer):
    with pytest.raises(RequestError, match=message):
        EmbeddedEngine(codemoe_model, tokenizer).generate(prompts, params)


def test_routing_matches_a_teacher_forced_capture(codemoe_model, tokenizer):
    engine = EmbeddedEngine(codemoe_model, tokenizer)
    out = engine.generate(PROMPTS[:2], SamplingParams(n=2, max_new_tokens=8, seed=3, ignore_eos=True))
    for o in out:
        prompt_len = len(o.prompt_token_ids)
        for sample in o.samples:
            full = torch.tensor([o.prompt_token_ids + sample.token_ids])
            with torch.no_grad(), capture_routing(codemoe_model) as record:
                codemoe_model(full)
            layers = record.forwards[0]
            expected = torch.stack([layers[i] for i in sorted(layers)], dim=1)  # [positions, layers, k]
            assert sample.routing.shape == (8, 2, 2)
            assert torch.equal(sample.routing.long(), expected[prompt_len - 1 : -1])
            assert torch.equal(o.prompt_routing.long(), expected[:prompt_len])


def test_plain_transformers_models_report_no_routing(hf_model, tokenizer):
    out = EmbeddedEngine(hf_model, tokenizer).generate(PROMPTS[:1], SamplingParams(max_new_tokens=4))
    assert out[0].samples[0].routing is None and out[0].prompt_routing is None


def test_update_weights_changes_outputs_to_the_new_weights(make_codemoe_model, tokenizer, tmp_path):
    from codemoe.core.models import save_pretrained

    old, new = make_codemoe_model(0), make_codemoe_model(1)
    params = SamplingParams(n=2, max_new_tokens=12, seed=4, ignore_eos=True)
    want = [[s.token_ids for s in o.samples] for o in EmbeddedEngine(new, tokenizer).generate(PROMPTS, params)]
    engine = EmbeddedEngine(old, tokenizer)
    before = [[s.token_ids for s in o.samples] for o in engine.generate(PROMPTS, params)]
    engine.update_weights(state_dict=new.state_dict())
    after = [[s.token_ids for s in o.samples] for o in engine.generate(PROMPTS, params)]
    assert before != want and after == want

    fresh = EmbeddedEngine(make_codemoe_model(0), tokenizer)
    fresh.update_weights(path=str(save_pretrained(new, tokenizer, tmp_path / "new")))
    assert [[s.token_ids for s in o.samples] for o in fresh.generate(PROMPTS, params)] == want
    assert fresh.health()["weights_version"] == 1


def test_update_weights_refuses_weights_of_another_model(make_codemoe_model, tokenizer):
    from codemoe.serving import EngineError

    with pytest.raises(EngineError, match="do not fit"):
        EmbeddedEngine(make_codemoe_model(), tokenizer).update_weights(state_dict={"bogus": torch.zeros(1)})


def test_engine_is_built_through_the_registry(codemoe_model, tokenizer):
    from codemoe.core import build_plugin_manager, build_registry
    from codemoe.core.errors import ConfigError

    registry = build_registry(build_plugin_manager())
    engine = registry.build(
        "engine", {"name": "embedded", "max_batch_size": 8}, model=codemoe_model, tokenizer=tokenizer
    )
    assert isinstance(engine, EmbeddedEngine) and engine.config.max_batch_size == 8
    assert engine.health()["status"] == "ok" and engine.health()["routing"] is True
    with pytest.raises(ConfigError, match="max_batch_sise"):
        registry.build("engine", {"name": "embedded", "max_batch_sise": 8}, model=codemoe_model)


def test_concurrent_generate_calls_share_the_engine(codemoe_model, tokenizer):
    import threading

    engine = EmbeddedEngine(codemoe_model, tokenizer)
    params = [SamplingParams(n=2, max_new_tokens=6 + 3 * i, seed=i, ignore_eos=True) for i in range(3)]
    want = [EmbeddedEngine(codemoe_model, tokenizer).generate([p], q) for p, q in zip(PROMPTS, params)]
    got: dict[int, list] = {}
    threads = [
        threading.Thread(target=lambda i=i: got.__setitem__(i, engine.generate([PROMPTS[i]], params[i])))
        for i in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert [[s.token_ids for s in got[i][0].samples] for i in range(3)] == [
        [s.token_ids for s in w[0].samples] for w in want
    ]


def test_a_transformers_checkpoint_directory_loads(hf_model, tokenizer, tmp_path):
    """A plain Qwen3-MoE folder is served with codemoe's blocks (so it reports its routing), as the
    evaluator loads it: the same greedy tokens as the transformers model itself."""
    from codemoe.serving.embedded import build_embedded_engine

    hf_model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    engine = build_embedded_engine(EmbeddedEngineConfig(model_dir=str(tmp_path)))
    params = SamplingParams(temperature=0, max_new_tokens=6, ignore_eos=True)
    got = engine.generate(PROMPTS[:1], params)[0].samples[0]
    assert got.token_ids == EmbeddedEngine(hf_model, tokenizer).generate(PROMPTS[:1], params)[0].samples[0].token_ids
    assert got.routing is not None and engine.health()["routing"] is True


def test_a_failing_step_ends_every_request_in_flight(codemoe_model, tokenizer, monkeypatch):
    from codemoe.serving import EngineError

    engine = EmbeddedEngine(codemoe_model, tokenizer)
    ids = engine.encode(PROMPTS[0])
    parts = engine.submit(ids, SamplingParams(n=2, max_new_tokens=8))
    monkeypatch.setattr(engine, "_decode", lambda: (_ for _ in ()).throw(RuntimeError("device lost")))
    with pytest.raises(RuntimeError, match="device lost"):
        engine.step()
    with pytest.raises(EngineError, match="device lost"):
        engine.collect(ids, parts)
    monkeypatch.undo()
    assert engine.health()["running"] == 0
    assert len(engine.generate(PROMPTS[:1], SamplingParams(max_new_tokens=3))[0].samples) == 1  # serves again


@pytest.mark.parametrize("how", ["cancel", "abort"])
def test_cancel_and_abort_end_running_and_waiting_prompts(how, codemoe_model, tokenizer):
    """cancel(handles) stops the prompts it is given (a client went away); abort() every request in
    flight, no handles needed (a trainer whose new weights make the batch in flight worthless).
    Either way the samples end "abort" with the tokens drawn so far (the engine is stepped by hand,
    so the point where it lands is fixed), and a request after it runs whole."""
    engine = EmbeddedEngine(codemoe_model, tokenizer, EmbeddedEngineConfig(max_batch_size=2))
    params = SamplingParams(n=2, max_new_tokens=50, ignore_eos=True)
    ids = engine.encode(PROMPTS[0])
    running, waiting = engine.submit(ids, params), engine.submit(ids, params, prompt_index=1)
    engine.step()  # prefill draws the first token, then one decode: 2 tokens
    engine.step()  # 3 tokens; the second prompt still waits for slots
    engine.cancel(running + waiting) if how == "cancel" else engine.abort()
    first, second = engine.collect(ids, running), engine.collect(ids, waiting)
    assert [s.finish_reason for s in first.samples + second.samples] == ["abort"] * 4
    assert [len(s.token_ids) for s in first.samples + second.samples] == [3, 3, 0, 0]
    assert engine.health()["running"] == 0 and engine.health()["waiting"] == 0
    after = engine.generate(PROMPTS[:1], SamplingParams(n=1, max_new_tokens=6, ignore_eos=True))
    assert after[0].samples[0].finish_reason == "length" and len(after[0].samples[0].token_ids) == 6


def test_a_cancel_from_another_thread_lands_after_the_step_in_progress(codemoe_model, tokenizer):
    """While one thread drives a long generation step after step, a cancel from another thread is
    served as soon as the step in progress ends: the sample keeps exactly the tokens drawn by then.
    (An unfair lock let the driving thread take it back for hundreds of steps: a trainer's abort or
    weight update waited behind a whole batch.) The driving thread holds the lock inside its fifth
    token's callback until the cancel is queued for it, so the point where it lands is fixed."""
    engine = EmbeddedEngine(codemoe_model, tokenizer)
    canceller: list[threading.Thread] = []
    drawn = []

    def on_token(event):
        drawn.append(event.token_id)
        if len(drawn) == 5:  # inside the step that draws the fifth token, holding the lock
            canceller.append(threading.Thread(target=engine.cancel, args=(parts,)))
            canceller[0].start()
            deadline = time.monotonic() + 60
            while engine.threads_waiting < 1 and time.monotonic() < deadline:  # the cancel is queued
                time.sleep(0.001)

    ids = engine.encode(PROMPTS[0])
    parts = engine.submit(ids, SamplingParams(n=1, max_new_tokens=200, ignore_eos=True), on_token=on_token)
    out = engine.collect(ids, parts)
    canceller[0].join()
    assert out.samples[0].finish_reason == "abort" and len(out.samples[0].token_ids) == 5


def test_an_engine_without_the_fair_lock_generates_the_same_and_counts_no_waiters(codemoe_model, tokenizer):
    params = SamplingParams(n=2, max_new_tokens=6, seed=3, ignore_eos=True)
    fair = EmbeddedEngine(codemoe_model, tokenizer)
    plain = EmbeddedEngine(codemoe_model, tokenizer, EmbeddedEngineConfig(fair_lock=False))
    assert [s.token_ids for s in plain.generate(PROMPTS[:1], params)[0].samples] == \
        [s.token_ids for s in fair.generate(PROMPTS[:1], params)[0].samples]
    assert plain.threads_waiting == 0 == fair.threads_waiting


def test_the_engine_lock_is_handed_over_in_arrival_order():
    from codemoe.serving.embedded import FairRLock

    lock, order = FairRLock(), []
    with lock, lock:  # re-entrant
        waiter = threading.Thread(target=lambda: (lock.acquire(), order.append("waiter"), lock.release()))
        waiter.start()
        deadline = time.monotonic() + 60
        while lock.waiting < 1 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert lock.waiting == 1
    with lock:  # asked after the waiter: served after it
        order.append("owner again")
    waiter.join()
    assert order == ["waiter", "owner again"]
    with pytest.raises(RuntimeError, match="does not hold"):
        lock.release()
