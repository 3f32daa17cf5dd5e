"""Asynchronous rollouts: max_staleness 0 is the synchronous trainer step for step; K = 1 overlaps
generation with the update on a fixed schedule; free-running producers drop or keep stale batches;
in-flight batches finish or are aborted; a run killed mid-way resumes without training on anything
twice; bad settings are refused by key."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import torch
from codemoe.core.errors import ConfigError
from codemoe.rl.trainer import RLConfig, RLTrainer
from rl_toy import ToyEngine, tiny_policy, toy_scorer, toy_tasks

# Metrics that depend on wall time, or exist only in one of the two loops.
TIMING = {
    "gen_seconds",
    "step_seconds",
    "cpu_seconds",
    "tokens_per_s",
    "rollout_wait_seconds",
    "producer_seconds",
    "sync_wait_seconds",
    "generate_seconds",  # the synchronous step's split of gen_seconds
    "score_seconds",
    "train_seconds",
    "sync_seconds",
}
ASYNC_ONLY = {"staleness_mean", "stale_dropped"}


def _trainer(registry, tmp_path, algo=None, engine=None, **overrides) -> RLTrainer:
    config = RLConfig(
        **{"steps": 4, "prompts_per_step": 4, "lr": 1e-2, "max_new_tokens": 4, "checkpoint_every": 1000, **overrides}
    )
    algorithm = registry.build(
        "algorithm", {"name": "policy_gradient", "group_size": 8, **(algo or {})}, registry=registry
    )
    policy = tiny_policy()
    return RLTrainer(
        config,
        algorithm,
        policy,
        engine(policy) if engine else ToyEngine(policy),
        toy_scorer,
        toy_tasks(),
        pad_id=0,
        checkpoint_dir=tmp_path / "ckpt",
    )


def _fit(trainer: RLTrainer, rollouts: list | None = None) -> list[dict[str, float]]:
    history: list[dict[str, float]] = []
    trainer.on_step = lambda step, metrics: history.append(metrics)
    if rollouts is not None:
        trainer.on_rollouts = lambda step, batch: rollouts.append(batch.prompt_ids)
    trainer.fit()
    return history


def _batch_of(params) -> int:
    """The batch (step) a sampling seed belongs to (``RLTrainer._seed``: seed 0, round r)."""
    return params.seed // 101


def test_max_staleness_0_trains_like_the_synchronous_loop(registry, tmp_path):
    """Same losses, metrics and parameters bit for bit, with PPO epochs, minibatches, KL and
    dynamic-sampling refills: the producer thread only moves where step 1 runs."""
    algo = {"kl_coef": 0.05, "epochs": 2, "minibatches": 2, "dynamic_sampling": {"drop": True, "refill_rounds": 1}}
    runs = {}
    for k in (None, 0):
        trainer = _trainer(registry, tmp_path / str(k), algo, max_staleness=k)
        runs[k] = (_fit(trainer), trainer.policy.state_dict())
    (sync, sync_params), (zero, zero_params) = runs[None], runs[0]
    for a, b in zip(sync, zero, strict=True):
        keys = set(a) - TIMING
        assert keys == set(b) - TIMING - ASYNC_ONLY - {"staleness/0"}
        assert {k: a[k] for k in keys} == {k: b[k] for k in keys}
        assert b["staleness_mean"] == 0.0 and b["staleness/0"] == 1.0
    assert all(torch.equal(sync_params[k], zero_params[k]) for k in sync_params)


class _RecordingEngine(ToyEngine):
    """Records, per batch, the lm_head weights it sampled with."""

    def __init__(self, model):
        super().__init__(model)
        self.sampled_with: dict[int, torch.Tensor] = {}

    def generate(self, prompts, params):
        self.sampled_with[_batch_of(params)] = self.model.lm_head.weight.detach().clone()
        return super().generate(prompts, params)


def test_max_staleness_1_samples_each_batch_with_the_weights_of_two_steps_before(registry, tmp_path):
    trainer = _trainer(registry, tmp_path, engine=_RecordingEngine, max_staleness=1)
    weights = {0: trainer.policy.lm_head.weight.detach().clone()}
    history = []

    def on_step(step, metrics):
        history.append(metrics)
        weights[step] = trainer.policy.lm_head.weight.detach().clone()

    trainer.on_step = on_step
    trainer.fit()
    assert [m["staleness_mean"] for m in history] == [0.0, 1.0, 1.0, 1.0]
    for batch, sampled in trainer.engine.sampled_with.items():
        assert torch.equal(sampled, weights[max(0, batch - 2)]), batch
    again = _trainer(registry, tmp_path / "again", engine=_RecordingEngine, max_staleness=1)
    repeat = _fit(again)  # the schedule does not depend on timing: the same run again
    for a, b in zip(history, repeat, strict=True):
        assert {k: a[k] for k in set(a) - TIMING} == {k: b[k] for k in set(b) - TIMING}


class _OverlapEngine(ToyEngine):
    """Batch 3's generation waits (up to 20 s) for the trainer to be inside step 2's update: it can
    see it only when the two run at once."""

    def __init__(self, model):
        super().__init__(model)
        self.updating = threading.Event()
        self.overlapped = False

    def generate(self, prompts, params):
        if _batch_of(params) == 3:
            self.overlapped = self.updating.wait(timeout=20)
        return super().generate(prompts, params)


def _watch_updates(trainer: RLTrainer, event: threading.Event) -> None:
    update = trainer._update

    def watched(*args, **kwargs):
        if trainer.step != 1:
            return update(*args, **kwargs)
        event.set()  # for the length of step 2's update
        try:
            return update(*args, **kwargs)
        finally:
            event.clear()

    trainer._update = watched


@pytest.mark.parametrize("k", [None, 1])
def test_generation_overlaps_the_update_only_asynchronously(registry, tmp_path, k):
    trainer = _trainer(registry, tmp_path, engine=_OverlapEngine, max_staleness=k, steps=3)
    if k is None:
        # batch 3 comes after step 2's update here: look once instead of waiting 20 s for what cannot come
        trainer.engine.updating.wait = lambda timeout: trainer.engine.updating.is_set()
    _watch_updates(trainer, trainer.engine.updating)
    _fit(trainer)
    assert trainer.engine.overlapped == (k == 1)


class _SlowTrainer:
    """Makes each trainer step take a while (the rollout hook sleeps), so a free-running producer
    fills its buffer ahead of it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self, step, batch) -> None:
        threading.Event().wait(self.seconds)


