"""Weight sync to a real SGLang server: seconds per update for each ``weight_sync`` mode, against
restarting the server (and the in-request modes against the checkpoint on disk).

An RL step ends by handing the new weights to the rollout servers. codemoe's ``sglang`` engine does
it one of three ways (``weight_sync``): ``tensor`` posts the weights in buckets to
``/update_weights_from_tensor`` (no disk); ``distributed`` broadcasts them over a gloo process
group the server joined (NCCL on GPUs); ``disk`` saves the state dict to ``sync_dir`` and posts
``/update_weights_from_disk``, measured with ``sync_dir`` on a RAM-backed tmpfs (``/dev/shm``) and
on disk. Every update carries a fresh ``weight_version``. The anchor is what a user without an
in-place update does: stop the server and start it again on a checkpoint of the new weights, until
``/health`` answers. Every mode ends with a server that samples the new weights (checked: greedy
log-probs after each mode's last update equal a fresh server's on the same weights).

Needs ``.venv-sglang`` (``make engines``). Presets: ``micro`` and ``tiny`` (random weights, fp32).
Each mode's engine makes one untimed update first (the distributed group forms then).

    python benchmarks/bench_weight_sync.py --presets micro tiny --repeats 3 --json runs/bench_weight_sync.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from codemoe.core.contracts import SamplingParams
from codemoe.core.models import build_model, save_pretrained
from codemoe.core.models.presets import load_preset
from codemoe.core.tokenizer import train_tokenizer
from codemoe.serving.remote import SGLangEngine, SGLangEngineConfig
from codemoe.serving.sglang_server import SGLangServer

CORPUS = ["def add(a, b):\n    return a + b\n", "for i in range(10):\n    print(i * i)\n"] * 16
PROBE = SamplingParams(temperature=0, max_new_tokens=8, ignore_eos=True)


def _model(preset: str, vocab: int, seed: int):
    torch.manual_seed(seed)
    spec = {**load_preset(preset), "max_position_embeddings": 512}
    return build_model(spec, vocab_size=vocab).eval()


def _probe(url: str, model, tokenizer) -> list[float]:
    engine = SGLangEngine(SGLangEngineConfig(base_url=url), model=model, tokenizer=tokenizer)
    return engine.generate([[5, 6, 7]], PROBE)[0].samples[0].logprobs


def run(presets: list[str], repeats: int) -> list[dict]:
    tokenizer = train_tokenizer(CORPUS, vocab_size=512)
    cases = []
    with tempfile.TemporaryDirectory(prefix="codemoe-sync-") as tmp:
        for preset in presets:
            first = _model(preset, len(tokenizer), 0)
            folder = save_pretrained(first, tokenizer, Path(tmp) / f"{preset}-0")
            modes = {"tensor": ("tensor", ""), "distributed": ("distributed", ""),
                     "disk (tmpfs)": ("disk", "/dev/shm"), "disk": ("disk", tmp)}
            updates: dict[str, list[float]] = {m: [] for m in modes}
            restarts: list[float] = []
            probes = {}
            with SGLangServer(folder) as server:
                for mode, (sync, root) in modes.items():
                    with tempfile.TemporaryDirectory(prefix="codemoe-sync-", dir=root or None) as sync_dir:
                        engine = SGLangEngine(SGLangEngineConfig(base_url=server.url, weight_sync=sync,
                                                                 sync_dir=sync_dir), model=first, tokenizer=tokenizer)
                        engine.update_weights(state_dict=first.state_dict())  # untimed: group, server info
                        for r in range(repeats):
                            new = _model(preset, len(tokenizer), r + 1).state_dict()
                            started = time.perf_counter()
                            engine.update_weights(state_dict=new)
                            updates[mode].append(time.perf_counter() - started)
                    probes[mode] = _probe(server.url, first, tokenizer)  # seed `repeats`: the last update's weights
            last = _model(preset, len(tokenizer), repeats)
            for r in range(repeats):
                checkpoint = Path(tmp) / f"{preset}-restart-{r}"
                started = time.perf_counter()
                save_pretrained(last, tokenizer, checkpoint)  # the anchor needs a checkpoint too
                restarted = SGLangServer(checkpoint).start()
                restarts.append(time.perf_counter() - started)
                fresh = _probe(restarted.url, last, tokenizer)
                restarted.stop()
            for mode, updated in probes.items():
                if max(abs(a - b) for a, b in zip(updated, fresh)) > 1e-5:
                    raise SystemExit(f"{preset}: after updates via {mode} the log-probs differ from a fresh server's")
            params = sum(p.numel() for p in first.parameters())
            anchor = statistics.median(restarts)
            medians = {mode: statistics.median(times) for mode, times in updates.items()}
            for mode, ours in medians.items():
                cases.append({"case": f"{preset} ({params:,} params), update via {mode} vs restart",
                              "codemoe": ours, "anchor": anchor, "ratio": anchor / ours, "units": "s per update"})
            for mode in ("tensor", "distributed"):
                disk = medians["disk (tmpfs)"]
                cases.append({"case": f"{preset} ({params:,} params), update via {mode} vs disk (tmpfs)",
                              "codemoe": medians[mode], "anchor": disk, "ratio": disk / medians[mode],
                              "units": "s per update"})
    return cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["micro", "tiny"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    cases = run(args.presets, args.repeats)
    print(f"{'case':66s} {'codemoe':>9s} {'anchor':>9s} {'ratio':>8s}  units")
    for c in cases:
        print(f"{c['case']:66s} {c['codemoe']:9.3f} {c['anchor']:9.3f} {c['ratio']:7.1f}x  {c['units']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"cases": cases}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
