"""The embedded engine's contracts, checked on a given device (a GPU when one is lent).

The test suite runs on CPU. This module repeats its main checks on any device, with the ``tiny``
MoE preset (random weights, fp32) and random token prompts, so it needs no tokenizer or data:

- log-probs of sampled tokens equal a teacher-forced forward of the same model (within 1e-4);
- greedy tokens equal ``transformers`` ``generate``;
- prefix sharing and common-prefix roots give the samples of an engine without them;
- weight sync to a server: new weights from a policy on the device, sent in buckets
  (``weight_sync: tensor``) by the ``sglang`` engine to a ``codemoe serve`` whose model is on the
  device, give the new model's log-probs (the ``distributed`` way needs a GPU per side: NCCL
  refuses two ranks on one GPU, so one lent GPU cannot check it).

    python -m codemoe.serving.device_check --device cuda [--json PATH]

Exit status 0 when every check passes; each check prints one line.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch
from codemoe.core.device_checks import device_name, report

__all__ = ["run_checks"]


def _teacher_forced(model, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    device = next(model.parameters()).device
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens], device=device)).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(tokens, device=device)[:, None]).squeeze(1).cpu()


def run_checks(device: str, model_name: str = "tiny", prompts: int = 4, new_tokens: int = 24) -> dict[str, Any]:
    """Run every check on ``device``; returns ``{check: {"ok": bool, ...figures}}``."""
    from codemoe.core.models import build_model
    from codemoe.serving import SamplingParams
    from codemoe.serving.embedded import EmbeddedEngine, EmbeddedEngineConfig

    torch.manual_seed(0)
    model = build_model(model_name).to(device).eval()
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(1)
    head = torch.randint(3, vocab, (80,), generator=g).tolist()  # a shared start: roots form
    ids = [head + torch.randint(3, vocab, (5 + i,), generator=g).tolist() for i in range(prompts)]
    ids.append(torch.randint(3, vocab, (17,), generator=g).tolist())  # and one prompt apart
    results: dict[str, Any] = {}

    sampled = SamplingParams(n=3, temperature=1.0, max_new_tokens=new_tokens, seed=5, ignore_eos=True)
    engine = EmbeddedEngine(model, None, EmbeddedEngineConfig(common_prefix_tokens=32))
    outputs = engine.generate(ids, sampled)
    worst = max(
        (torch.tensor(s.logprobs) - _teacher_forced(model, o.prompt_token_ids, s.token_ids)).abs().max().item()
        for o in outputs
        for s in o.samples
    )
    results["logprobs_match_teacher_forcing"] = {"ok": worst <= 1e-4, "max_abs_diff": worst}
    results["roots_formed"] = {
        "ok": engine.health()["common_prefix_tokens_saved"] > 0,
        "tokens_saved": engine.health()["common_prefix_tokens_saved"],
    }

    plain = EmbeddedEngine(model, None, EmbeddedEngineConfig(prefix_sharing=False, common_prefix_tokens=0))
    alone = plain.generate(ids, sampled)
    same = [[s.token_ids for s in o.samples] for o in outputs] == [[s.token_ids for s in o.samples] for o in alone]
    results["sharing_and_roots_give_the_same_samples"] = {"ok": same}

    greedy = SamplingParams(temperature=0, max_new_tokens=new_tokens, ignore_eos=True)
    mismatches = 0
    for out in engine.generate(ids, greedy):
        prompt = torch.tensor([out.prompt_token_ids], device=device)
        with torch.no_grad():
            ref = model.generate(
                prompt, do_sample=False, max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=0
            )
        mismatches += out.samples[0].token_ids != ref[0, prompt.shape[1] :].tolist()
    results["greedy_equals_transformers_generate"] = {"ok": mismatches == 0, "mismatched_prompts": mismatches}
    results["weight_sync_in_buckets"] = _weight_sync_check(model_name, device, ids[0], new_tokens)
    return results


def _weight_sync_check(model_name: str, device: str, prompt: list[int], new_tokens: int) -> dict[str, Any]:
    """A ``codemoe serve`` (in this process) on the device takes a policy's new weights from the
    ``sglang`` engine in buckets; its greedy log-probs are then the new model's."""
    import time

    from codemoe.core.models import build_model
    from codemoe.serving import SamplingParams
    from codemoe.serving.embedded import EmbeddedEngine
    from codemoe.serving.handlers import ServingApp
    from codemoe.serving.remote import SGLangEngine, SGLangEngineConfig
    from codemoe.serving.server import ApiServer

    torch.manual_seed(0)
    served = build_model(model_name).to(device).eval()
    torch.manual_seed(7)
    policy = build_model(model_name).to(device).eval()
    with ApiServer(ServingApp(EmbeddedEngine(served, None), "p", ""), "127.0.0.1", 0) as running:
        engine = SGLangEngine(SGLangEngineConfig(base_url=running.url, bucket_mb=1.0), model=policy)
        started = time.perf_counter()
        engine.update_weights_from_tensors(policy.state_dict().items())
        seconds = time.perf_counter() - started
        out = engine.generate([prompt], SamplingParams(temperature=0, max_new_tokens=new_tokens, ignore_eos=True))[0]
    sample = out.samples[0]
    gap = (torch.tensor(sample.logprobs) - _teacher_forced(policy, out.prompt_token_ids, sample.token_ids)).abs().max().item()
    return {"ok": gap <= 1e-4, "max_abs_diff": gap, "update_seconds": seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--model", default="tiny", help="model preset in registry/models (default tiny)")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    name = device_name(args.device)
    print(f"embedded engine on {name} (torch {torch.__version__})")
    results = run_checks(args.device, args.model)
    return report(name, results, args.json)


if __name__ == "__main__":
    sys.exit(main())