class _CountingEngine(ToyEngine):
    """Records the batch of every generation it serves."""

    def __init__(self, model):
        super().__init__(model)
        self.batches: list[int] = []

    def generate(self, prompts, params):
        self.batches.append(_batch_of(params))
        return super().generate(prompts, params)


@pytest.mark.parametrize("policy", ["drop", "keep"])
def test_a_free_running_producer_keeps_stale_batches_or_never_makes_them(registry, tmp_path, policy):
    """A fast producer ahead of a slow trainer (0.3 s a step). ``keep`` makes two batches ahead, the
    second trained on two versions late. ``drop`` would have to drop that one, so it never starts
    it: it waits for the next weights, and no generation is thrown away (each batch made once,
    none dropped, none older than K = 1), while it still samples ahead of the update (staleness 1).
    Neither makes a batch past the run's last step."""
    engines: list[_CountingEngine] = []
    trainer = _trainer(registry, tmp_path, max_staleness=1, stale_groups=policy, steps=5,
                       engine=lambda model: engines.append(_CountingEngine(model)) or engines[-1])
    history = []
    trainer.on_step = lambda step, metrics: history.append(metrics)
    trainer.on_rollouts = _SlowTrainer(0.3)
    trainer.fit()
    staleness = [m["staleness_mean"] for m in history]
    assert all(m["stale_dropped"] == 0 for m in history), history
    assert max(staleness) == (1.0 if policy == "drop" else 2.0), staleness
    assert engines[0].batches == [1, 2, 3, 4, 5]  # each made once, and none past the run's last step


