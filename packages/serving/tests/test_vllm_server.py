"""The vLLM launcher against a real vLLM server, driven through codemoe's ``openai`` engine.

The server runs from ``.venv-vllm`` (``make engines-vllm``) with vLLM's CPU recipe
(:mod:`codemoe.serving.vllm_server`). ``.ci/run`` builds that virtualenv (about 1.5 minutes), so CI
runs the real-server test (about 30 s); without the venv it is skipped with the reason.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request

import pytest
import torch
from codemoe.core.contracts import EngineError, SamplingParams
from codemoe.serving.remote import OpenAIEngine, OpenAIEngineConfig
from codemoe.serving.vllm_server import VLLMServer, vllm_python

PROMPTS = ["def add(a, b):", "for i in range("]
# vLLM computes in fp32 here with its own attention and MoE kernels, the teacher-forced transformers
# forward with others: sums of a few hundred products in another order differ by ~1e-6 relative;
# 1e-4 on log-probs leaves a wide margin.
LOGPROB_ATOL = 1e-4


# conftest's tiny model with 32-wide heads: vLLM's CPU attention serves no narrower ones.
SPEC = {
    "name": "qwen3_moe",
    "hidden_size": 64,
    "num_layers": 2,
    "num_heads": 2,
    "num_kv_heads": 1,
    "head_dim": 32,
    "num_experts": 8,
    "moe_intermediate_size": 64,
    "router": {"name": "softmax_topk", "top_k": 2},
    "experts": {"name": "grouped"},
    "max_position_embeddings": 256,
}


def _model(tokenizer, **options):
    from codemoe.core.models import build_model

    torch.manual_seed(0)
    return build_model({**SPEC, **options}, vocab_size=len(tokenizer)).eval()


def test_a_head_size_the_cpu_attention_cannot_serve_is_refused_before_start(tokenizer, tmp_path):
    from codemoe.core.models import save_pretrained

    folder = save_pretrained(_model(tokenizer, head_dim=16, num_heads=4, num_kv_heads=2), tokenizer, tmp_path / "m")
    with pytest.raises(EngineError, match="head_dim 16"):
        VLLMServer(folder)


def test_a_missing_virtualenv_names_the_make_target(monkeypatch, tmp_path):
    monkeypatch.setenv("CODEMOE_VLLM_PYTHON", str(tmp_path / "no-python"))
    assert vllm_python() is None
    with pytest.raises(EngineError, match="make engines-vllm"):
        VLLMServer(tmp_path)


@pytest.mark.slow
@pytest.mark.skipif(vllm_python() is None, reason="no .venv-vllm: `make engines-vllm` builds it (CI does)")
def test_greedy_logprobs_equal_a_teacher_forced_forward_pause_resume_and_stop_ends_the_group(tokenizer, tmp_path):
    from codemoe.core.models import save_pretrained

    model = _model(tokenizer)
    folder = save_pretrained(model, tokenizer, tmp_path / "tiny-moe")
    server = VLLMServer(folder)
    with server:
        group = server.process.pid
        engine = OpenAIEngine(OpenAIEngineConfig(base_url=server.url), tokenizer=tokenizer)
        before = server.cpu_seconds()
        outputs = engine.generate(PROMPTS, SamplingParams(n=1, temperature=0, max_new_tokens=8, ignore_eos=True))
        assert server.cpu_seconds() > before  # the server's processes did the work
        for prompt, out in zip(PROMPTS, outputs):
            assert out.prompt_token_ids == list(tokenizer.encode(prompt))
            for sample in out.samples:
                assert len(sample.token_ids) == 8 and sample.finish_reason == "length"
                with torch.no_grad():
                    logits = model(torch.tensor([out.prompt_token_ids + sample.token_ids])).logits[0]
                positions = logits[len(out.prompt_token_ids) - 1 : -1].float()
                want = torch.log_softmax(positions, -1).gather(1, torch.tensor(sample.token_ids)[:, None])[:, 0]
                assert torch.allclose(torch.tensor(sample.logprobs), want, atol=LOGPROB_ATOL)
        server.pause()  # a paused server answers nothing until resumed
        with pytest.raises((urllib.error.URLError, TimeoutError)):
            urllib.request.urlopen(server.url + "/health", timeout=2)
        server.resume()
        assert engine.generate(PROMPTS[:1], SamplingParams(n=1, temperature=0, max_new_tokens=8))[0].samples[0].logprobs
    assert server.process is None
    with pytest.raises(ProcessLookupError):  # the API server and its engine core went with it
        os.killpg(group, 0)
