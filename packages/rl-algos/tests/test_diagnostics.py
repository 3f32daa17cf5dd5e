"""The health checks of the troubleshooting table fire on the histories they describe, and only then."""

from __future__ import annotations

from codemoe.rl.diagnostics import HealthConfig, HealthMonitor


def _step(**values):
    base = {"reward_mean": 0.3, "grad_norm": 1.0, "zero_signal_frac": 0.1, "kl": 0.01, "entropy": 1.0}
    return {**base, **values}


def _fired(history):
    monitor = HealthMonitor(HealthConfig(window=4))
    return [w.check for step, m in enumerate(history, 1) for w in monitor.observe(step, m)]


def test_healthy_training_is_quiet():
    assert _fired([_step(reward_mean=0.1 * i) for i in range(8)]) == []


def test_flat_reward_with_noisy_updates_asks_for_more_samples_first():
    history = [_step(grad_norm=g) for g in (0.1, 3.0, 0.2, 2.5)]
    monitor = HealthMonitor(HealthConfig(window=4))
    warnings = [w for step, m in enumerate(history, 1) for w in monitor.observe(step, m)]
    assert [w.check for w in warnings] == ["reward_flat_high_variance"]
    assert "2-3x before touching the learning rate" in warnings[0].remedy
    # flat reward with steady updates is not the same problem
    assert _fired([_step(grad_norm=1.0)] * 4) == []


def test_zero_signal_kl_and_entropy_checks():
    assert _fired([_step(zero_signal_frac=0.75)]) == ["zero_signal_groups"]
    assert _fired([_step(kl=2.0)]) == ["kl_runaway"]
    assert _fired([_step(entropy=0.01)]) == ["entropy_collapse"]
    assert _fired([_step(**{"moe/max_over_mean": 3.5})]) == ["router_collapse"]


def test_an_engine_that_does_not_sample_from_the_policy_is_flagged_unless_the_batch_is_stale():
    # what a synchronous step of the agentic-repos pipeline logged when a decode bug made the
    # engine read uninitialised memory: a tiny mean, one token 14 nats off
    assert _fired([_step(logp_mismatch_mean=0.0023, logp_mismatch_max=14.96)]) == ["engine_mismatch"]
    # float-order noise and a router near-tie flipping an expert are not
    assert _fired([_step(logp_mismatch_mean=0.0, logp_mismatch_max=0.0033)]) == []
    # one version behind, the policy's own lag moves log-probs; the IS correction owns that case
    assert _fired([_step(logp_mismatch_mean=0.1, logp_mismatch_max=14.96, staleness_mean=1.0)]) == []


def test_cooldown_keeps_a_long_run_readable():
    fired = _fired([_step(kl=2.0)] * 25)
    assert fired == ["kl_runaway"] * 3  # steps 1, 11, 21 with the default 10-step cooldown


def test_state_round_trips_for_checkpoints():
    monitor = HealthMonitor()
    monitor.observe(1, _step(kl=2.0))
    restored = HealthMonitor()
    restored.load(monitor.state())
    assert restored.warnings == monitor.warnings and restored.history == monitor.history
    assert restored.observe(2, _step(kl=2.0)) == []  # still cooling down after the restore


def test_update_cv_is_the_grad_norm_coefficient_of_variation():
    from codemoe.rl.diagnostics import update_cv

    assert update_cv([_step(grad_norm=1.0), _step(grad_norm=3.0)]) == 0.5  # pstdev 1 / mean 2
    assert update_cv([_step(grad_norm=0.0)]) == 0.0
