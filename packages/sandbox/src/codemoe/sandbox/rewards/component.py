"""The base class of reward components: a config plus ``__call__(RewardInput) -> RewardValue``."""

from __future__ import annotations

from codemoe.sandbox.rewards.types import RewardConfig, RewardInput, RewardValue

__all__ = ["RewardComponent"]


class RewardComponent:
    """A reward component. Subclasses set ``name`` and ``config_class`` and define ``__call__``.

    The class itself is the registered factory: ``factory(config)`` builds it. Any callable with the
    same signature works as a component; this base only saves writing the constructor.
    """

    name = ""
    config_class: type[RewardConfig] = RewardConfig

    def __init__(self, config: RewardConfig | None = None) -> None:
        self.config = config if config is not None else self.config_class()

    def __call__(self, inp: RewardInput) -> RewardValue:
        raise NotImplementedError(f"{type(self).__name__} must define __call__")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config})"
