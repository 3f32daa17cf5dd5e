"""Generated tokens/s of the embedded engine on each family's tiny preset, lean decode off and on.

The workload: 4 prompts of 37 tokens x 8 samples x 64 new tokens (end-of-sequence ignored), sampled
at temperature 1, fp32, CPU, one torch thread, random weights. Each side keeps its best of
``--repeats`` runs (wall clock). Families that lean decode does not compute report it off both times.

    python benchmarks/bench_families.py mixtral qwen2_moe olmoe llama qwen3
"""

from __future__ import annotations

import argparse
import time

import torch
from codemoe.core.models import build_model
from codemoe.serving import SamplingParams
from codemoe.serving.embedded import EmbeddedEngine, EmbeddedEngineConfig

PROMPTS, SAMPLES, NEW_TOKENS = 4, 8, 64


def tokens_per_s(model: torch.nn.Module, lean: bool, repeats: int) -> tuple[bool, float]:
    """(whether lean decode ran, the best tokens/s of ``repeats`` runs)."""
    engine = EmbeddedEngine(model, None, EmbeddedEngineConfig(lean_decode=lean))
    prompts = [list(range(3 + i, 40 + i)) for i in range(PROMPTS)]
    params = SamplingParams(n=SAMPLES, temperature=1.0, max_new_tokens=NEW_TOKENS, seed=1, ignore_eos=True)
    engine.generate(prompts, SamplingParams(n=2, max_new_tokens=4, seed=0, ignore_eos=True))  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        engine.generate(prompts, params)
        best = min(best, time.perf_counter() - start)
    return engine.runner.lean is not None, PROMPTS * SAMPLES * NEW_TOKENS / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("families", nargs="+", help="families with a tiny_<family> preset")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for family in args.families:
        torch.manual_seed(0)
        model = build_model(f"tiny_{family}").eval()
        cells = []
        for lean in (False, True):
            ran, rate = tokens_per_s(model, lean, args.repeats)
            cells.append(f"lean={'on' if ran else 'off'} {rate:,.0f} tok/s")
        print(f"{family:12s} " + "  ".join(cells))


if __name__ == "__main__":
    main()
