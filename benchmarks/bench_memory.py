"""Peak memory per rank of the ``sft`` and ``rl`` stages under ``torchrun`` (gloo, CPU), per model preset.

For each preset, two launches of ``--ranks`` ranks each run the real stages through the pipeline
runner (synthetic suite, tokenizer trained on it, the embedded engine, the local sandbox, GRPO with
its KL to a reference policy):

1. a pipeline with the ``sft`` stage only (``--sft-steps`` steps), which writes the checkpoint;
2. the same run resumed with the ``rl`` stage added (``--rl-steps`` steps), in fresh processes, so
   what the SFT stage left in the allocator does not hide what RL needs.

Each rank measures each stage with :class:`codemoe.core.memory.PeakMemory`, from the stage's start
(``codemoe_before_stage``) to its end (``codemoe_after_stage``): the peak resident set (``VmHWM``,
reset through ``/proc/self/clear_refs``) above the resident set at the stage's start, with glibc
mapping every allocation of 64 KiB or more on its own (``MALLOC_MMAP_THRESHOLD_=65536``), so memory
freed earlier in the stage and reused from the heap does not hide a later peak. The stage
includes loading or building the model, sharding, the engine, every step, the weight syncs and the
export of the checkpoint. The RL step's mean wall time (and its generation part) on rank 0 is
printed too: what the memory costs in time. The model presets keep their shapes; the vocabulary is the tokenizer's
(``--vocab``), as in the pipelines.

    .venv/bin/python benchmarks/bench_memory.py --presets micro tiny --json runs/bench_memory.json
    .venv/bin/python benchmarks/bench_memory.py --presets moe_100m --override stages.rl.engine.sharded_generation=whole

To measure another checkout (the commit before a change), put its packages first on the path; a
checkout without ``codemoe.core.memory`` is measured by the same ``/proc/self/status`` reads here:

    PYTHONPATH=$(ls -d /path/to/checkout/packages/*/src | paste -sd:) .venv/bin/python benchmarks/bench_memory.py ...
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from codemoe.core import hookimpl

HERE = Path(__file__).resolve()
REGISTRY = HERE.parents[1] / "registry"

PIPELINE = """
run: {{name: mem, dir: {run_dir}, seed: 0}}
stages:
  sft:
    model: {preset}
    vocab_size: {vocab}
    suite: {{name: synthetic, train_tasks: 16}}
    batch_size: 4
    phases: [{{phase: all, steps: {sft_steps}, lr: 0.001}}]
"""

RL_STAGE = """
  rl:
    checkpoint_from: sft
    suite: {{name: synthetic, train_tasks: 16}}
    algo: grpo
    steps: {rl_steps}
    prompts_per_step: {ranks}
    max_new_tokens: 32
    checkpoint_every: 1000
    reward: seed2-weighted
"""


class _ProcStatusPeak:
    """The same reads as ``PeakMemory("cpu")`` (``VmHWM`` reset, minus ``VmRSS`` on entry), for a
    checkout that predates ``codemoe.core.memory``."""

    def __enter__(self) -> _ProcStatusPeak:
        Path("/proc/self/clear_refs").write_text("5")
        self.baseline = _status_bytes("VmRSS")
        return self

    def __exit__(self, *exc: object) -> None:
        self.bytes = max(0, _status_bytes("VmHWM") - self.baseline)


def _status_bytes(field: str) -> int:
    return int(re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)[1]) * 1024


def _peak_meter():
    try:
        from codemoe.core.memory import PeakMemory
    except ImportError:
        return _ProcStatusPeak()
    return PeakMemory("cpu")


class StagePeaks:
    """A plugin: each stage's peak memory on this rank, written to ``<out>/rank<R>.json``."""

    def __init__(self, out: Path) -> None:
        self.out, self.meters, self.peaks = out, {}, {}

    @hookimpl
    def codemoe_before_stage(self, ctx, stage) -> None:
        self.meters[stage.id] = meter = _peak_meter()
        meter.__enter__()

    @hookimpl
    def codemoe_after_stage(self, ctx, stage, result) -> None:
        meter = self.meters.pop(stage.id)
        meter.__exit__(None, None, None)
        self.peaks[stage.id] = {"peak_bytes": meter.bytes, "rss_at_start_bytes": meter.baseline}
        rank = os.environ.get("RANK", "0")
        path = self.out / f"rank{rank}.json"
        previous = json.loads(path.read_text()) if path.exists() else {}
        path.write_text(json.dumps({**previous, **self.peaks, "vmhwm_lifetime_bytes": _status_bytes("VmHWM")}))


