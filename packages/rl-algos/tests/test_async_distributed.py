"""Asynchronous rollouts under torchrun (2 ranks, gloo): max_staleness 0 is the synchronous 2-rank
run bit for bit, dynamic-sampling refills included; max_staleness 1 samples batch b with the weights
of step b - 2 while the producer's refill collective runs beside the trainer's; free-running
producers (drop, keep) agree on every batch's version, and aborts are agreed where a batch has
collectives; what ranks cannot agree on is refused by key, on every rank; the rl stage runs
asynchronously on 2 ranks with its real components. (And, in one process, the engine's optional
abort call that ``in_flight: abort`` makes.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from codemoe.core.errors import ConfigError
from codemoe.rl.async_rollout import check_async_config
from codemoe.rl.trainer import RLConfig
from rl_toy import ToyEngine
from test_async_rollout import ASYNC_ONLY, PIPELINE, REGISTRY, TIMING, _trainer

HERE = Path(__file__).parent
RANKS = (0, 1)


def _torchrun(out: Path, case: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(HERE), "OMP_NUM_THREADS": "1"}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    subprocess.run([*torchrun, str(HERE / "async_toy_run.py"), str(out), case], env=env, check=True, timeout=120)


def _metrics(path: Path) -> list[dict[str, float]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.distributed
def test_max_staleness_0_on_two_ranks_trains_like_the_synchronous_two_rank_run(tmp_path):
    """Same losses, metrics and final parameters bit for bit (PPO epochs, minibatches, KL): the
    same ranks compute the same sums in the same order, only step 1 runs on another thread."""
    _torchrun(tmp_path, "k0")
    for rank in RANKS:
        sync, zero = (_metrics(tmp_path / run / f"metrics-rank{rank}.jsonl") for run in ("sync", "k0"))
        assert [m["step"] for m in zero] == [1, 2, 3]
        # a zero-signal group was refilled: the producer's all_gather of the counts ran on its group
        assert any(m["refill_rounds"] > 0 for m in zero)
        for a, b in zip(sync, zero, strict=True):
            keys = set(a) - TIMING
            assert keys == set(b) - TIMING - ASYNC_ONLY - {"staleness/0"}
            assert {k: a[k] for k in keys} == {k: b[k] for k in keys}
            assert b["staleness_mean"] == 0.0
        sync_params, zero_params = (torch.load(tmp_path / run / f"params-rank{rank}.pt") for run in ("sync", "k0"))
        assert sync_params.keys() == zero_params.keys()
        assert all(torch.equal(sync_params[k], zero_params[k]) for k in sync_params)


@pytest.mark.slow
@pytest.mark.distributed
def test_max_staleness_1_on_two_ranks_samples_each_batch_with_the_weights_of_two_steps_before(tmp_path):
    """Every engine call of batch b on every rank (refills included) ran on the trainer's weights of
    step max(0, b - 2). Batch 2 is made during step 1's update and one rank refills a group in it,
    so the producer's collective overlaps the trainer's: on one shared group this run fails."""
    _torchrun(tmp_path, "k1")
    refills = 0
    for rank in RANKS:
        history = _metrics(tmp_path / "k1" / f"metrics-rank{rank}.jsonl")
        assert [m["staleness_mean"] for m in history] == [0.0, 1.0, 1.0, 1.0]
        weights = torch.load(tmp_path / "k1" / f"weights-rank{rank}.pt")
        trained, sampled = weights["trained"], weights["sampled"]
        assert sorted(trained) == [0, 1, 2, 3, 4] and sorted(sampled) == [1, 2, 3, 4]
        for batch, calls in sampled.items():
            assert all(torch.equal(w, trained[max(0, batch - 2)]) for w in calls), (rank, batch)
        refills += len(sampled[2]) - 1
    assert refills > 0  # batch 2 (made beside step 1's update) had a refill round on some rank


def _version(weights: torch.Tensor, trained: dict[int, torch.Tensor]) -> int:
    (version,) = [v for v, w in trained.items() if torch.equal(w, weights)]
    return version


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("policy", ["drop", "keep"])
def test_free_running_producers_on_two_ranks_agree_on_every_batchs_version(tmp_path, policy):
    """Each rank's producer runs free (refills on, rank 1's trainer slower), so a batch's parts can
    be sampled by different versions on the two ranks; every rank reports the same staleness and
    drops the same batches, and a batch counts as old as its oldest part: the known answer is
    recomputed from the weights each rank's engine sampled with."""
    _torchrun(tmp_path, "free")
    runs = tmp_path / policy
    history = {rank: _metrics(runs / f"metrics-rank{rank}.jsonl") for rank in RANKS}
    assert [m["step"] for m in history[0]] == [1, 2, 3, 4, 5]
    agreed = {key: [m[key] for m in history[0]] for key in ("staleness_mean", "stale_dropped", "reward_mean")}
    assert agreed == {key: [m[key] for m in history[1]] for key in agreed}
    weights = {rank: torch.load(runs / f"weights-rank{rank}.pt") for rank in RANKS}
    trained = weights[0]["trained"]
    assert all(torch.equal(trained[s], weights[1]["trained"][s]) for s in trained)  # one model, two ranks
    made = {rank: {b: _version(calls[0], trained) for b, calls in weights[rank]["sampled"].items()} for rank in RANKS}
    batch = 1
    for step, m in enumerate(history[0], start=1):
        batch += int(m["stale_dropped"])  # the batches dropped before this step's
        oldest = min(made[rank][batch] for rank in RANKS)
        assert m["staleness_mean"] == step - 1 - oldest, (step, batch, made)
        batch += 1
    staleness = agreed["staleness_mean"]
    if policy == "drop":
        assert max(staleness) <= 1.0 and sum(agreed["stale_dropped"]) >= 1, agreed
    else:  # two batches made ahead of a slow trainer: trained on two versions late
        assert max(staleness) == 2.0 and sum(agreed["stale_dropped"]) == 0, agreed


