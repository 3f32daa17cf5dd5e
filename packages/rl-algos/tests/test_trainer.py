"""The RL trainer on a toy task: GRPO and PPO learn it; IS, KL, dynamic sampling, health warnings,
checkpoints (also across a SIGKILL) and FSDP2 over two ranks behave as specified."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from codemoe.core.errors import ConfigError
from codemoe.rl.rollout import Score
from codemoe.rl.trainer import RLConfig, RLTrainer, lr_at
from rl_toy import ToyEngine, tiny_policy, toy_scorer, toy_tasks

HERE = Path(__file__).parent
# Metrics that depend on wall time, not on the computation.
TIMING = {"gen_seconds", "step_seconds", "cpu_seconds", "tokens_per_s"}
TIMING |= {"generate_seconds", "score_seconds", "train_seconds", "sync_seconds"}  # the step's split


def _trainer(
    registry,
    tmp_path,
    algo: dict | None = None,
    engine=None,
    prompt_len: int = 1,
    environment=None,
    dtype: torch.dtype = torch.float32,
    **overrides,
) -> RLTrainer:
    config = RLConfig(
        **{"steps": 30, "prompts_per_step": 4, "lr": 1e-2, "max_new_tokens": 4, "checkpoint_every": 1000, **overrides}
    )
    spec = {"name": "policy_gradient", "group_size": 8, **(algo or {})}
    algorithm = registry.build("algorithm", spec, registry=registry)
    policy = tiny_policy().to(dtype)
    return RLTrainer(
        config,
        algorithm,
        policy,
        engine or ToyEngine(policy),
        toy_scorer,
        toy_tasks(prompt_len=prompt_len),
        pad_id=0,
        checkpoint_dir=tmp_path / "ckpt",
        environment=environment,
    )


def _fit(trainer: RLTrainer) -> list[dict[str, float]]:
    history: list[dict[str, float]] = []
    trainer.on_step = lambda step, metrics: history.append(metrics)
    trainer.fit()
    return history


def _same(a: dict[str, float], b: dict[str, float], tol: float = 1e-5) -> bool:
    keys = (set(a) | set(b)) - TIMING
    return all(abs(a[k] - b[k]) <= tol * max(1.0, abs(a[k])) for k in keys)


@pytest.mark.slow
def test_grpo_learns_the_toy_task(registry, tmp_path):
    rewards = [m["reward_mean"] for m in _fit(_trainer(registry, tmp_path))]
    assert rewards[0] < 0.2
    assert max(rewards[-3:]) > 0.8, rewards


@pytest.mark.slow
def test_ppo_with_a_critic_learns_the_toy_task(registry, tmp_path):
    algo = {
        "advantage": {"name": "gae", "lam": 0.95},
        "critic": {"lr": 1e-2},
        "epochs": 2,
        "minibatches": 2,
        "loss_agg": "token_mean",
    }
    history = _fit(_trainer(registry, tmp_path, algo, steps=20, lr=5e-3))
    rewards = [m["reward_mean"] for m in history]
    assert rewards[0] < 0.2
    assert max(rewards[-4:]) > 0.8, rewards
    assert all("vf_loss" in m for m in history) and history[-1]["clip_frac"] >= 0


def test_shared_prompt_forward_trains_like_the_per_row_forward(registry, tmp_path):
    """Same losses, KL, entropies and gradient norms step after step, PPO epochs and minibatches included.

    Routing statistics and the balance loss differ by design: the shared forward routes each
    prompt once per group, not once per sample (the balance term is off here, so it cannot
    move the weights)."""
    algo = {"kl_coef": 0.05, "epochs": 2, "minibatches": 2, "balance_coef": 0.0}
    # The two forwards are equal in exact arithmetic but sum in another order (other shapes, so other
    # kernels), and training amplifies a rounding difference update after update: in float32 the
    # grad norms drift apart by 4e-7 at step 1, 5e-6 at step 2, 3e-4 at step 3 (12 updates), past
    # the 1e-4 below on some CPUs. So both runs are float64: what stays float32 is only what the code
    # computes in fp32 on purpose (router logits, log-softmax), and the drift is 2e-6 at step 3
    # (measured on AVX-512, 1 and 2 threads): 1e-4 leaves a 50x margin, while a shared prompt forward
    # that loses the gradient through its keys and values moves grad_norm by 3e-2 at step 1.
    runs = [
        _fit(
            _trainer(
                registry,
                tmp_path / str(share),
                algo,
                prompt_len=3,
                steps=3,
                share_prompt_forward=share,
                dtype=torch.float64,
            )
        )
        for share in (True, False)
    ]
    for shared, plain in zip(*runs):
        routing = {k for k in shared if k.startswith(("moe/", "expert_load/")) or k == "balance_loss"}
        keys = set(shared) - TIMING - routing
        bad = {k: (shared[k], plain[k]) for k in keys if not _same({k: shared[k]}, {k: plain[k]}, 1e-4)}
        assert not bad, bad


def test_one_step_changes_the_policy_and_reports_metrics(registry, tmp_path):
    trainer = _trainer(registry, tmp_path, {"kl_coef": 0.1}, steps=1)
    before = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
    history = _fit(trainer)
    changed = [k for k, v in trainer.policy.state_dict().items() if not torch.equal(v, before[k])]
    assert any("experts" in k for k in changed) and any("gate" in k for k in changed)
    metrics = history[0]
    for key in (
        "reward_mean",
        "reward_std",
        "pass_rate",
        "kl",
        "entropy",
        "clip_frac",
        "grad_norm",
        "grad_norm_cv",
        "tokens_per_s",
    ):
        assert key in metrics, key
    assert metrics["tokens"] == 4 * 8 * 4
    assert metrics["kl"] == 0.0  # the first update starts at the reference
    assert metrics["balance_loss"] > 0  # the MoE balance term is on by default
    assert torch.equal(trainer.engine.model.lm_head.weight, trainer.policy.lm_head.weight)  # weights synced


def _scorer_with_components(tasks, outputs) -> list[Score]:
    """The toy reward as a recipe's total, hits + 0.5 * first, with both components kept; a short
    sleep so that scoring takes a time the split must show."""
    time.sleep(0.05)
    scores = []
    for task, out in zip(tasks, outputs, strict=True):
        for sample in out.samples:
            hits = sum(t == task.target for t in sample.token_ids) / len(sample.token_ids)
            first = float(sample.token_ids[0] == task.target)
            scores.append(Score(reward=hits + 0.5 * first, passed=hits == 1.0, components={"hits": hits, "first": first}))
    return scores


def test_each_reward_component_and_the_step_time_split_are_reported(registry, tmp_path):
    trainer = _trainer(registry, tmp_path, steps=2)
    trainer.scorer = _scorer_with_components
    for metrics in _fit(trainer):
        # the total is hits + 0.5 * first per sample, so the means obey the same sum (float32 means
        # of 32 numbers in [0, 1.5]: a few ulp)
        assert metrics["reward_mean"] == pytest.approx(metrics["reward/hits"] + 0.5 * metrics["reward/first"], abs=1e-6)
        assert 0.0 <= metrics["reward/first"] <= 1.0
        assert metrics["score_seconds"] >= 0.05  # the scorer's sleep lands in scoring, not generation
        assert metrics["generate_seconds"] + metrics["score_seconds"] <= metrics["gen_seconds"]
        parts = metrics["gen_seconds"] + metrics["train_seconds"] + metrics["sync_seconds"]
        assert metrics["train_seconds"] > 0 and parts <= metrics["step_seconds"]


class _StaleEngine(ToyEngine):
    """Samples from weights that lag the trainer's: its log-probs disagree with the trainer's."""

    def update_weights(self, state_dict=None, path=None) -> None:
        if self.calls == 0:
            super().update_weights(state_dict)
            with torch.no_grad():
                self.model.lm_head.weight.mul_(1.5)


def test_engine_mismatch_is_reported_and_truncated(registry, tmp_path):
    policy = tiny_policy()
    trainer = _trainer(registry, tmp_path, {"is_correction": {"name": "truncated", "cap": 1.05}}, steps=1)
    trainer.engine = _StaleEngine(policy)
    metrics = _fit(trainer)[0]
    assert metrics["logp_mismatch_mean"] > 0.01
    assert metrics["is_ratio_max"] > 1.05 and metrics["is_truncated_frac"] > 0
    matched = _fit(_trainer(registry, tmp_path / "b", steps=1))[0]
    assert matched["logp_mismatch_max"] < 1e-4 and abs(matched["is_ratio_mean"] - 1) < 1e-4


class _NoLogprobEngine(ToyEngine):
    """An engine that returns no log-probs (some remote servers): nothing to correct, nothing reported."""

    def generate(self, prompts, params):
        outputs = super().generate(prompts, params)
        for out in outputs:
            for sample in out.samples:
                sample.logprobs = []
        return outputs


def test_engine_without_logprobs_means_no_correction(registry, tmp_path):
    trainer = _trainer(registry, tmp_path, steps=1)
    trainer.engine = _NoLogprobEngine(trainer.engine.model)
    metrics = _fit(trainer)[0]
    assert metrics["is_ratio_mean"] == 1.0 and metrics["logp_mismatch_max"] == 0.0


def _same_reward_per_task(tasks, outputs):
    """Every sample of a task gets the same reward: every group carries zero signal."""
    return [Score(reward=float(i % 2)) for i, out in enumerate(outputs) for _ in out.samples]


def test_dynamic_sampling_refills_then_drops_zero_signal_groups(registry, tmp_path):
    plain = _trainer(registry, tmp_path / "a", steps=1)
    plain.scorer = _same_reward_per_task
    assert _fit(plain)[0]["zero_signal_frac"] == 1.0
    algo = {"dynamic_sampling": {"drop": True, "refill_rounds": 2}, "balance_coef": 0.0}
    refilled = _trainer(registry, tmp_path / "b", algo, steps=1)
    refilled.scorer = _same_reward_per_task
    before = {k: v.clone() for k, v in refilled.policy.state_dict().items()}
    metrics = _fit(refilled)[0]
    assert metrics["refill_rounds"] == 2 and refilled.cursor == 4 + 4 + 4
    assert metrics["grad_norm"] == 0.0  # every group was dropped: no update at all
    assert all(torch.equal(v, before[k]) for k, v in refilled.policy.state_dict().items())


def test_health_monitor_warns_with_a_remedy(registry, tmp_path, caplog):
    trainer = _trainer(registry, tmp_path, steps=1)
    trainer.monitor.config.entropy_min = 100.0  # any entropy is "collapsed"
    trainer.monitor.config.expert_max_over_mean = 1.0  # any imbalance is a "collapse"
    with caplog.at_level("WARNING", logger="codemoe.rl"):
        result = trainer.fit()
    assert any("entropy" in w for w in result["warnings"])
    assert "Remedy: raise the sampling temperature" in caplog.text
    assert any("router is collapsing" in w for w in result["warnings"])
    assert "raise the balance-loss weight (algo.balance_coef)" in caplog.text


def test_resume_continues_step_for_step(registry, tmp_path):
    straight = _fit(_trainer(registry, tmp_path / "a", steps=4))
    first = _fit(_trainer(registry, tmp_path / "b", steps=2, checkpoint_every=2))
    second = _fit(_trainer(registry, tmp_path / "b", steps=4, checkpoint_every=2))
    assert len(first) == 2 and len(second) == 2
    for a, b in zip(straight, first + second, strict=True):
        assert _same(a, b), (a, b)


def test_lr_at_known_answers():
    assert [lr_at(s, 5, 1.0, "cosine") for s in range(1, 6)] == pytest.approx([1.0, 0.5 + 0.5 ** 1.5, 0.5, 0.5 - 0.5 ** 1.5, 0.0])
    assert [lr_at(s, 6, 1.0, "linear", warmup=2, min_ratio=0.1) for s in range(1, 7)] == pytest.approx(
        [0.5, 1.0, 1.0, 0.7, 0.4, 0.1])
    assert [lr_at(s, 4, 3e-4) for s in range(1, 5)] == [3e-4] * 4
    assert lr_at(1, 1, 2.0, "cosine") == 2.0  # one step: nothing to fall over


def test_an_lr_schedule_reaches_the_optimizer_and_a_resumed_run_follows_it(registry, tmp_path):
    """Each step trains at lr_at(step) (the optimizer's rate and the ``lr`` metric), and a run that
    crashed after its step-2 checkpoint resumes on the same schedule, step for step."""
    schedule = {"steps": 4, "checkpoint_every": 2, "lr_schedule": "cosine", "lr_min_ratio": 0.1}
    straight = _fit(_trainer(registry, tmp_path / "a", **schedule))
    assert [m["lr"] for m in straight] == pytest.approx([lr_at(s, 4, 1e-2, "cosine", 0, 0.1) for s in range(1, 5)])

    crashed = _trainer(registry, tmp_path / "b", **schedule)
    seen: list[dict[str, float]] = []

    def crash(step, metrics):
        if step == 3:
            raise RuntimeError("killed")
        seen.append(metrics)

    crashed.on_step = crash
    with pytest.raises(RuntimeError, match="killed"):
        crashed.fit()
    resumed = _trainer(registry, tmp_path / "b", **schedule)
    rest = _fit(resumed)
    assert resumed.optimizer.param_groups[0]["lr"] == pytest.approx(1e-3)  # the last step's: 10% of lr
    for a, b in zip(straight, seen + rest, strict=True):
        assert _same(a, b), (a, b)


@pytest.mark.parametrize(
    ("key", "value", "rule"),
    [
        ("prompts_per_step", 0, "must be at least 1"),
        ("lr_schedule", "step", "must be one of constant, cosine, linear"),
        ("lr_min_ratio", 1.5, "must be a number in \\[0, 1\\]"),
        ("lr_warmup_steps", -1, "must be >= 0"),
        ("lr", -1e-4, "must be a finite number > 0"),  # a negative rate would climb the loss, silently
        ("lr", float("nan"), "must be a finite number > 0"),
        ("temperature", -0.5, ">= 0 \\(0: greedy\\)"),
        ("top_p", 0.0, "must be in \\(0, 1\\]"),
        ("max_new_tokens", 0, "must be at least 1"),
        ("keep_checkpoints", 0, "a resumed run starts from the newest"),
        ("max_turns", 0, "actions per episode"),
        ("max_live_episodes", 0, "must be at least 1"),
    ],
)
def test_out_of_range_options_are_refused_naming_the_key(key, value, rule):
    with pytest.raises(ConfigError, match=f"^{key}: .*{rule}"):
        RLConfig(**{key: value})


def test_checkpoint_every_0_saves_the_last_step_only(registry, tmp_path):
    _fit(_trainer(registry, tmp_path, steps=2, checkpoint_every=0))
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("step-*")) == ["step-000002"]
    with pytest.raises(ConfigError, match="checkpoint_every: -1 is negative"):
        RLConfig(checkpoint_every=-1)


def _read(path: Path) -> dict[int, dict[str, float]]:
    records = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return {r.pop("step"): r for r in records}  # a step re-run after a resume overwrites the partial one


@pytest.mark.slow
def test_sigkill_mid_run_resumes_and_matches(tmp_path):
    steps = 6
    env = {**os.environ, "PYTHONPATH": str(HERE), "OMP_NUM_THREADS": "1"}
    script = str(HERE / "rl_toy_run.py")
    subprocess.run([sys.executable, script, str(tmp_path / "a"), str(steps)], env=env, check=True)
    killed_dir = tmp_path / "b"
    killed_dir.mkdir()
    proc = subprocess.Popen([sys.executable, script, str(killed_dir), str(steps)], env=env)
    deadline = time.time() + 120
    while len(_read(killed_dir / "metrics-rank0.jsonl")) < 2 and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = len(_read(killed_dir / "metrics-rank0.jsonl"))
    assert 2 <= done_before < steps
    subprocess.run([sys.executable, script, str(killed_dir), str(steps)], env=env, check=True)
    straight, resumed = _read(tmp_path / "a" / "metrics-rank0.jsonl"), _read(killed_dir / "metrics-rank0.jsonl")
    assert sorted(resumed) == list(range(1, steps + 1))
    for step in straight:
        assert _same(straight[step], resumed[step]), step


# The balance loss is computed from each rank's own tokens (a per-micro-batch statistic), so it is
# left out here: with it the ranks' gradients differ by design, not by error.
DISTRIBUTED_ALGOS = {
    "grpo_kl": {"kl_coef": 0.05, "balance_coef": 0.0},
    # two-token prompts: groups share their prompt in the no-grad forwards (old and reference log-probs)
    "grpo_kl_shared_prompts": {"kl_coef": 0.05, "balance_coef": 0.0},
    # each rank's 16 rows in forwards of 3 (micro_batch_size), against one process's one forward
    "grpo_kl_micro_batches": {"kl_coef": 0.05, "balance_coef": 0.0},
    "ppo_critic": {
        "advantage": {"name": "gae"},
        "critic": {"lr": 0.01},
        "epochs": 2,
        "minibatches": 2,
        "kl_coef": 0.05,
        "kl_in_reward": True,
        "balance_coef": 0.0,
    },
}

# Routing decisions the rank comparison lets differ per step (near-ties broken another way).
ROUTING_FLIPS = 2


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("name", sorted(DISTRIBUTED_ALGOS))
def test_two_fsdp2_ranks_match_one_rank(tmp_path, name):
    """Two ranks (each half the batch, gradients reduce-scattered) train as one process does.

    Both run in float64. In float32 the ranks' other summation order (half batches, a gradient
    sum across ranks) is ~1e-7 at the first update but grows update after update (PPO's 4 per
    step): 3e-4 relative on the loss by step 2, enough to flip a router's near-tie (top-k of
    nearly equal logits). In float64 the trajectories agree to ~1e-7 relative at step 3 (what stays
    float32 is what the code computes in fp32 on purpose: router logits, log-softmax, sums of
    per-token fp32 terms), and a flip needs a near-tie within one fp32 rounding of the router logits.
    """
    env = {**os.environ, "PYTHONPATH": str(HERE), "OMP_NUM_THREADS": "1"}
    script = str(HERE / "rl_toy_run.py")
    algo = json.dumps(DISTRIBUTED_ALGOS[name])
    # checkpoint every step; two-token prompts for the shared-prompt case; float64 parameters
    extra = ["1", "2" if "shared_prompts" in name else "1", "float64"]
    subprocess.run([sys.executable, script, str(tmp_path / "one"), "3", algo, *extra], env=env, check=True)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    ranks_env = {**env, "CODEMOE_TEST_MICRO_BATCH": "3"} if "micro" in name else env
    subprocess.run([*torchrun, script, str(tmp_path / "two"), "3", algo, *extra], env=ranks_env, check=True)
    one, two = _read(tmp_path / "one" / "metrics-rank0.jsonl"), _read(tmp_path / "two" / "metrics-rank0.jsonl")
    assert sorted(two) == [1, 2, 3]
    keys = ("loss", "reward_mean", "kl", "entropy", "grad_norm", "clip_frac", "adv_abs_mean")
    keys += ("vf_loss",) if "critic" in name else ()
    # (with shared prompts one process shares them in its update forward too, so routes fewer tokens)
    routed = "shared_prompts" not in name
    if routed:
        keys += ("moe/entropy",)  # the router's probabilities: continuous, summed over both ranks
    config = tiny_policy().config
    top_k, experts = config.num_experts_per_tok, config.num_experts
    for step in (1, 2, 3):
        a, b = one[step], two[step]
        for key in keys:
            # float64 trajectories, float32 per-token sums: 1e-4 bounds n*eps32 over the step's few
            # hundred tokens, and covers what one legitimately flipped routing decision moves
            # (measured in float32: 1e-4 relative on grad_norm, 1e-5 absolute on the loss)
            assert abs(a[key] - b[key]) <= 1e-4 + 1e-3 * abs(a[key]), (step, key, a[key], b[key])
        if not routed:
            continue
        # Routing counts are discrete: a token whose top-k scores tie within rounding may take
        # another expert on one rank than in one process. One such decision moves an expert's share
        # of a layer's k*tokens assignments by 1/(k*tokens), and max/mean by E/(k*tokens) (the toy
        # policy has no capacity limit: every assignment is kept). Allow FLIPS decisions.
        assert a["moe/tokens"] == b["moe/tokens"], step  # which tokens are routed is not a float
        decision = 1.0 / (top_k * a["moe/tokens"])
        for key in ("moe/max_over_mean", *(k for k in a if k.startswith("expert_load/"))):
            bound = ROUTING_FLIPS * decision * (experts if key == "moe/max_over_mean" else 1)
            assert abs(a[key] - b[key]) <= bound * (1 + 1e-9), (step, key, a[key], b[key])


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize(("first", "then"), [(1, 2), (2, 1)])
def test_a_run_resumes_on_another_number_of_ranks_and_continues_step_for_step(tmp_path, first, then):
    """Two steps on ``first`` ranks, a checkpoint, two more on ``then`` ranks: the last steps are those
    of an uninterrupted one-process run (DCP reshards the model and optimizer; the data cursor and the
    sampling seeds are global). float64 and the rank comparison's tolerances, for the same reasons."""
    env = {**os.environ, "PYTHONPATH": str(HERE), "OMP_NUM_THREADS": "1"}
    script = str(HERE / "rl_toy_run.py")
    algo = json.dumps(DISTRIBUTED_ALGOS["grpo_kl"])

    def run(world: int, out: Path, steps: int) -> None:
        launch = [sys.executable] if world == 1 else [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(world)]
        subprocess.run([*launch, script, str(out), str(steps), algo, "1", "1", "float64"], env=env, check=True)

    run(1, tmp_path / "straight", 4)
    run(first, tmp_path / "moved", 2)
    run(then, tmp_path / "moved", 4)
    straight, moved = _read(tmp_path / "straight" / "metrics-rank0.jsonl"), _read(tmp_path / "moved" / "metrics-rank0.jsonl")
    assert sorted(moved) == [1, 2, 3, 4]
    for step in (3, 4):
        for key in ("loss", "reward_mean", "kl", "entropy", "grad_norm", "adv_abs_mean"):
            a, b = straight[step][key], moved[step][key]
            assert abs(a - b) <= 1e-4 + 1e-3 * abs(a), (step, key, a, b)


@pytest.mark.slow
@pytest.mark.distributed
def test_one_server_behind_every_rank_gets_the_weights_from_rank_0_only(tmp_path):
    """With a remote engine every rank's client talks to the same server: rank 0 alone posts each
    update (not world-size racing loads), and no rank samples before it landed: every rank's next
    generate already carries the version rank 0's update set."""
    env = {**os.environ, "PYTHONPATH": str(HERE), "OMP_NUM_THREADS": "1", "TOY_SHARED_ENGINE": str(tmp_path / "log")}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    subprocess.run([*torchrun, str(HERE / "rl_toy_run.py"), str(tmp_path / "two"), "2"], env=env, check=True)
    logs = [(tmp_path / f"log-rank{r}.txt").read_text().splitlines() for r in (0, 1)]
    # the trainer syncs once before the first step and after each step
    assert [line for line in logs[0] if line.startswith("update")] == ["update v1", "update v2", "update v3"]
    assert not [line for line in logs[1] if line.startswith("update")]
    for log in logs:
        versions = [line.split()[1] for line in log if line.startswith("generate")]
        assert versions and versions[0] == "v1" and versions[-1] == "v2"
