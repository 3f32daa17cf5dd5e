"""The ``sglang`` engine over a real SGLang server and ``codemoe serve`` at once: one fleet.

Both load one fp32 checkpoint, so greedy samples agree (the log-prob tolerance of
``test_sglang_server.py`` applies). The engine spreads a call over both, pushes one weight version to
both, and when ``codemoe serve`` goes away the real SGLang server takes its part. Skipped with the
reason without ``.venv-sglang`` (``make engines``; CI builds it).
"""

from __future__ import annotations

import re
import warnings

import pytest
import torch
from codemoe.core.contracts import SamplingParams
from codemoe.serving.remote import SGLangEngine, SGLangEngineConfig
from codemoe.serving.sglang_server import SGLangServer, sglang_python

pytestmark = [pytest.mark.slow, pytest.mark.sglang]

SPEC = {
    "name": "qwen3_moe", "hidden_size": 64, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2, "head_dim": 16,
    "num_experts": 8, "moe_intermediate_size": 64, "router": {"name": "softmax_topk", "top_k": 2},
    "experts": {"name": "grouped"}, "max_position_embeddings": 512,
}
PROMPTS = [[5 + i, 6 + 2 * i, 7 + 3 * i] for i in range(6)]
GREEDY = SamplingParams(n=2, temperature=0, max_new_tokens=6, ignore_eos=True)
# fp32 on both servers with other attention kernels: ~1e-6 relative apart; 1e-4 leaves a wide margin
LOGPROB_ATOL = 1e-4


def _model(tokenizer, seed: int):
    from codemoe.core.models import build_model

    torch.manual_seed(seed)
    return build_model(SPEC, vocab_size=len(tokenizer)).eval()


def test_a_fleet_of_sglang_and_codemoe_serve_spreads_updates_and_fails_over(tokenizer, tmp_path):
    if sglang_python() is None:
        pytest.skip("no .venv-sglang: `make engines` builds it (CI does)")
    from codemoe.core.models import save_pretrained
    from codemoe.serving.embedded import EmbeddedEngine, EmbeddedEngineConfig, build_embedded_engine
    from codemoe.serving.handlers import ServingApp
    from codemoe.serving.server import ApiServer

    model = _model(tokenizer, 0)
    folder = save_pretrained(model, tokenizer, tmp_path / "policy")
    ours = ApiServer(ServingApp(build_embedded_engine(EmbeddedEngineConfig(model_dir=str(folder))), "p", str(folder)),
                     "127.0.0.1", 0).start()
    try:
        with SGLangServer(folder) as real:
            engine = SGLangEngine(SGLangEngineConfig(base_url=[ours.url, real.url], sync_dir=str(tmp_path / "sync")),
                                  model=model, tokenizer=tokenizer)
            new = _model(tokenizer, 3)
            reference = EmbeddedEngine(new, tokenizer)
            engine.update_weights(state_dict=new.state_dict())  # both take one weight_version
            with warnings.catch_warnings():
                warnings.simplefilter("error", RuntimeWarning)
                _agree(engine.generate(PROMPTS, GREEDY), reference.generate(PROMPTS, GREEDY))  # half each
            ours.stop()
            with pytest.warns(RuntimeWarning, match=rf"{re.escape(ours.url)} failed .*go to {re.escape(real.url)}"):
                _agree(engine.generate(PROMPTS, GREEDY), reference.generate(PROMPTS, GREEDY))
            assert [s["status"] for s in engine.health()["servers"]] == ["unreachable", "ok"]
    finally:
        ours.stop()


def _agree(got, want) -> None:
    assert [[s.token_ids for s in o.samples] for o in got] == [[s.token_ids for s in o.samples] for o in want]
    for g, w in zip(got, want):
        for a, b in zip(g.samples, w.samples):
            assert a.logprobs == pytest.approx(b.logprobs, abs=LOGPROB_ATOL)