@pytest.mark.slow
@pytest.mark.distributed
def test_an_abort_on_one_rank_is_that_ranks_alone_without_refills_and_every_ranks_with_them(tmp_path):
    """Rank 0's sync of step 2 aborts its part of batch 3, in flight then; rank 1 made its part
    during step 2, before that sync. Without refill rounds (no collective in a batch) rank 0 alone
    makes its part again, from step 2's weights, and both ranks train step 3 as old as rank 1's part
    (step 1's weights: one version, where one process would have had none). With them the abort
    travels in the refill all-gather, so rank 1 makes its part again too."""
    _torchrun(tmp_path, "abort")
    calls = {(run, rank): json.loads((tmp_path / run / f"calls-rank{rank}.json").read_text())
             for run in ("abort", "abort_refills") for rank in RANKS}
    assert calls["abort", 0]["3"] == 2 and calls["abort", 1]["3"] == 1
    assert calls["abort_refills", 0]["3"] >= 2 and calls["abort_refills", 1]["3"] >= 2
    for run in ("abort", "abort_refills"):
        history = {rank: _metrics(tmp_path / run / f"metrics-rank{rank}.jsonl") for rank in RANKS}
        assert [m["step"] for m in history[0]] == [1, 2, 3, 4]
        assert [m["staleness_mean"] for m in history[0]] == [m["staleness_mean"] for m in history[1]]
    weights = {rank: torch.load(tmp_path / "abort" / f"weights-rank{rank}.pt") for rank in RANKS}
    trained = weights[0]["trained"]
    parts = [_version(weights[rank]["sampled"][3][-1], trained) for rank in RANKS]  # batch 3 as trained
    assert parts == [2, 1]
    for rank in RANKS:
        assert _metrics(tmp_path / "abort" / f"metrics-rank{rank}.jsonl")[2]["staleness_mean"] == 3 - 1 - min(parts)


@pytest.mark.slow
@pytest.mark.distributed
def test_what_ranks_cannot_agree_on_is_refused_on_every_rank_by_key(tmp_path):
    _torchrun(tmp_path, "refused")
    messages = [json.loads((tmp_path / f"refused-rank{rank}.json").read_text()) for rank in RANKS]
    assert messages[0] == messages[1]  # every rank refuses, the same way: none is left waiting in a collective
    refused = messages[0]
    assert refused["drop"].startswith("'stale_groups': drop") and "serves every rank" in refused["drop"]
    assert refused["keep"].startswith("'stale_groups': keep")
    assert refused["abort"].startswith("'in_flight': abort") and "in_flight: finish" in refused["abort"]
    assert refused["sharded_engine"].startswith("'max_staleness'") and "sharded" in refused["sharded_engine"]


