"""Forward+backward throughput of codemoe's MoE block against transformers' Qwen3-MoE block.

Same weights, same inputs, fp32 on CPU, in one run: codemoe's block (softmax top-k router,
grouped experts) versus ``Qwen3MoeSparseMoeBlock`` with its ``grouped_mm`` and ``eager`` experts
implementations. The roofline is a dense SwiGLU MLP doing the same matmul FLOPs (all ``T·k``
rows through one expert-sized MLP), measured in the same run: the fraction of it an
implementation reaches says how much the routing, permutation and small matmuls cost.

    python benchmarks/bench_moe.py --json bench_moe.json

One thread by default: on a small shared CPU, BLAS threads synchronising around every small
matmul measure the machine's load more than the kernels (``--threads N`` to change it). Both wall
time and the process's CPU time are reported; ratios use wall time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class Case:
    tokens: int
    hidden: int
    inter: int
    experts: int
    top_k: int

    @property
    def name(self) -> str:
        return f"T{self.tokens}_H{self.hidden}_I{self.inter}_E{self.experts}_k{self.top_k}"

    @property
    def flops(self) -> float:
        """Matmul FLOPs of forward + backward: 3 passes x 2 FLOPs x rows x (H·2I + I·H)."""
        return 6.0 * self.tokens * self.top_k * 3 * self.hidden * self.inter


CASES = [Case(4096, 512, 256, 16, 2), Case(4096, 512, 128, 64, 8)]


def _hf_block(case: Case, implementation: str):
    from transformers import Qwen3MoeConfig
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

    config = Qwen3MoeConfig(
        hidden_size=case.hidden,
        moe_intermediate_size=case.inter,
        num_experts=case.experts,
        num_experts_per_tok=case.top_k,
        norm_topk_prob=True,
    )
    config._experts_implementation = implementation
    return Qwen3MoeSparseMoeBlock(config)


def _codemoe_block(case: Case, registry):
    from codemoe.core.moe import GroupedExperts, MoEBlock

    router = registry.build(
        "router", {"name": "softmax_topk", "top_k": case.top_k}, hidden_size=case.hidden, num_experts=case.experts
    )
    return MoEBlock(router, GroupedExperts(case.experts, case.hidden, case.inter))


class _DenseRoofline(torch.nn.Module):
    """One SwiGLU MLP of expert width over all T·k rows: the same matmul FLOPs, no routing."""

    def __init__(self, case: Case) -> None:
        super().__init__()
        self.gate_up = torch.nn.Linear(case.hidden, 2 * case.inter, bias=False)
        self.down = torch.nn.Linear(case.inter, case.hidden, bias=False)
        self.rows = case.tokens * case.top_k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


def _step(module: torch.nn.Module, x: torch.Tensor, grad: torch.Tensor) -> Callable[[], None]:
    def run() -> None:
        module.zero_grad(set_to_none=True)
        xi = x.detach().requires_grad_()
        out = module(xi)
        out.backward(grad.view_as(out))

    return run


def bench_case(case: Case, registry, repeat: int) -> dict[str, tuple[float, float]]:
    """Median (wall, CPU) seconds of one forward+backward per implementation."""
    torch.manual_seed(0)
    grouped = _hf_block(case, "grouped_mm")
    with torch.no_grad():
        for p in grouped.parameters():
            p.normal_(0, 0.02)
    eager = _hf_block(case, "eager")
    eager.load_state_dict(grouped.state_dict())
    ours = _codemoe_block(case, registry)
    ours.load_state_dict(grouped.state_dict())
    x = torch.randn(1, case.tokens, case.hidden)
    grad = torch.randn(1, case.tokens, case.hidden)
    with torch.no_grad():
        ref = grouped(x)
        torch.testing.assert_close(ours(x), ref, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(eager(x), ref, rtol=1e-4, atol=1e-5)
    roof = _DenseRoofline(case)
    x_rows = torch.randn(roof.rows, case.hidden)
    grad_rows = torch.randn(roof.rows, case.hidden)
    runs = {
        "codemoe": _step(ours, x, grad),
        "hf_grouped_mm": _step(grouped, x, grad),
        "hf_eager": _step(eager, x, grad),
        "dense_roofline": _step(roof, x_rows, grad_rows),
    }
    wall: dict[str, list[float]] = {name: [] for name in runs}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    for run in runs.values():
        run()  # warm-up
    for _ in range(repeat):  # round-robin, so load from other processes spreads over all of them
        for name, run in runs.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            run()
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
    return {name: (statistics.median(wall[name]), statistics.median(cpu[name])) for name in runs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write per-case results to this file")
    parser.add_argument("--repeat", type=int, default=5, help="timed repetitions per implementation (median)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from codemoe.core.models import default_registry

    registry = default_registry()
    results: dict[str, dict] = {}
    header = f"{'case':<32} {'impl':<15} {'wall ms':>9} {'cpu ms':>9} {'tok/s':>9} {'GFLOP/s':>8} {'roofline':>8} {'codemoe x':>9}"
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, fp32 CPU, forward+backward")
    print(header)
    for case in CASES:
        measured = bench_case(case, registry, args.repeat)
        seconds = {impl: wall for impl, (wall, _) in measured.items()}
        for impl, (sec, cpu_sec) in measured.items():
            speedup = seconds[impl] / seconds["codemoe"]
            print(
                f"{case.name:<32} {impl:<15} {sec * 1e3:>9.1f} {cpu_sec * 1e3:>9.1f} {case.tokens / sec:>9.0f} "
                f"{case.flops / sec / 1e9:>8.1f} {seconds['dense_roofline'] / sec:>8.2f} {speedup:>9.2f}"
            )
        tok = {impl: case.tokens / sec for impl, sec in seconds.items()}
        for anchor in ("hf_grouped_mm", "hf_eager"):
            results[f"{case.name}/vs_{anchor}"] = {
                "codemoe": tok["codemoe"],
                "anchor": tok[anchor],
                "ratio": tok["codemoe"] / tok[anchor],
                "units": "tokens/s (forward+backward)",
            }
        results[f"{case.name}/roofline_fraction"] = {
            "codemoe": seconds["dense_roofline"] / seconds["codemoe"],
            "anchor": seconds["dense_roofline"] / seconds["hf_grouped_mm"],
            "anchor_eager": seconds["dense_roofline"] / seconds["hf_eager"],
            "ratio": seconds["hf_grouped_mm"] / seconds["codemoe"],
            "units": "fraction of the dense-matmul roofline",
        }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
