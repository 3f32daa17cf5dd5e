"""Tiny real models for the serving tests: a codemoe MoE model and a plain ``transformers`` one.

Both share one byte-level BPE tokenizer trained here (with a chat template), so nothing is
downloaded. Models are fp32 so log-probs compare exactly with teacher-forced forwards.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "for i in range(10):\n    print(i * i)\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n",
    "import os\nprint(os.getcwd())\n",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
] * 8

CODEMOE_SPEC = {
    "name": "qwen3_moe",
    "hidden_size": 64,
    "num_layers": 2,
    "num_heads": 4,
    "num_kv_heads": 2,
    "head_dim": 16,
    "num_experts": 8,
    "moe_intermediate_size": 64,
    "router": {"name": "softmax_topk", "top_k": 2},
    "experts": {"name": "grouped"},
    "max_position_embeddings": 256,
}


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tokenizer():
    from codemoe.core.tokenizer import train_tokenizer

    return train_tokenizer(CORPUS, vocab_size=320)


def _build_codemoe_model(tokenizer, seed: int, **options):
    from codemoe.core.models import build_model

    torch.manual_seed(seed)
    return build_model({**CODEMOE_SPEC, **options}, vocab_size=len(tokenizer)).eval()


@pytest.fixture(scope="session")
def make_codemoe_model(tokenizer):
    """``make_codemoe_model(seed, **spec options)``: a fresh codemoe MoE model (routing is recorded),
    weights from ``seed``."""
    return lambda seed=0, **options: _build_codemoe_model(tokenizer, seed, **options)


@pytest.fixture(scope="session")
def codemoe_model(tokenizer):
    return _build_codemoe_model(tokenizer, 0)


@pytest.fixture(scope="session")
def hf_model(tokenizer):
    """A plain ``transformers`` Qwen3-MoE: any causal LM, no codemoe blocks, no routing."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.manual_seed(1)
    config = Qwen3MoeConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        moe_intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_experts=8,
        num_experts_per_tok=2,
        max_position_embeddings=256,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return Qwen3MoeForCausalLM(config).eval()


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory, codemoe_model, tokenizer) -> Path:
    """The codemoe model and tokenizer saved as a checkpoint directory."""
    from codemoe.core.models import save_pretrained

    return save_pretrained(codemoe_model, tokenizer, tmp_path_factory.mktemp("ckpt") / "tiny-moe")


@pytest.fixture(scope="module", params=["stdlib", "fastapi"])
def server(model_dir, request):
    """``codemoe serve`` of the saved checkpoint on a free loopback port, on each HTTP transport."""
    from codemoe.serving.embedded import EmbeddedEngineConfig, build_embedded_engine
    from codemoe.serving.handlers import ServingApp
    from codemoe.serving.server import ApiServer
    from codemoe.serving.server_fastapi import FastApiServer

    transport = {"stdlib": ApiServer, "fastapi": FastApiServer}[request.param]
    engine = build_embedded_engine(EmbeddedEngineConfig(model_dir=str(model_dir)))
    with transport(ServingApp(engine, "tiny-moe", str(model_dir)), "127.0.0.1", 0) as running:
        yield running


@pytest.fixture
def client(server):
    """The official ``openai`` client pointed at the test server."""
    import openai

    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=60)