class _InFlightEngine(ToyEngine):
    """Batch 3's first generation waits for the trainer's weight sync to begin, so it is in flight then."""

    def __init__(self, model):
        super().__init__(model)
        self.trainer: RLTrainer | None = None
        self.calls_per_batch: dict[int, int] = {}

    def generate(self, prompts, params):
        batch = _batch_of(params)
        self.calls_per_batch[batch] = self.calls_per_batch.get(batch, 0) + 1
        if batch == 3 and self.calls_per_batch[batch] == 1:
            producer = self.trainer._producer
            with producer._cond:  # the trainer took batch 2 and is training on it
                producer._cond.wait_for(lambda: producer.taken >= 2, timeout=20)
            if producer.in_flight == "abort":
                producer._abort.wait(timeout=20)
        return super().generate(prompts, params)


@pytest.mark.parametrize("in_flight", ["finish", "abort"])
def test_a_batch_in_flight_at_a_sync_finishes_on_old_weights_or_is_made_again(registry, tmp_path, in_flight):
    trainer = _trainer(registry, tmp_path, engine=_InFlightEngine, max_staleness=1, in_flight=in_flight)
    trainer.engine.trainer = trainer
    history = _fit(trainer)
    if in_flight == "finish":
        assert trainer.engine.calls_per_batch[3] == 1 and history[2]["staleness_mean"] == 1.0
    else:  # aborted when step 2's weights were published, made again from them: trained at once
        assert trainer.engine.calls_per_batch[3] == 2 and history[2]["staleness_mean"] == 0.0


class _Killed(Exception):
    pass


@pytest.mark.parametrize("policy", ["wait", "keep"])
def test_a_killed_asynchronous_run_resumes_without_training_on_anything_twice(registry, tmp_path, policy):
    """The run dies after step 3 with batch 4 buffered or in flight (and step 3's checkpoint not
    written); the resumed run starts from step 2's checkpoint and makes batches 3 and 4 again."""
    options = {"max_staleness": 1, "stale_groups": policy, "steps": 5}
    whole: list = []
    _fit(_trainer(registry, tmp_path / "whole", **options), whole)
    first: list = []
    killed = _trainer(registry, tmp_path / "run", checkpoint_every=1, **options)
    killed.on_rollouts = lambda step, batch: first.append(batch.prompt_ids)

    def die(step, metrics):
        if step == 3:
            raise _Killed

    killed.on_step = die
    with pytest.raises(_Killed):
        killed.fit()
    (tmp_path / "run" / "ckpt" / "step-3").exists() and pytest.fail("step 3 was not to be saved")
    resumed: list = []
    history = _fit(_trainer(registry, tmp_path / "run", checkpoint_every=1, **options), resumed)
    trained = first[:2] + resumed  # steps 1-2 of the killed run, then 3-5 of the resumed one
    assert trained == whole  # the same tasks in the same order: nothing twice, nothing lost
    assert history[0]["staleness_mean"] == 0.0  # batch 3 made from step 2's weights, the checkpoint's
    if policy == "wait":
        assert [m["staleness_mean"] for m in history] == [0.0, 1.0, 1.0]


def test_bad_asynchronous_settings_are_refused_by_key(registry, tmp_path):
    with pytest.raises(ConfigError, match="'stale_groups'"):
        _trainer(registry, tmp_path, max_staleness=1, stale_groups="later")
    with pytest.raises(ConfigError, match="'stale_groups'.*max_staleness >= 1"):
        _trainer(registry, tmp_path, max_staleness=0, stale_groups="drop")
    with pytest.raises(ConfigError, match="'in_flight'"):
        _trainer(registry, tmp_path, max_staleness=1, in_flight="pause")
    with pytest.raises(ConfigError, match="'max_staleness'"):
        _trainer(registry, tmp_path, max_staleness=-1)

    class Shared(ToyEngine):  # an engine on the policy module itself, like the embedded one built on it
        def __init__(self, model):
            self.model = model

        def weights_changed(self):
            pass

    with pytest.raises(ConfigError, match="'max_staleness'.*copy of the policy"):
        _trainer(registry, tmp_path, engine=Shared, max_staleness=1)


class _FailingEngine(ToyEngine):
    """Fails on batch 3, as a server that went away would."""

    def generate(self, prompts, params):
        if _batch_of(params) == 3:
            raise ConnectionError("the server went away")
        return super().generate(prompts, params)