FREE_RUNNING = ["stages.rl.stale_groups=keep", "stages.rl.in_flight=abort", "stages.rl.steps=4",
                "stages.rl.algo.dynamic_sampling={drop: true, refill_rounds: 1}"]


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("overrides", [[], FREE_RUNNING], ids=["wait", "keep_abort_refills"])
def test_the_rl_stage_runs_asynchronously_under_torchrun(tmp_path, overrides):
    """``codemoe run`` on 2 ranks with its real components (embedded engine on each rank's whole
    copy of the policy, local sandbox, reward recipe) and max_staleness: 1; the schedule as
    shipped, and a free-running producer whose syncs abort batches that hold refill all-gathers."""
    (tmp_path / "p.yaml").write_text(PIPELINE.format(run_dir=tmp_path / "runs"))
    codemoe = str(Path(sys.executable).parent / "codemoe")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = [*torchrun, codemoe, "run", str(tmp_path / "p.yaml"), *overrides]
    subprocess.run(run, env=env, check=True, cwd=REGISTRY.parent, timeout=180)
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["stage"] == "rl" and r["step"] is not None]
    # step 1: each rank's engine copy holds the policy's weights (kernel rounding only, ~1e-6)
    assert steps[0]["staleness_mean"] == 0.0 and steps[0]["logp_mismatch_max"] < 1e-3
    if not overrides:
        assert [r["staleness_mean"] for r in steps] == [0.0, 1.0, 1.0]
        assert steps[1]["logp_mismatch_max"] > steps[0]["logp_mismatch_max"]  # sampled by the weights before
    else:  # a keep producer runs at most K + 1 batches ahead (how far, and what an abort remade, is timing)
        assert [r["step"] for r in steps] == [1, 2, 3, 4]
        assert all(r["staleness_mean"] in (0.0, 1.0, 2.0) for r in steps)


class _Engine:
    def __init__(self, shared: bool = False) -> None:
        self.model = torch.nn.Linear(1, 1)
        self.serves_every_rank = shared


@pytest.mark.parametrize(
    ("options", "key"),
    [
        ({"stale_groups": "drop"}, "'stale_groups'"),
        ({"stale_groups": "keep"}, "'stale_groups'"),
        ({"in_flight": "abort"}, "'in_flight'"),
    ],
)
def test_a_multi_rank_launch_refuses_a_free_running_or_aborting_producer_on_one_shared_server(options, key):
    config = RLConfig(max_staleness=1, **options)
    policy = torch.nn.Linear(1, 1)
    check_async_config(config, world=1, engine=_Engine(shared=True), policy=policy)  # one process: fine
    check_async_config(config, world=2, engine=_Engine(), policy=policy)  # an engine per rank: agreed
    with pytest.raises(ConfigError, match=key):
        check_async_config(config, world=2, engine=_Engine(shared=True), policy=policy)
    check_async_config(RLConfig(max_staleness=1), world=2, engine=_Engine(shared=True), policy=policy)  # wait + finish


class _AbortableEngine(ToyEngine):
    """Batch 3's first call stays in flight (up to 20 s) until ``abort()`` ends it; like a real
    engine's, ``abort()`` ends only the calls in flight when it is made."""

    def __init__(self, model):
        super().__init__(model)
        self._lock = threading.Lock()
        self._waiting: threading.Event | None = None
        self.in_flight = threading.Event()  # batch 3's first call has started
        self.calls_per_batch: dict[int, int] = {}
        self.ended_by_abort = False

    def abort(self) -> None:
        with self._lock:
            if self._waiting is not None:
                self._waiting.set()

    def generate(self, prompts, params):
        batch = params.seed // 101
        self.calls_per_batch[batch] = self.calls_per_batch.get(batch, 0) + 1
        if batch == 3 and self.calls_per_batch[batch] == 1:
            waiting = threading.Event()
            with self._lock:
                self._waiting = waiting
            self.in_flight.set()
            self.ended_by_abort = waiting.wait(timeout=20)
            with self._lock:
                self._waiting = None
        return super().generate(prompts, params)


def test_in_flight_abort_ends_the_engines_call_in_flight_at_once(registry, tmp_path):
    """One process: step 2's sync calls the engine's abort, so batch 3's call in flight returns
    then (instead of running to its end) and the batch is made again from step 2's weights."""
    trainer = _trainer(registry, tmp_path, engine=_AbortableEngine, max_staleness=1, in_flight="abort")
    history: list[dict[str, float]] = []

    def on_step(step: int, metrics: dict[str, float]) -> None:
        history.append(metrics)
        if step == 1:  # batch 3 was admitted by step 1's sync: let its call start before step 2's sync
            assert trainer.engine.in_flight.wait(timeout=20)

    trainer.on_step = on_step
    trainer.fit()
    assert trainer.engine.ended_by_abort and trainer.engine.calls_per_batch[3] == 2
    assert history[2]["staleness_mean"] == 0.0
