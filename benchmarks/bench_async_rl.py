"""Wall time per RL step with asynchronous rollouts (``max_staleness: 1``) against the synchronous
loop, in one pipeline run on one machine, and held-out pass@1 of each after the same samples; with
``--sglang-steps N`` also the RL step against a real SGLang server (``.venv-sglang``).

The pipeline is the quickstart's (tiny MoE, tokenizer trained on the synthetic suite's train split,
SFT 150 steps, GRPO with seed 2's weighted reward on the visible tests in the sandbox's worker
processes, the embedded engine), with the RL stage run three times from the one SFT checkpoint:
synchronously (``max_staleness: null``: the engine runs the trainer's policy module), then with a
producer one version ahead (``max_staleness: 1``, the default ``stale_groups: wait``, ``in_flight:
finish``) three times: the embedded engine on the producer's thread (``process: false``), in a
child process of its own (``process: true``), and with the scorer (the sandbox's client and the
reward recipe) in a child process too (``scorer_process: true``: what an asynchronous stage on CPU
gets by default); the first two score in the trainer's process (``scorer_process: false``). All
four train the same number of steps on the same samples; each is then evaluated on the held-out
split (8 samples per task, temperature 1, hidden tests), the asynchronous ones against the
synchronous one as baseline (paired bootstrap). The first ``--warmup`` steps of each RL run are
left out of the step times; the table reports the median of the rest. The whole machine's CPU per
step (``/proc/stat``, sampled beside the pipeline every 0.1 s and cut at each step's logged end:
the sandbox's workers, an engine's child process and anything else running count too) gives, from
the synchronous step's, the shortest step the machine's cores allow.

    flock -x /tmp/codemoe-bench.lock .venv/bin/python benchmarks/bench_async_rl.py --json runs/bench_async_rl.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from bisect import bisect_left
from itertools import pairwise
from pathlib import Path

import yaml
from machine_cpu import machine_busy_seconds

ROOT = Path(__file__).resolve().parent.parent

# the asynchronous RL stages, each against the synchronous one (rl_sync)
ASYNC = {
    "rl_async": "max_staleness 1, the engine on a thread",
    "rl_async_process": "max_staleness 1, the engine in a child process",
    "rl_async_scorer": "max_staleness 1, the engine and the scorer in child processes",
}
# with --free-running: the producer runs free (both in child processes), stale batches dropped or kept
FREE = {
    "rl_async_drop": "max_staleness 1, stale_groups drop",
    "rl_async_keep": "max_staleness 1, stale_groups keep",
}


def pipeline(out: Path, steps: int, threads: int, free: bool = False) -> dict:
    """The quickstart with its RL stage run from one SFT checkpoint in each way of ``ASYNC`` (and
    ``FREE`` when ``free``) besides the synchronous one, and an evaluation of each."""
    rl = {
        "name": "rl",
        "checkpoint_from": "sft",
        "algo": "grpo",
        "reward": "seed2-weighted",
        "suite": "synthetic",
        "split": "train",
        "steps": steps,
        "prompts_per_step": 16,
        "lr": 2.0e-4,
        "temperature": 1.0,
        "max_new_tokens": 32,
        "checkpoint_every": 10**6,
    }
    evaluation = {
        "name": "eval",
        "suite": "synthetic",
        "split": "heldout",
        "samples": 8,
        "temperature": 1.0,
        "max_new_tokens": 32,
    }
    spec = {
        "run": {"name": "bench-async-rl", "dir": str(out), "seed": 0},
        "stages": {
            "environment": {"torch_threads": threads},
            "sft": {
                "model": "tiny",
                "vocab_size": 1024,
                "suite": "synthetic",
                "split": "train",
                "batch_size": 32,
                "phases": [
                    {"phase": "router", "steps": 10, "lr": 3.0e-3},
                    {"phase": "experts", "steps": 10, "lr": 3.0e-3},
                    {"phase": "all", "steps": 130, "lr": 3.0e-3},
                ],
            },
            "rl_sync": {**rl, "max_staleness": None},
            "rl_async": {**rl, "max_staleness": 1, "engine": {"name": "embedded", "process": False}, "scorer_process": False},
            "rl_async_process": {**rl, "max_staleness": 1, "engine": {"name": "embedded", "process": True},
                                 "scorer_process": False},
            "rl_async_scorer": {**rl, "max_staleness": 1, "engine": {"name": "embedded", "process": True},
                                "scorer_process": True},
            "eval_sync": {**evaluation, "checkpoint_from": "rl_sync"},
            "eval_async": {**evaluation, "checkpoint_from": "rl_async", "baseline": "eval_sync"},
            "eval_async_process": {**evaluation, "checkpoint_from": "rl_async_process", "baseline": "eval_sync"},
            "eval_async_scorer": {**evaluation, "checkpoint_from": "rl_async_scorer", "baseline": "eval_sync"},
        },
    }
    for name in FREE if free else ():
        policy = name.removeprefix("rl_async_")
        spec["stages"][name] = {**rl, "max_staleness": 1, "stale_groups": policy, "engine": {"name": "embedded", "process": True}}
        spec["stages"]["eval_" + name.removeprefix("rl_")] = {**evaluation, "checkpoint_from": name, "baseline": "eval_sync"}
    return spec


class MachineCPU(threading.Thread):
    """Samples ``(time, the machine's busy CPU seconds)`` every ``interval`` s until :meth:`stop`."""

    def __init__(self, interval: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.interval, self.samples, self._done = interval, [], threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            self.samples.append((time.time(), machine_busy_seconds()))
            self._done.wait(self.interval)

    def stop(self) -> None:
        self._done.set()
        self.join()

    def between(self, start: float, end: float) -> float:
        """Busy CPU seconds between two times (the samples nearest them)."""
        times = [t for t, _ in self.samples]

        def at(t: float) -> float:
            i = min(bisect_left(times, t), len(times) - 1)
            if i > 0 and abs(times[i - 1] - t) < abs(times[i] - t):
                i -= 1
            return self.samples[i][1]

        return at(end) - at(start)


def machine_cpu(rows: list[dict], sampler: MachineCPU) -> list[float]:
    """Each step's machine CPU after the first (from the previous step's logged end to its own)."""
    return [sampler.between(a["time"], b["time"]) for a, b in pairwise(rows)]


def row(case: str, value: float, anchor: float, units: str, digits: int = 4) -> dict:
    """A table row: codemoe's (asynchronous) value, the anchor's (synchronous) and their ratio (times:
    anchor over codemoe, so higher is faster)."""
    return {"case": case, "codemoe": round(value, digits), "anchor": round(anchor, digits),
            "ratio": round(anchor / value, 3), "units": units}


def step_metrics(run_dir: Path, stage: str) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("stage") == stage and "step_seconds" in r]


def sglang_case(run_dir: Path, steps: int, threads: int, scratch: Path) -> dict[str, list[float]]:
    """The same RL stage (config, reward, sandbox, tasks) against a real SGLang server on the SFT
    checkpoint, synchronous then ``max_staleness: 1``; step times of each (the trainer pushes the
    SFT weights to the server when each run starts)."""
    import torch
    from codemoe.core import build_plugin_manager, build_registry
    from codemoe.core.models import load_pretrained
    from codemoe.rl.scoring import VerifierScorer
    from codemoe.rl.stages import RLStageConfig
    from codemoe.rl.trainer import RLConfig, RLTrainer
    from codemoe.serving.sglang_server import SGLangServer

    torch.set_num_threads(threads)
    defaults = RLStageConfig()  # what the saved config leaves at its default
    stage = {
        "executor": defaults.executor,
        "stop": defaults.stop,
        "timeout_s": defaults.timeout_s,
        **yaml.safe_load((run_dir / "config.yaml").read_text())["stages"]["rl_sync"],
    }
    registry = build_registry(build_plugin_manager())
    recipe = registry.build("reward", stage["reward"])
    algorithm = registry.build("algorithm", stage["algo"], registry=registry)
    tasks = registry.build("suite", stage["suite"]).tasks(stage["split"])
    executor = registry.build("executor", stage["executor"])
    checkpoint = run_dir / "sft" / "checkpoint"
    times: dict[str, list[float]] = {}
    try:
        with SGLangServer(checkpoint) as server:
            for name, k in (("sglang_sync", None), ("sglang_async", 1)):
                policy, tokenizer = load_pretrained(str(checkpoint), registry=registry)
                engine = registry.build(
                    "engine", {"name": "sglang", "base_url": server.url}, model=policy, tokenizer=tokenizer
                )
                config = RLConfig(
                    steps=steps,
                    prompts_per_step=stage["prompts_per_step"],
                    lr=stage["lr"],
                    temperature=stage["temperature"],
                    max_new_tokens=stage["max_new_tokens"],
                    stop=list(stage["stop"]),
                    checkpoint_every=10**6,
                    max_staleness=k,
                )
                rows: list[float] = []
                trainer = RLTrainer(
                    config,
                    algorithm,
                    policy,
                    engine,
                    VerifierScorer(executor, recipe, timeout_s=stage["timeout_s"]),
                    tasks,
                    pad_id=tokenizer.pad_token_id,
                    checkpoint_dir=scratch / name,
                    on_step=lambda step, metrics, rows=rows: rows.append(metrics["step_seconds"]),
                )
                trainer.fit()
                times[name] = rows
    finally:
        executor.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="RL steps of each run")
    parser.add_argument("--warmup", type=int, default=2, help="first steps of each run left out of the step times")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the quickstart's 1)")
    parser.add_argument(
        "--sglang-steps",
        type=int,
        default=0,
        help="also run this many steps of each against a real SGLang server (0: not)",
    )
    parser.add_argument(
        "--free-running",
        action="store_true",
        help="also run the producer free (stale_groups drop and keep), each evaluated against the synchronous run",
    )
    parser.add_argument("--run-dir", type=Path, default=None, help="keep the pipeline run here (default: a temp dir)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    load = (f"{os.getloadavg()[0]:.2f}",)
    overlapped = {**ASYNC, **(FREE if args.free_running else {})}
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.run_dir or Path(scratch)
        tmp.mkdir(parents=True, exist_ok=True)
        spec = Path(tmp) / "bench_async_rl.yaml"
        spec.write_text(yaml.safe_dump(pipeline(Path(tmp) / "runs", args.steps, args.threads, args.free_running), sort_keys=False))
        sampler = MachineCPU()
        sampler.start()
        try:
            subprocess.run([sys.executable, "-m", "codemoe.core", "run", str(spec), "--no-progress"], check=True, cwd=ROOT)
        finally:
            sampler.stop()
        run_dir = next(p for p in (Path(tmp) / "runs").iterdir() if (p / "state.json").is_file())
        results = json.loads((run_dir / "state.json").read_text())["finished"]
        steps = {name: step_metrics(run_dir, name) for name in ("rl_sync", *overlapped)}
        served = sglang_case(run_dir, args.sglang_steps, args.threads, Path(tmp)) if args.sglang_steps else {}

    timed = {name: [m["step_seconds"] for m in rows[args.warmup :]] for name, rows in steps.items()}
    # the synchronous step's two halves: a perfect overlap would take the longer one
    gen = statistics.median(m["gen_seconds"] for m in steps["rl_sync"][args.warmup :])
    train = statistics.median(m["step_seconds"] - m["gen_seconds"] for m in steps["rl_sync"][args.warmup :])
    sync = statistics.median(timed["rl_sync"])
    cpu = {name: statistics.median(m["cpu_seconds"] for m in rows[args.warmup :]) for name, rows in steps.items()}
    whole = {name: sum(m["step_seconds"] for m in rows) for name, rows in steps.items()}
    # steps after the warm-up: machine_cpu's first value is the second step's
    machine = {name: statistics.median(machine_cpu(rows, sampler)[args.warmup - 1 :]) for name, rows in steps.items()}
    cpu_floor = machine["rl_sync"] / (os.cpu_count() or 1)
    cases = []
    for name, what in overlapped.items():
        trainer_cpu = "CPU time of the trainer's process (every thread; not the sandbox workers, nor an engine's child process)"
        machine_cpu_case = "CPU time of the whole machine (every process: trainer, sandbox, engine's child, and anything else running)"
        cases += [
            row(f"RL step, {what} vs synchronous", statistics.median(timed[name]), sync, "s per step (median)"),
            row(f"RL step, {what}: {trainer_cpu}", cpu[name], cpu["rl_sync"], "CPU s per step (median)"),
            row(f"RL step, {what}: {machine_cpu_case}", machine[name], machine["rl_sync"], "CPU s per step (median)"),
            row(f"RL stage, whole, {what}", whole[name], whole["rl_sync"], "s", digits=2),
        ]
    if served:
        sync_s = statistics.median(served["sglang_sync"][args.warmup :])
        async_s = statistics.median(served["sglang_async"][args.warmup :])
        cases.append(row("RL step against a real SGLang server, max_staleness 1 vs synchronous", async_s, sync_s,
                         "s per step (median)"))
        timed.update(served)
    sync_eval = results["eval_sync"]
    learning = {"samples_each": args.steps * 16 * 8, "pass@1_sync": sync_eval["pass@1"], "pass@1_sync_ci": sync_eval["pass@1_ci"]}
    for name in overlapped:
        ev = results["eval_" + name.removeprefix("rl_")]
        learning[name] = {
            "pass@1": ev["pass@1"],
            "pass@1_ci": ev["pass@1_ci"],
            "within_sync_ci": sync_eval["pass@1_ci"][0] <= ev["pass@1"] <= sync_eval["pass@1_ci"][1],
            "comparison": ev.get("comparison"),
        }
    print("| case | asynchronous | synchronous | ratio | units |")
    print("|---|---|---|---|---|")
    for c in cases:
        print(f"| {c['case']} | {c['codemoe']} | {c['anchor']} | **{c['ratio']}x** | {c['units']} |")
    print(
        f"synchronous step: generation and scoring {gen:.3f} s, the rest {train:.3f} s (median): a perfect "
        f"overlap would take {max(gen, train):.3f} s, {(gen + train) / max(gen, train):.2f}x; its work takes "
        f"{machine['rl_sync']:.3f} CPU s of the machine, so on {os.cpu_count()} cores no step is shorter than "
        f"{cpu_floor:.3f} s ({sync / max(cpu_floor, max(gen, train)):.2f}x at most); load average "
        f"before / after: {load[0]} / {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
    )
    for name, what in overlapped.items():
        rows = steps[name][args.warmup :]
        print(
            f"{what}: trainer waited {statistics.median(m.get('rollout_wait_seconds', 0.0) for m in rows):.3f} s per "
            f"step for rollouts (median); the producer spent {statistics.median(m.get('producer_seconds', 0.0) for m in rows):.3f} s per batch; "
            f"held-out pass@1 {learning[name]['pass@1']:.4f} {learning[name]['pass@1_ci']}, inside the synchronous CI: "
            f"{learning[name]['within_sync_ci']}; staleness mean {statistics.mean(m.get('staleness_mean', 0.0) for m in steps[name]):.2f}, "
            f"batches dropped as too stale {sum(m.get('stale_dropped', 0.0) for m in steps[name]):.0f}"
        )
    print(f"held-out pass@1 synchronous after {learning['samples_each']} samples: {learning['pass@1_sync']:.4f} {learning['pass@1_sync_ci']}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "cases": cases,
            "learning": learning,
            "sync_halves": {"generation_scoring_s": gen, "rest_s": train, "perfect_overlap_s": max(gen, train),
                            "machine_cpu_s": machine["rl_sync"], "cpu_floor_s": cpu_floor},
            "load_average": {"before": float(load[0]), "after": os.getloadavg()[0], "cores": os.cpu_count()},
            "steps": dict(timed),
        }
        args.json.write_text(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
