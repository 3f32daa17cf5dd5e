"""Check a running SGLang server (or ``codemoe serve``) against codemoe's own reference, in one go.

Run it where the server runs, against the checkpoint the server loaded::

    python -m codemoe.serving.sglang_check --url http://127.0.0.1:30000 --model-dir runs/x/policy \\
        --routing --json sglang_check.json

It reports, as JSON: health; greedy agreement of the ``sglang`` engine with the embedded engine
(fp32 on CPU) token by token; the largest difference between the server's log-probs and a
teacher-forced fp32 forward of the server's own tokens; routing agreement (with ``--routing``);
and a weight round trip through ``/update_weights_from_disk`` (perturbed weights change the output,
the original weights bring it back). Exact agreement is expected from ``codemoe serve``; a bf16
GPU server agrees up to rounding (the report gives the numbers, the reader judges them).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import torch
from codemoe.core.contracts import SamplingParams
from codemoe.serving.checkpoint import load_checkpoint
from codemoe.serving.embedded import EmbeddedEngine
from codemoe.serving.remote import SGLangEngine, SGLangEngineConfig

__all__ = ["check", "main"]


def _teacher_forced(model, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(tokens)[:, None]).squeeze(1)


def check(url: str, model_dir: str, *, prompts: int = 4, new_tokens: int = 16, routing: bool = False) -> dict[str, Any]:
    """Run every check; return the report."""
    model, tokenizer = load_checkpoint(model_dir)
    model = model.float()
    reference = EmbeddedEngine(model, tokenizer)
    remote = SGLangEngine(SGLangEngineConfig(base_url=url, return_routing=routing), model=model, tokenizer=tokenizer)
    generator = torch.Generator().manual_seed(0)
    ids = [
        torch.randint(3, model.config.vocab_size, (8 + 4 * i,), generator=generator).tolist() for i in range(prompts)
    ]
    params = SamplingParams(temperature=0, max_new_tokens=new_tokens, ignore_eos=True)
    got, want = remote.generate(ids, params), reference.generate(ids, params)
    pairs = [(g.samples[0], w.samples[0], p) for g, w, p in zip(got, want, ids)]
    same_tokens = sum(a == b for g, w, _ in pairs for a, b in zip(g.token_ids, w.token_ids))
    logprob_gap = max(
        float((torch.tensor(g.logprobs) - _teacher_forced(model, p, g.token_ids)).abs().max()) for g, _, p in pairs
    )
    report: dict[str, Any] = {
        "url": url,
        "health": remote.health(),
        "greedy_token_agreement": same_tokens / (len(pairs) * new_tokens),
        "greedy_sequences_identical": sum(g.token_ids == w.token_ids for g, w, _ in pairs),
        "sequences": len(pairs),
        "max_logprob_gap_vs_fp32_teacher_forcing": logprob_gap,
    }
    if routing:
        agree = [
            float((g.routing.sort(-1).values == w.routing.sort(-1).values).float().mean())
            for g, w, _ in pairs
            if g.token_ids == w.token_ids and g.routing is not None
        ]
        report["routing_agreement_on_identical_sequences"] = sum(agree) / len(agree) if agree else None
    report["weight_round_trip"] = _round_trip(remote, model, tokenizer, ids[:1], params, got[0].samples[0].token_ids)
    return report


def _round_trip(remote: SGLangEngine, model, tokenizer, ids, params, before: list[int]) -> dict[str, bool]:
    """Perturbed weights change the output; the original weights restore it."""
    with tempfile.TemporaryDirectory() as tmp:
        noisy = {
            k: v + 0.05 * torch.randn_like(v) if v.is_floating_point() else v for k, v in model.state_dict().items()
        }
        model.save_pretrained(Path(tmp) / "noisy", state_dict=noisy)
        tokenizer.save_pretrained(Path(tmp) / "noisy")
        remote.update_weights(path=str(Path(tmp) / "noisy"))
        changed = remote.generate(ids, params)[0].samples[0].token_ids != before
        model.save_pretrained(Path(tmp) / "original")
        tokenizer.save_pretrained(Path(tmp) / "original")
        remote.update_weights(path=str(Path(tmp) / "original"))
        restored = remote.generate(ids, params)[0].samples[0].token_ids == before
    return {"perturbed_weights_change_output": changed, "original_weights_restore_output": restored}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="check an SGLang (or codemoe) server against codemoe's reference")
    parser.add_argument("--url", required=True, help="server root, e.g. http://127.0.0.1:30000")
    parser.add_argument("--model-dir", required=True, help="the checkpoint the server loaded")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--routing", action="store_true", help="also compare routed experts")
    parser.add_argument("--json", type=Path, help="write the report here too")
    args = parser.parse_args(argv)
    report = check(args.url, args.model_dir, prompts=args.prompts, new_tokens=args.new_tokens, routing=args.routing)
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