def test_a_producer_error_stops_the_run_in_the_trainer_with_its_own_type(registry, tmp_path):
    trainer = _trainer(registry, tmp_path, engine=_FailingEngine, max_staleness=1)
    with pytest.raises(ConnectionError, match="went away"):
        trainer.fit()
    # raised at the end of step 2, whose weight sync waits for batch 3: step 2 is not counted (nor
    # checkpointed), and the producer's thread has ended
    assert trainer.step == 1 and trainer._producer is None


REGISTRY = Path(__file__).resolve().parents[3] / "registry"
PIPELINE = """
run: {{name: t, dir: {run_dir}, seed: 0}}
stages:
  sft:
    name: sft
    model: {{name: qwen3_moe, hidden_size: 32, num_layers: 2, num_heads: 2, num_kv_heads: 1, head_dim: 16,
             num_experts: 4, moe_intermediate_size: 32, router: {{name: softmax_topk, top_k: 2}},
             experts: {{name: grouped}}, max_position_embeddings: 512}}
    vocab_size: 320
    suite: {{name: synthetic, train_tasks: 8}}
    batch_size: 4
    phases: [{{phase: all, steps: 2, lr: 0.003}}]
  rl:
    name: rl
    checkpoint_from: sft
    suite: {{name: synthetic, train_tasks: 8}}
    algo: {{name: policy_gradient, group_size: 4}}
    steps: 3
    prompts_per_step: 2
    max_new_tokens: 12
    lr: 1.0e-3
    max_staleness: 1
    reward: seed2-weighted
"""


def test_the_rl_stage_runs_asynchronously_on_a_copy_of_the_policy(tmp_path):
    """The stage with its real components (embedded engine, local sandbox, reward recipe): the engine
    samples a copy of the policy that each sync refreshes, so the first batch's log-probs agree with
    the trainer's and the later ones are one version old."""
    from codemoe.core import Hooks, build_plugin_manager, build_registry, compose, run_pipeline

    (tmp_path / "p.yaml").write_text(PIPELINE.format(run_dir=tmp_path / "runs"))
    pm = build_plugin_manager()
    ctx = run_pipeline(
        compose(tmp_path / "p.yaml", [], registry_dir=REGISTRY), build_registry(pm), Hooks(pm), show_progress=False
    )
    assert ctx.results["rl"]["steps"] == 3
    records = [json.loads(line) for line in (ctx.run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["stage"] == "rl" and r["step"] is not None]
    assert [r["staleness_mean"] for r in steps] == [0.0, 1.0, 1.0]
    # step 1: the copy holds the policy's weights; the embedded engine's log-probs are the trainer's
    # up to kernel rounding (the lean decode step against the module forward, ~1e-6)
    assert steps[0]["logp_mismatch_max"] < 1e-3
    assert steps[1]["logp_mismatch_max"] > steps[0]["logp_mismatch_max"]  # sampled by the weights before the update
    # the last checkpoint holds the trained policy as a model folder, for `codemoe eval run` of a
    # run's intermediate policies: the same weights as the stage's final checkpoint
    from codemoe.core.models import load_policy

    saved, _ = load_policy(ctx.run_dir / "rl" / "checkpoints" / "step-000003" / "policy")
    final, _ = load_policy(ctx.results["rl"]["checkpoint"])
    assert all(torch.equal(a, b) for a, b in zip(saved.state_dict().values(), final.state_dict().values(), strict=True))

    # the stage scored in a child process of its own (scorer_process: null, asynchronous); scoring in
    # the trainer's process instead gives the same samples the same rewards, step for step
    in_process = run_pipeline(
        compose(tmp_path / "p.yaml", [f"run.dir={tmp_path / 'in_process'}", "stages.rl.scorer_process=false"],
                registry_dir=REGISTRY),
        build_registry(pm), Hooks(pm), show_progress=False,
    )
    again = [json.loads(line) for line in (in_process.run_dir / "metrics.jsonl").read_text().splitlines()]
    again = [r for r in again if r["stage"] == "rl" and r["step"] is not None]
    rewards = [{k: v for k, v in r.items() if k.startswith(("reward", "pass"))} for r in steps]
    assert rewards == [{k: v for k, v in r.items() if k.startswith(("reward", "pass"))} for r in again]
    assert any(r for r in rewards)
