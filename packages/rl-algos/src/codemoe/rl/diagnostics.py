"""Training-health checks from the seeds' troubleshooting table, printed as warnings with the remedy.

Each check reads the recent history of step metrics and returns a :class:`HealthWarning` or None.
The monitor runs every check after every step, logs what fires (once per check per ``cooldown``
steps, so a long run is not flooded) and keeps the list for the stage's result.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["HealthConfig", "HealthMonitor", "HealthWarning", "update_cv"]

log = logging.getLogger("codemoe.rl")


@dataclass
class HealthConfig:
    """Thresholds of the health checks."""

    window: int = 8  # steps of history the trend checks look at
    flat_reward_delta: float = 0.02  # reward counts as flat when it moved less than this over the window
    high_update_cv: float = 0.5  # ... while the grad norm's coefficient of variation is above this
    zero_signal_frac: float = 0.5  # warn when more than this fraction of groups carry no signal
    kl_max: float = 0.5  # warn when the mean per-token KL to the reference exceeds this
    entropy_min: float = 0.05  # warn when the mean token entropy (nats) falls below this
    expert_max_over_mean: float = 3.0  # warn when the busiest expert's load exceeds this many times the mean
    # warn when, with the engine on the trainer's weights (no staleness), some token's log-prob from the
    # engine is this many nats off the trainer's: the engine is not sampling from the policy
    logp_mismatch_max: float = 5.0
    cooldown: int = 10  # steps before the same check may warn again


@dataclass(frozen=True)
class HealthWarning:
    """One finding: what is wrong (with the numbers) and what to do."""

    check: str
    step: int
    message: str
    remedy: str


Check = Callable[[Sequence[dict[str, Any]], HealthConfig], tuple[str, str] | None]


def update_cv(history: Sequence[dict[str, Any]]) -> float:
    """Coefficient of variation of the grad norm over ``history``: how much the update size varies."""
    norms = [m["grad_norm"] for m in history]
    mean = statistics.fmean(norms) if norms else 0.0
    return statistics.pstdev(norms) / mean if mean > 0 else 0.0


def reward_flat_high_variance(history: Sequence[dict[str, Any]], cfg: HealthConfig) -> tuple[str, str] | None:
    recent = history[-cfg.window :]
    if len(recent) < cfg.window:
        return None
    rewards = [m["reward_mean"] for m in recent]
    cv = update_cv(recent)
    if max(rewards) - min(rewards) < cfg.flat_reward_delta and cv > cfg.high_update_cv:
        return (
            f"reward flat ({min(rewards):.3f}..{max(rewards):.3f}) over {cfg.window} steps while the update "
            f"size varies a lot (grad-norm CV {cv:.2f})",
            "sample more: grow rollouts per step (prompts or group_size) 2-3x before touching the learning "
            "rate; then lower the LR",
        )
    return None


def zero_signal_groups(history: Sequence[dict[str, Any]], cfg: HealthConfig) -> tuple[str, str] | None:
    frac = history[-1].get("zero_signal_frac", 0.0)
    if frac > cfg.zero_signal_frac:
        return (
            f"{frac:.0%} of groups got the same reward for every sample and carry no learning signal",
            "raise group_size, turn on dynamic sampling (algo.dynamic_sampling.refill_rounds), or move to "
            "tasks of matching difficulty",
        )
    return None


def kl_runaway(history: Sequence[dict[str, Any]], cfg: HealthConfig) -> tuple[str, str] | None:
    kl = history[-1].get("kl")
    if kl is not None and kl > cfg.kl_max:
        return (
            f"KL to the reference policy is {kl:.3f} per token (limit {cfg.kl_max})",
            "raise algo.kl_coef or lower the learning rate; check the reward for exploits",
        )
    return None


def entropy_collapse(history: Sequence[dict[str, Any]], cfg: HealthConfig) -> tuple[str, str] | None:
    entropy = history[-1].get("entropy")
    if entropy is not None and entropy < cfg.entropy_min:
        return (
            f"token entropy fell to {entropy:.3f} nats: the policy has stopped exploring",
            "raise the sampling temperature, use clip-higher (policy_loss.clip_high 0.28), or lower the LR",
        )
    return None


def router_collapse(history: Sequence[dict[str, Any]], cfg: HealthConfig) -> tuple[str, str] | None:
    ratio = history[-1].get("moe/max_over_mean")
    if ratio is not None and ratio > cfg.expert_max_over_mean:
        return (
            f"the busiest expert takes {ratio:.1f}x the mean load: the router is collapsing",
            "raise the balance-loss weight (algo.balance_coef), or warm the router up with SFT first",
        )
    return None


def engine_mismatch(history: Sequence[dict[str, Any]], cfg: HealthConfig) -> tuple[str, str] | None:
    last = history[-1]
    worst = last.get("logp_mismatch_max")
    if worst is None or last.get("staleness_mean", 0.0) > 0:  # a stale batch differs by the policy's lag too
        return None
    if worst > cfg.logp_mismatch_max:
        return (
            f"the engine's log-prob of a sampled token is {worst:.2f} nats off the trainer's on the same weights "
            f"(mean {last.get('logp_mismatch_mean', 0.0):.4f}): the engine is not sampling from the policy, "
            "so the update trains on off-policy tokens",
            "check that the weights reach the engine after every update (engine weights_version, the weight "
            "sync), that both run the same precision, and the engine's own log-probs against a teacher-forced "
            "forward; raise health.logp_mismatch_max only for an engine known to differ this much",
        )
    return None


CHECKS: dict[str, Check] = {
    "reward_flat_high_variance": reward_flat_high_variance,
    "zero_signal_groups": zero_signal_groups,
    "kl_runaway": kl_runaway,
    "entropy_collapse": entropy_collapse,
    "router_collapse": router_collapse,
    "engine_mismatch": engine_mismatch,
}


@dataclass
class HealthMonitor:
    """Runs every check after each step and remembers what fired."""

    config: HealthConfig = field(default_factory=HealthConfig)
    history: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[HealthWarning] = field(default_factory=list)
    last_fired: dict[str, int] = field(default_factory=dict)

    def observe(self, step: int, metrics: dict[str, Any]) -> list[HealthWarning]:
        """Add one step's metrics; return (and log) the warnings that fire now."""
        self.history.append(dict(metrics))
        del self.history[: -self.config.window]
        fired = []
        for name, check in CHECKS.items():
            found = check(self.history, self.config)
            if found is None or step - self.last_fired.get(name, -self.config.cooldown) < self.config.cooldown:
                continue
            self.last_fired[name] = step
            warning = HealthWarning(name, step, *found)
            log.warning("step %d: %s. Remedy: %s.", step, warning.message, warning.remedy)
            fired.append(warning)
        self.warnings.extend(fired)
        return fired

    def state(self) -> dict[str, Any]:
        """JSON-able state for checkpoints."""
        return {
            "history": self.history,
            "warnings": [asdict(w) for w in self.warnings],
            "last_fired": self.last_fired,
        }

    def load(self, state: dict[str, Any]) -> None:
        self.history = list(state["history"])
        self.warnings = [HealthWarning(**w) for w in state["warnings"]]
        self.last_fired = dict(state["last_fired"])