def worker(args: argparse.Namespace) -> None:
    """One rank of one launch (started by :func:`launch`)."""
    import torch
    from codemoe.core import Hooks, build_plugin_manager, build_registry, compose, run_pipeline

    torch.set_num_threads(1)
    out = Path(args.out)
    pm = build_plugin_manager()
    pm.register(StagePeaks(out), name="bench_memory")
    overrides = ["stages.rl.algo.group_size=4", *args.override] if args.resume else []
    cfg = compose(Path(args.pipeline), overrides, registry_dir=REGISTRY)
    run_dir = Path(args.resume) if args.resume else None
    run_pipeline(cfg, build_registry(pm), Hooks(pm), run_dir=run_dir, show_progress=False)
    if args.resume is None and os.environ.get("RANK", "0") == "0":
        (out / "run_dir").write_text(str(max((out / "runs").iterdir(), key=lambda p: p.stat().st_mtime)))


def launch(args: argparse.Namespace, preset: str, work: Path) -> list[dict]:
    """Both launches for ``preset``; each rank's peaks."""
    out = work / preset
    (out / "runs").mkdir(parents=True)
    fields = {"run_dir": out / "runs", "preset": preset, "vocab": args.vocab, "sft_steps": args.sft_steps,
              "rl_steps": args.rl_steps, "ranks": args.ranks}
    (out / "sft.yaml").write_text(PIPELINE.format(**fields))
    (out / "rl.yaml").write_text((PIPELINE + RL_STAGE).format(**fields))
    # every allocation of 64 KiB or more mapped on its own, so the resident set follows the tensors
    # (codemoe.core.memory.FOLLOW_TENSORS_ENV; spelled out for a checkout that predates it)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": "65536"}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(args.ranks)]
    me = [str(HERE), "--worker", "--out", str(out), *(f"--override={o}" for o in args.override)]
    subprocess.run([*torchrun, *me, "--pipeline", str(out / "sft.yaml")], env=env, check=True, cwd=REGISTRY.parent)
    resume = (out / "run_dir").read_text()
    subprocess.run([*torchrun, *me, "--pipeline", str(out / "rl.yaml"), "--resume", resume], env=env, check=True,
                   cwd=REGISTRY.parent)
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(args.ranks)]
    records = [json.loads(line) for line in (Path(resume) / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["stage"] == "rl" and r.get("step") is not None]
    for key in ("gen_seconds", "step_seconds"):  # rank 0's clock: the RL step's time, for the memory's price
        ranks[0][f"rl_{key}"] = sum(r[key] for r in steps) / len(steps)
    return ranks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["micro", "tiny"], help="model presets in registry/models")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=1024, help="tokenizer vocabulary (the stages' default)")
    parser.add_argument("--sft-steps", type=int, default=2)
    parser.add_argument("--rl-steps", type=int, default=2)
    parser.add_argument("--label", default="", help="a name for this checkout in the JSON (e.g. before, after)")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="an override of the rl launch, e.g. stages.rl.engine.sharded_generation=whole")
    parser.add_argument("--json", type=Path, help="write the per-rank figures here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--pipeline", help=argparse.SUPPRESS)
    parser.add_argument("--resume", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for preset in args.presets:
            results[preset] = launch(args, preset, Path(tmp))
    mib = 2**20
    print(f"peak memory per rank above the stage's start (MiB), {args.ranks} ranks, gloo, CPU {args.label}")
    print(f"{'preset':8} {'rank':>4} {'sft':>8} {'rl':>8} {'rl start RSS':>13} {'process VmHWM':>14}")
    for preset, ranks in results.items():
        for rank, r in enumerate(ranks):
            print(f"{preset:8} {rank:>4} {r['sft']['peak_bytes'] / mib:8.1f} {r['rl']['peak_bytes'] / mib:8.1f} "
                  f"{r['rl']['rss_at_start_bytes'] / mib:13.1f} {r['vmhwm_lifetime_bytes'] / mib:14.1f}")
        print(f"{preset:8} rl step {ranks[0]['rl_step_seconds']:.2f} s, of which generation {ranks[0]['rl_gen_seconds']:.2f} s")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        summary = {"label": args.label, "ranks": args.ranks, "overrides": args.override, "presets": results}
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
